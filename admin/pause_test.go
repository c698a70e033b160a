package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/internal/secret"
)

// fakePauser keeps the pause in memory, as zkcluster.Store does in
// ZooKeeper: the first pause stands.
type fakePauser struct {
	mu  sync.Mutex
	cur *cluster.Pause
}

func (f *fakePauser) SetPause(_ context.Context, p cluster.Pause) (cluster.Pause, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != nil {
		return *f.cur, false, nil
	}
	f.cur = &p
	return p, true, nil
}

func (f *fakePauser) ClearPause(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.cur != nil
	f.cur = nil
	return was, nil
}

func pauseHandler(t *testing.T, p admin.Pauser, token string) http.Handler {
	t.Helper()
	s, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: secret.Secret(token)},
		admin.Deps{Node: &fakeNode{status: leaderStatus()}, Pauser: p, Gatherer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return s.Handler()
}

func post(t *testing.T, h http.Handler, target, body, auth string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), "POST", target, strings.NewReader(body))
	req.RemoteAddr = "192.0.2.7:4242"
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// POST /v1/pause and /v1/resume: behind the bearer token, idempotent, the
// pause says who (the caller's address) and why.
func TestPauseResumeEndpoints(t *testing.T) {
	p := &fakePauser{}
	h := pauseHandler(t, p, testToken)
	auth := "Bearer " + testToken

	for _, path := range []string{adminapi.PausePath, adminapi.ResumePath} {
		if rec := post(t, h, path, "", ""); rec.Code != http.StatusUnauthorized {
			t.Errorf("POST %s without token: %d, want 401", path, rec.Code)
		}
		if rec := post(t, h, path, "", "Bearer wrong"); rec.Code != http.StatusUnauthorized {
			t.Errorf("POST %s with a wrong token: %d, want 401", path, rec.Code)
		}
		if rec := do(t, h, "GET", path, auth); rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d, want 405", path, rec.Code)
		}
	}
	if p.cur != nil {
		t.Fatalf("refused requests paused the cluster: %+v", p.cur)
	}

	rec := post(t, h, adminapi.PausePath, `{"reason": "disk swap"}`, auth)
	a := decode[adminapi.PauseAnswer](t, rec)
	if rec.Code != 200 || !a.Paused || !a.Changed || a.Reason != "disk swap" || a.By != "admin api from 192.0.2.7:4242" || a.At == nil {
		t.Fatalf("pause: %d %+v", rec.Code, a)
	}
	rec = post(t, h, adminapi.PausePath, "", auth)
	if a := decode[adminapi.PauseAnswer](t, rec); rec.Code != 200 || !a.Paused || a.Changed || a.Reason != "disk swap" {
		t.Errorf("second pause: %d %+v, want the first pause kept", rec.Code, a)
	}
	if rec := post(t, h, adminapi.PausePath, `{"reason":`, auth); rec.Code != http.StatusBadRequest {
		t.Errorf("pause with a broken body: %d, want 400", rec.Code)
	}
	long := `{"reason":"` + strings.Repeat("x", cluster.MaxPauseReason+1) + `"}`
	if rec := post(t, h, adminapi.PausePath, long, auth); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "at most") {
		t.Errorf("pause with a %d-byte reason: %d %s, want 400", cluster.MaxPauseReason+1, rec.Code, rec.Body.String())
	}
	rec = post(t, h, adminapi.ResumePath, "", auth)
	if a := decode[adminapi.PauseAnswer](t, rec); rec.Code != 200 || a.Paused || !a.Changed {
		t.Errorf("resume: %d %+v", rec.Code, a)
	}
	rec = post(t, h, adminapi.ResumePath, "", auth)
	if a := decode[adminapi.PauseAnswer](t, rec); rec.Code != 200 || a.Paused || a.Changed {
		t.Errorf("resume when not paused: %d %+v, want ok, unchanged", rec.Code, a)
	}

	if rec := post(t, pauseHandler(t, p, ""), adminapi.PausePath, "", auth); rec.Code != http.StatusForbidden {
		t.Errorf("pause without a configured token: %d, want 403", rec.Code)
	}
	if rec := post(t, pauseHandler(t, nil, testToken), adminapi.PausePath, "", auth); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("pause without a pauser: %d, want 503", rec.Code)
	}
}
