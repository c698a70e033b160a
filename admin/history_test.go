package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/cluster"
)

// fakeHistory answers History with a fixed list or error, counting reads.
type fakeHistory struct {
	mu    sync.Mutex
	list  []cluster.HistoryEntry
	err   error
	reads int
}

func (f *fakeHistory) History(context.Context) ([]cluster.HistoryEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.list, f.err
}

// GET /v1/history: 200 with the list ([] when none), 503 with the reason
// when it cannot be read, at most one read per second however many
// requests come (the endpoint is open), only GET and HEAD, and the rest
// of the API still behind it.
func TestHistoryEndpoint(t *testing.T) {
	src := &fakeHistory{}
	clock := &fakeClock{t: time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)}
	rest := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := admin.WithHistory(rest, src, clock.now)
	get := func(method, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code, rec.Body.String()
	}

	if code, body := get("GET", admin.HistoryPath); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("no history: %d %q, want 200 []", code, body)
	}
	e := cluster.HistoryEntry{At: clock.now(), NewLeader: "b", NewEpoch: 7, Reason: cluster.HistoryFailover, FenceMethod: "rpc", OldLeader: "a", OldEpoch: 3}
	src.mu.Lock()
	src.list = []cluster.HistoryEntry{e}
	src.mu.Unlock()
	if _, body := get("GET", admin.HistoryPath); strings.TrimSpace(body) != "[]" || src.reads != 1 {
		t.Errorf("within a second of the last read: %q after %d reads, want the same answer from one read", body, src.reads)
	}
	clock.add(time.Second)
	code, body := get("GET", admin.HistoryPath)
	var got []cluster.HistoryEntry
	if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil || len(got) != 1 || got[0] != e {
		t.Errorf("a second later: %d %q, want the entry", code, body)
	}
	src.mu.Lock()
	src.err = errors.New("zookeeper unreachable")
	src.mu.Unlock()
	clock.add(time.Second)
	if code, body := get("GET", admin.HistoryPath); code != http.StatusServiceUnavailable || !strings.Contains(body, "zookeeper unreachable") {
		t.Errorf("unreadable: %d %q, want 503 with the reason", code, body)
	}
	if code, _ := get("HEAD", admin.HistoryPath); code != http.StatusServiceUnavailable {
		t.Errorf("HEAD: %d", code)
	}
	if code, _ := get("POST", admin.HistoryPath); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", code)
	}
	if code, _ := get("GET", "/v1/status"); code != http.StatusTeapot {
		t.Errorf("another path: %d, want the rest of the API's answer", code)
	}
}

// fakeClock is a settable now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
