package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func startService(t *testing.T, cfg ServiceConfig) (*Service, *httptest.Server) {
	t.Helper()
	svc, err := NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(func() { srv.Close(); svc.Close() })
	return svc, srv
}

// promote POSTs /promote?epoch= and returns the status and the role state
// the service answers with (on 409 it is under "state").
func promote(t *testing.T, base string, epoch int64) (int, RoleState) {
	t.Helper()
	var ans struct {
		RoleState
		State *RoleState `json:"state"`
	}
	code, _ := call(t, "POST", fmt.Sprintf("%s/promote?epoch=%d", base, epoch), nil, &ans)
	if ans.State != nil {
		return code, *ans.State
	}
	return code, ans.RoleState
}

func role(t *testing.T, base string) RoleState {
	t.Helper()
	var st RoleState
	if code, body := call(t, "GET", base+"/role", nil, &st); code != http.StatusOK {
		t.Fatalf("GET /role: %d %s", code, body)
	}
	return st
}

func TestPromoteRefusesLowerEpoch(t *testing.T) {
	_, srv := startService(t, ServiceConfig{Node: "node-a", StateDir: t.TempDir()})

	if st := role(t, srv.URL); st.Role != RoleStandby || st.Node != "node-a" || st.Epoch != 0 {
		t.Fatalf("fresh service: %+v, want standby node-a epoch 0", st)
	}
	steps := []struct {
		epoch, code int
		wantEpoch   int64 // epoch the service holds afterwards
	}{
		{5, http.StatusOK, 5},
		{5, http.StatusOK, 5},       // a retried hook is harmless
		{3, http.StatusConflict, 5}, // an older leader: refused, nothing changes
		{7, http.StatusOK, 7},       // a newer leadership
		{6, http.StatusConflict, 7},
	}
	for _, s := range steps {
		code, ans := promote(t, srv.URL, int64(s.epoch))
		if code != s.code {
			t.Fatalf("promote epoch %d: %d, want %d", s.epoch, code, s.code)
		}
		if ans.Epoch != s.wantEpoch {
			t.Fatalf("promote epoch %d answered %+v", s.epoch, ans)
		}
		if st := role(t, srv.URL); st.Role != RolePrimary || st.Epoch != s.wantEpoch {
			t.Fatalf("after promote %d: %+v, want primary at %d", s.epoch, st, s.wantEpoch)
		}
	}

	// After a demote, that leadership is over: its epoch cannot come back.
	if code, body := call(t, "POST", srv.URL+"/demote", nil, nil); code != http.StatusOK {
		t.Fatalf("demote: %d %s", code, body)
	}
	if st := role(t, srv.URL); st.Role != RoleStandby || st.Retired != 7 {
		t.Fatalf("after demote: %+v", st)
	}
	if code, _ := promote(t, srv.URL, 7); code != http.StatusConflict {
		t.Fatalf("re-promote with the demoted epoch: %d, want 409", code)
	}
	if code, st := promote(t, srv.URL, 8); code != http.StatusOK || st.Role != RolePrimary || st.Epoch != 8 {
		t.Fatalf("promote 8: %d %+v", code, st)
	}

	for _, q := range []string{"", "?epoch=x", "?epoch=0", "?epoch=-1"} {
		if code, _ := call(t, "POST", srv.URL+"/promote"+q, nil, nil); code != http.StatusBadRequest {
			t.Errorf("POST /promote%s: %d, want 400", q, code)
		}
	}
}

func TestFenceDemoteEndsOnlyOlderLeaderships(t *testing.T) {
	_, srv := startService(t, ServiceConfig{Node: "node-a", StateDir: t.TempDir()})
	promote(t, srv.URL, 9)

	// A fence of leadership 5 reaching a primary already at 9 is late: the
	// leadership it fences is over, the current one stays.
	var st RoleState
	call(t, "POST", srv.URL+"/demote?epoch=5", nil, &st)
	if st.Role != RolePrimary || st.Epoch != 9 {
		t.Fatalf("late fence: %+v, want primary at 9", st)
	}
	call(t, "POST", srv.URL+"/demote?epoch=9", nil, &st)
	if st.Role != RoleStandby || st.Retired != 9 {
		t.Fatalf("fence at 9: %+v, want standby, retired 9", st)
	}
	// A fence also teaches a standby a newer epoch.
	call(t, "POST", srv.URL+"/demote?epoch=12", nil, &st)
	if st.Epoch != 12 || st.Retired != 12 {
		t.Fatalf("fence at 12: %+v", st)
	}
	if code, _ := promote(t, srv.URL, 11); code != http.StatusConflict {
		t.Fatalf("promote 11 after fence at 12: %d, want 409", code)
	}
}

func TestRoleFileSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	svc, srv := startService(t, ServiceConfig{Node: "node-a", StateDir: dir})
	promote(t, srv.URL, 5)
	srv.Close()
	svc.Close()

	// role.json is complete JSON with no temporary files left beside it.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != roleFile && e.Name() != "local-store" {
			t.Errorf("unexpected file %s in state dir", e.Name())
		}
	}

	_, srv2 := startService(t, ServiceConfig{Node: "node-a", StateDir: dir})
	if st := role(t, srv2.URL); st.Role != RolePrimary || st.Epoch != 5 {
		t.Fatalf("after restart: %+v, want primary at 5", st)
	}
	if code, _ := promote(t, srv2.URL, 4); code != http.StatusConflict {
		t.Fatalf("promote 4 after restart: %d, want 409", code)
	}
	srv2.Close()

	// -standby: comes up standby but remembers the epoch it saw.
	_, srv3 := startService(t, ServiceConfig{Node: "node-a", StateDir: dir, Standby: true})
	if st := role(t, srv3.URL); st.Role != RoleStandby || st.Epoch != 5 {
		t.Fatalf("after restart with -standby: %+v, want standby at 5", st)
	}
	if code, _ := promote(t, srv3.URL, 5); code != http.StatusConflict {
		t.Fatalf("promote 5 after a standby restart: %d, want 409", code)
	}

	// Another node's state directory is refused.
	if _, err := NewService(ServiceConfig{Node: "node-b", StateDir: dir}); err == nil {
		t.Fatal("node-b opened node-a's role file")
	}
	// A torn role file is an error, not a silent fresh start.
	if err := os.WriteFile(filepath.Join(dir, roleFile), []byte(`{"node":"node-a","ro`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewService(ServiceConfig{Node: "node-a", StateDir: dir}); err == nil {
		t.Fatal("a corrupt role.json was accepted")
	}
}

func TestHealthToggle(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "unhealthy")
	_, srv := startService(t, ServiceConfig{Node: "node-a", StateDir: t.TempDir(), UnhealthyFile: flag})
	health := func() int {
		code, _ := call(t, "GET", srv.URL+"/health", nil, nil)
		return code
	}
	if got := health(); got != http.StatusOK {
		t.Fatalf("initial /health: %d", got)
	}
	if code, _ := call(t, "POST", srv.URL+"/admin/health?ok=false", nil, nil); code != http.StatusOK {
		t.Fatalf("POST /admin/health?ok=false: %d", code)
	}
	if got := health(); got != http.StatusServiceUnavailable {
		t.Fatalf("/health after ok=false: %d, want 503", got)
	}
	call(t, "POST", srv.URL+"/admin/health?ok=true", nil, nil)
	if got := health(); got != http.StatusOK {
		t.Fatalf("/health after ok=true: %d, want 200", got)
	}
	if code, _ := call(t, "POST", srv.URL+"/admin/health?ok=maybe", nil, nil); code != http.StatusBadRequest {
		t.Fatalf("POST /admin/health?ok=maybe: %d, want 400", code)
	}

	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := health(); got != http.StatusServiceUnavailable {
		t.Fatalf("/health with the unhealthy file: %d, want 503", got)
	}
	os.Remove(flag)
	if got := health(); got != http.StatusOK {
		t.Fatalf("/health after removing the file: %d, want 200", got)
	}
}

func TestWritesThroughSharedStore(t *testing.T) {
	st, store := startStore(t, t.TempDir())
	_, aSrv := startService(t, ServiceConfig{Node: "node-a", StateDir: t.TempDir(), StoreURL: store.URL})
	_, bSrv := startService(t, ServiceConfig{Node: "node-b", StateDir: t.TempDir(), StoreURL: store.URL})
	a, b := aSrv.URL, bSrv.URL

	write := func(base string) (int, WriteResult) {
		var r WriteResult
		code, _ := call(t, "POST", base+"/write", nil, &r)
		return code, r
	}
	if code, r := write(a); code != http.StatusServiceUnavailable || r.Accepted {
		t.Fatalf("write as standby: %d %+v, want 503", code, r)
	}
	promote(t, a, 3)
	if code, r := write(a); code != http.StatusOK || !r.Accepted || r.Epoch != 3 || r.Seq != 1 {
		t.Fatalf("write as primary at 3: %d %+v", code, r)
	}
	// node-b takes over with a newer epoch while node-a, not yet fenced,
	// still believes it is primary: the store stops node-a.
	promote(t, b, 4)
	if code, r := write(b); code != http.StatusOK || !r.Accepted {
		t.Fatalf("write from new primary: %d %+v", code, r)
	}
	if code, r := write(a); code != http.StatusConflict || r.Accepted || r.Reason != ReasonStale || r.MaxEpoch != 4 {
		t.Fatalf("write from old primary: %d %+v, want 409 stale epoch", code, r)
	}
	if got, want := st.Stats(), (Stats{Accepted: 2, RejectedStale: 1, MaxEpoch: 4}); got != want {
		t.Errorf("store stats %+v, want %+v", got, want)
	}

	// The store being down is an error, not a verdict.
	store.Close()
	if code, r := write(b); code != http.StatusBadGateway || r.Error == "" {
		t.Fatalf("write with the store down: %d %+v, want 502", code, r)
	}
}

func TestWriterWritesWhilePrimary(t *testing.T) {
	st, store := startStore(t, t.TempDir())
	var out syncBuffer
	svc, err := NewService(ServiceConfig{Node: "node-a", StateDir: t.TempDir(), StoreURL: store.URL, Log: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.RunWriter(ctx, 5*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()

	time.Sleep(30 * time.Millisecond)
	if n := st.Stats().Accepted; n != 0 {
		t.Fatalf("standby wrote %d times", n)
	}
	if _, err := svc.Promote(2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return st.Stats().Accepted >= 3 })
	if _, _, err := svc.Demote(0); err != nil {
		t.Fatal(err)
	}
	// The writer is sequential: at most the one write already in flight
	// when Demote returned may still land.
	n := st.Stats().Accepted
	time.Sleep(50 * time.Millisecond)
	if m := st.Stats().Accepted; m > n+1 {
		t.Fatalf("writes went on after demote: %d then %d", n, m)
	}

	var writes int
	for _, l := range jsonLines(t, out.String()) {
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(l["time"])); err != nil {
			t.Errorf("event %v: bad time: %v", l, err)
		}
		if l["event"] == "write" {
			writes++
			if l["accepted"] != true || l["epoch"] != float64(2) || l["node"] != "node-a" {
				t.Errorf("write event %v", l)
			}
		}
	}
	if writes < 3 {
		t.Errorf("%d write events logged, want >= 3:\n%s", writes, out.String())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
