package admin

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// HistoryPath answers GET with the cluster's history.
const HistoryPath = "/v1/history"

// HistorySource reads the cluster's history (GET /v1/history); the
// daemon's zkcluster.Store implements it.
type HistorySource interface {
	History(ctx context.Context) ([]cluster.HistoryEntry, error)
}

// History answer pacing: the endpoint is open (no token), and every read
// goes to ZooKeeper, so a burst of requests is answered from one read per
// historyReuse; a read is bounded by historyReadTimeout.
const (
	historyReuse       = time.Second
	historyReadTimeout = 5 * time.Second
)

// withHistory serves GET /v1/history from src in front of next (the rest
// of the API): 200 with the JSON list, oldest first ([] when none), or 503
// {"error": ...} when the history cannot be read (ZooKeeper out of reach,
// an unreadable record).
func withHistory(next http.Handler, src HistorySource) http.Handler {
	return withHistoryClock(next, src, time.Now)
}

func withHistoryClock(next http.Handler, src HistorySource, now func() time.Time) http.Handler {
	h := &historyAnswer{src: src, now: now}
	mux := http.NewServeMux()
	mux.HandleFunc(HistoryPath, h.serve)
	mux.Handle("/", next)
	return mux
}

// historyAnswer reads the history at most once per historyReuse; requests
// meanwhile wait for the read in flight and share its answer.
type historyAnswer struct {
	src HistorySource
	now func() time.Time

	mu   sync.Mutex
	at   time.Time // when last read (zero: never)
	list []cluster.HistoryEntry
	err  error
}

func (h *historyAnswer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorAnswer{"method must be GET"})
		return
	}
	list, err := h.read()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, errorAnswer{"cannot read the history: " + err.Error()})
		return
	}
	if list == nil {
		list = []cluster.HistoryEntry{}
	}
	writeJSON(w, http.StatusOK, list)
}

// read returns the last answer, read again when older than historyReuse.
// The read is not tied to one request: the requester leaving must not
// hand its cancellation to the others sharing the answer.
func (h *historyAnswer) read() ([]cluster.HistoryEntry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := h.now(); h.at.IsZero() || now.Sub(h.at) >= historyReuse || now.Before(h.at) {
		rctx, cancel := context.WithTimeout(context.Background(), historyReadTimeout)
		h.list, h.err = h.src.History(rctx)
		cancel()
		h.at = h.now()
	}
	return h.list, h.err
}
