package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The fenced resource: a shared store that every primary writes to with its
// epoch, and that refuses writes carrying an epoch older than the newest it
// has accepted. This is the fencing-token check of Kleppmann's argument: a
// leader that was paused or cut off and still believes it leads is stopped
// at the resource, whatever the election thinks.

// Write is one write request: who writes, under which epoch (fencing token),
// and its own sequence number.
type Write struct {
	Node  string `json:"node"`
	Epoch int64  `json:"epoch"`
	Seq   int64  `json:"seq"`
}

// Verdict is the store's answer to a Write.
type Verdict struct {
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"` // "stale epoch" when refused
	MaxEpoch int64  `json:"max_epoch"`        // newest epoch accepted so far
}

// Stats counts the store's decisions since it started; MaxEpoch survives
// restarts.
type Stats struct {
	Accepted      int64 `json:"accepted"`
	RejectedStale int64 `json:"rejected_stale"`
	MaxEpoch      int64 `json:"max_epoch"`
}

// decision is one line of the decision log.
type decision struct {
	Time     string `json:"time"` // RFC 3339 with nanoseconds
	Node     string `json:"node"`
	Epoch    int64  `json:"epoch"`
	Seq      int64  `json:"seq"`
	Accepted bool   `json:"accepted"`
	MaxEpoch int64  `json:"max_epoch"`
}

// ReasonStale is Verdict.Reason for a write refused for its epoch.
const ReasonStale = "stale epoch"

var errBadWrite = errors.New("a write needs a node and an epoch >= 1")

// Store files, in its directory.
const (
	storeStateFile = "max_epoch.json"
	storeLogFile   = "decisions.jsonl"
)

// Store is the fenced resource. Its methods are safe for concurrent use.
type Store struct {
	dir string
	now func() time.Time

	mu    sync.Mutex // serialises decisions, so the log is in decision order
	stats Stats
	log   *os.File
}

// OpenStore opens (creating if needed) a store kept in dir: max_epoch.json
// holds the newest accepted epoch, decisions.jsonl one line per decision.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &Store{dir: dir, now: time.Now}
	var st struct {
		MaxEpoch int64 `json:"max_epoch"`
	}
	if _, err := readJSON(filepath.Join(dir, storeStateFile), &st); err != nil {
		return nil, fmt.Errorf("reading store state: %w", err)
	}
	s.stats.MaxEpoch = st.MaxEpoch
	f, err := os.OpenFile(filepath.Join(dir, storeLogFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	s.log = f
	return s, nil
}

// Close closes the decision log.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Close()
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Write accepts w if its epoch is at least the newest accepted so far. An
// error means nothing was decided (bad request, or the state could not be
// saved) and nothing was counted.
func (s *Store) Write(w Write) (Verdict, error) {
	if w.Node == "" || w.Epoch < 1 {
		return Verdict{}, errBadWrite
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := w.Epoch >= s.stats.MaxEpoch
	if ok && w.Epoch > s.stats.MaxEpoch {
		// Durable before we say yes: a store that forgot a newer epoch
		// after a crash would accept the old leader's writes again.
		if err := writeJSONAtomic(filepath.Join(s.dir, storeStateFile), map[string]int64{"max_epoch": w.Epoch}); err != nil {
			return Verdict{}, fmt.Errorf("saving max_epoch: %w", err)
		}
		s.stats.MaxEpoch = w.Epoch
	}
	v := Verdict{Accepted: ok, MaxEpoch: s.stats.MaxEpoch}
	if ok {
		s.stats.Accepted++
	} else {
		v.Reason = ReasonStale
		s.stats.RejectedStale++
	}
	line, _ := json.Marshal(decision{
		Time: s.now().UTC().Format(time.RFC3339Nano), Node: w.Node, Epoch: w.Epoch, Seq: w.Seq,
		Accepted: ok, MaxEpoch: s.stats.MaxEpoch,
	})
	// One write(2) per line with O_APPEND: lines never interleave. A failed
	// log write does not undo the decision; it is reported on stderr.
	if _, err := s.log.Write(append(line, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "store: appending to decision log: %v\n", err)
	}
	return v, nil
}

// Handler serves POST /write, GET /stats and GET /health.
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		var req Write
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, "bad write: "+err.Error(), http.StatusBadRequest)
			return
		}
		v, err := s.Write(req)
		switch {
		case errors.Is(err, errBadWrite):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		case !v.Accepted:
			writeJSON(w, http.StatusConflict, v)
		default:
			writeJSON(w, http.StatusOK, v)
		}
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Stats())
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
