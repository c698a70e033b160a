package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func startStore(t *testing.T, dir string) (*Store, *httptest.Server) {
	t.Helper()
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(st.Handler())
	t.Cleanup(func() { srv.Close(); st.Close() })
	return st, srv
}

func TestStoreRejectsStaleEpochsAndCountsThem(t *testing.T) {
	dir := t.TempDir()
	_, srv := startStore(t, dir)

	for _, tc := range []struct {
		w    Write
		code int
	}{
		{Write{Node: "node-a", Epoch: 5, Seq: 1}, http.StatusOK},
		{Write{Node: "node-a", Epoch: 5, Seq: 2}, http.StatusOK}, // same epoch: still the leader
		{Write{Node: "node-b", Epoch: 9, Seq: 1}, http.StatusOK}, // new leader
		{Write{Node: "node-a", Epoch: 5, Seq: 3}, http.StatusConflict},
		{Write{Node: "node-a", Epoch: 8, Seq: 4}, http.StatusConflict},
		{Write{Node: "node-b", Epoch: 9, Seq: 2}, http.StatusOK},
	} {
		var v Verdict
		code, body := call(t, "POST", srv.URL+"/write", tc.w, &v)
		if code != tc.code {
			t.Fatalf("write %+v: got %d %s, want %d", tc.w, code, body, tc.code)
		}
		if wantOK := tc.code == http.StatusOK; v.Accepted != wantOK {
			t.Errorf("write %+v: accepted=%v", tc.w, v.Accepted)
		}
		if !v.Accepted && v.Reason != ReasonStale {
			t.Errorf("write %+v: reason %q, want %q", tc.w, v.Reason, ReasonStale)
		}
	}

	// Malformed writes are refused without being counted.
	for _, bad := range []any{Write{Node: "node-a", Epoch: 0}, Write{Epoch: 3}, map[string]any{"node": "x", "epoch": 1, "extra": 1}} {
		if code, body := call(t, "POST", srv.URL+"/write", bad, nil); code != http.StatusBadRequest {
			t.Errorf("write %+v: got %d %s, want 400", bad, code, body)
		}
	}

	var stats Stats
	if code, _ := call(t, "GET", srv.URL+"/stats", nil, &stats); code != http.StatusOK {
		t.Fatalf("GET /stats: %d", code)
	}
	if want := (Stats{Accepted: 4, RejectedStale: 2, MaxEpoch: 9}); stats != want {
		t.Errorf("stats = %+v, want %+v", stats, want)
	}

	// Every decision is in the log, in order, with a parseable time.
	data, err := os.ReadFile(filepath.Join(dir, storeLogFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := jsonLines(t, string(data))
	wantAccepted := []bool{true, true, true, false, false, true}
	if len(lines) != len(wantAccepted) {
		t.Fatalf("decision log has %d lines, want %d:\n%s", len(lines), len(wantAccepted), data)
	}
	for i, l := range lines {
		if l["accepted"] != wantAccepted[i] {
			t.Errorf("decision %d: %v, want accepted=%v", i, l, wantAccepted[i])
		}
		if _, err := time.Parse(time.RFC3339Nano, l["time"].(string)); err != nil {
			t.Errorf("decision %d: time: %v", i, err)
		}
	}
}

func TestStoreMaxEpochSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := st.Write(Write{Node: "node-a", Epoch: 7, Seq: 1}); err != nil || !v.Accepted {
		t.Fatalf("first write: %+v, %v", v, err)
	}
	st.Close()

	st, srv := startStore(t, dir)
	if got := st.Stats().MaxEpoch; got != 7 {
		t.Fatalf("max_epoch after restart = %d, want 7", got)
	}
	if code, body := call(t, "POST", srv.URL+"/write", Write{Node: "node-b", Epoch: 6, Seq: 1}, nil); code != http.StatusConflict {
		t.Fatalf("stale write after restart: got %d %s, want 409", code, body)
	}
	if got := st.Stats(); got.RejectedStale != 1 || got.Accepted != 0 {
		t.Errorf("stats after restart = %+v", got)
	}
}
