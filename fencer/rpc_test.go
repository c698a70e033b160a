package fencer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

const rpcTestToken = "s3cret-token"

var rpcTarget = Target{NodeID: "node-a", Host: "127.0.0.1", Epoch: 7}

// fakeDemoter answers with resp and err and remembers the reasons it got.
type fakeDemoter struct {
	resp DemoteResponse
	err  error

	mu      sync.Mutex
	reasons []string
}

func (d *fakeDemoter) Demote(_ context.Context, reason string) (DemoteResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reasons = append(d.reasons, reason)
	return d.resp, d.err
}

func (d *fakeDemoter) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.reasons...)
}

func newRPCFor(t *testing.T, cfg RPCConfig) *RPC {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = rpcTestToken
	}
	m, err := NewRPC(cfg, nil)
	if err != nil {
		t.Fatalf("NewRPC: %v", err)
	}
	return m
}

// jsonHandler answers every request with status and body.
func jsonHandler(status int, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

func TestRPCFenceJudgesTheAnswer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handler   http.Handler
		wantInErr string // "" means fenced
	}{
		{"demoted", jsonHandler(200, `{"demoted":true,"node_id":"node-a","epoch":7}`), ""},
		{"demoted, node not named", jsonHandler(200, `{"demoted":true}`), ""},
		{"202 demoted", jsonHandler(202, `{"demoted":true,"node_id":"node-a"}`), ""},
		{"server error", jsonHandler(500, `{"demoted":false,"error":"service stuck"}`), "500 Internal Server Error: service stuck"},
		{"server error without json", jsonHandler(502, `<html>bad gateway</html>`), "502 Bad Gateway"},
		{"not demoted", jsonHandler(200, `{"demoted":false,"node_id":"node-a","error":"still flushing"}`), "did not demote: still flushing"},
		{"not demoted, no reason", jsonHandler(200, `{"node_id":"node-a"}`), "did not demote: no reason given"},
		{"wrong node", jsonHandler(200, `{"demoted":true,"node_id":"node-b"}`), `demoted node "node-b", want "node-a"`},
		{"not json", jsonHandler(200, `OK`), "is not a demote answer"},
		{"redirect", http.RedirectHandler("http://127.0.0.1:1/elsewhere", http.StatusFound), "302 Found"},
		{"wrong token", DemoteHandler(&fakeDemoter{resp: DemoteResponse{Demoted: true}}, "another-token"), "401 Unauthorized"},
		{"endpoint disabled", DemoteHandler(&fakeDemoter{resp: DemoteResponse{Demoted: true}}, ""), "mutating endpoints disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			m := newRPCFor(t, RPCConfig{})
			target := rpcTarget
			target.AdminURL = srv.URL

			err := m.Fence(t.Context(), target)
			if tc.wantInErr == "" {
				if err != nil {
					t.Fatalf("Fence() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("Fence() = %v, want an error containing %q", err, tc.wantInErr)
			}
		})
	}
}

func TestRPCFenceEndToEnd(t *testing.T) {
	d := &fakeDemoter{resp: DemoteResponse{Demoted: true, NodeID: "node-a", Epoch: 7}}
	mux := http.NewServeMux()
	mux.Handle("POST "+DemotePath, DemoteHandler(d, rpcTestToken))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	m := newRPCFor(t, RPCConfig{From: "node-b"})
	target := rpcTarget
	target.AdminURL = srv.URL + "/" // a trailing slash must not double up
	if err := m.Fence(t.Context(), target); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
	reasons := d.calls()
	if len(reasons) != 1 || !strings.Contains(reasons[0], `from "node-b", epoch 7`) {
		t.Errorf("Demote reasons = %q, want one naming node-b and epoch 7", reasons)
	}
}

func TestRPCFenceSendsTokenAndRequest(t *testing.T) {
	var (
		gotAuth, gotPath string
		gotReq           DemoteRequest
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotPath = r.Header.Get("Authorization"), r.URL.Path
		_ = json.NewDecoder(r.Body).Decode(&gotReq)
		_, _ = io.WriteString(w, `{"demoted":true}`)
	}))
	defer srv.Close()

	m := newRPCFor(t, RPCConfig{From: "node-b"})
	target := rpcTarget
	target.AdminURL = srv.URL
	if err := m.Fence(t.Context(), target); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
	if gotAuth != "Bearer "+rpcTestToken {
		t.Errorf("Authorization = %q, want the bearer token", gotAuth)
	}
	if gotPath != DemotePath {
		t.Errorf("path = %q, want %q", gotPath, DemotePath)
	}
	if gotReq.Epoch != 7 || gotReq.From != "node-b" || gotReq.Reason == "" {
		t.Errorf("request = %+v, want epoch 7 from node-b with a reason", gotReq)
	}
}

func TestRPCFenceConfiguredURLOverridesTarget(t *testing.T) {
	called := make(chan string, 2)
	record := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			called <- name
			_, _ = io.WriteString(w, `{"demoted":true}`)
		})
	}
	configured := httptest.NewServer(record("configured"))
	defer configured.Close()
	fromBreadcrumb := httptest.NewServer(record("breadcrumb"))
	defer fromBreadcrumb.Close()

	m := newRPCFor(t, RPCConfig{URL: configured.URL})
	target := rpcTarget
	target.AdminURL = fromBreadcrumb.URL
	if err := m.Fence(t.Context(), target); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
	if got := <-called; got != "configured" || len(called) != 0 {
		t.Errorf("called %q (and %d more), want only the configured URL", got, len(called))
	}
}

func TestRPCFenceWithoutAdminURL(t *testing.T) {
	m := newRPCFor(t, RPCConfig{})
	err := m.Fence(t.Context(), rpcTarget)
	if err == nil || !strings.Contains(err.Error(), `target "node-a" has no admin url`) {
		t.Fatalf("Fence() = %v, want a no-admin-url error", err)
	}
}

func TestRPCFenceTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a node too busy to answer
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	m := newRPCFor(t, RPCConfig{URL: srv.URL, Timeout: 200 * time.Millisecond})
	start := time.Now()
	err := m.Fence(t.Context(), rpcTarget)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rpc timeout 200ms") {
		t.Fatalf("Fence() = %v, want the rpc timeout", err)
	}
	if elapsed > 5*time.Second {
		t.Errorf("Fence() took %s with a 200ms timeout", elapsed)
	}
}

// handlerTransport serves requests in memory, so synctest can run the
// client's timeout on its fake clock.
type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ht.h.ServeHTTP(rec, r)
	}()
	select {
	case <-done:
		return rec.Result(), nil
	case <-r.Context().Done():
		<-done
		return nil, r.Context().Err()
	}
}

func TestRPCFenceTimeoutIsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		m := newRPCFor(t, RPCConfig{
			URL:        "http://node-a.invalid:9000",
			Timeout:    3 * time.Second,
			HTTPClient: &http.Client{Transport: handlerTransport{hung}},
		})
		start := time.Now()
		err := m.Fence(t.Context(), rpcTarget)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fence() = %v, want context.DeadlineExceeded", err)
		}
		if elapsed := time.Since(start); elapsed != 3*time.Second {
			t.Errorf("Fence() took %s, want exactly the 3s timeout", elapsed)
		}
	})
}

func TestRPCFenceHonoursCallerContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		m := newRPCFor(t, RPCConfig{
			URL:        "http://node-a.invalid:9000",
			Timeout:    time.Minute,
			HTTPClient: &http.Client{Transport: handlerTransport{hung}},
		})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if err := m.Fence(ctx, rpcTarget); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fence() = %v, want context.DeadlineExceeded", err)
		}
		if elapsed := time.Since(start); elapsed != time.Second {
			t.Errorf("Fence() took %s, want the caller's 1s", elapsed)
		}
	})
}

func TestNewRPCValidates(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       RPCConfig
		wantInErr string // "" means valid
	}{
		{"valid", RPCConfig{Token: "t"}, ""},
		{"valid with url", RPCConfig{Token: "t", URL: "https://node-a:8443/admin"}, ""},
		{"no token", RPCConfig{}, "token is required"},
		{"negative timeout", RPCConfig{Token: "t", Timeout: -time.Second}, "timeout must be > 0"},
		{"url without scheme", RPCConfig{Token: "t", URL: "node-a:8443"}, "scheme must be http or https"},
		{"url without host", RPCConfig{Token: "t", URL: "http://"}, "has no host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewRPC(tc.cfg, nil)
			if tc.wantInErr == "" {
				if err != nil {
					t.Fatalf("NewRPC() = %v, want nil", err)
				}
				if m.cfg.Timeout != DefaultRPCTimeout {
					t.Errorf("timeout = %s, want default %s", m.cfg.Timeout, DefaultRPCTimeout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("NewRPC() = %v, want an error containing %q", err, tc.wantInErr)
			}
		})
	}
}

func TestDemoteHandler(t *testing.T) {
	for _, tc := range []struct {
		name        string
		token       string
		method      string
		auth        string
		body        string
		demoter     *fakeDemoter
		wantStatus  int
		wantDemoted bool
		wantCalled  bool
		wantInError string
	}{
		{name: "demoted", token: rpcTestToken, method: "POST", auth: "Bearer " + rpcTestToken,
			body:    `{"reason":"failover","epoch":7,"from":"node-b"}`,
			demoter: &fakeDemoter{resp: DemoteResponse{Demoted: true, NodeID: "node-a", Epoch: 7}}, wantStatus: 200,
			wantDemoted: true, wantCalled: true},
		{name: "empty body", token: rpcTestToken, method: "POST", auth: "Bearer " + rpcTestToken,
			demoter: &fakeDemoter{resp: DemoteResponse{Demoted: true}}, wantStatus: 200, wantDemoted: true, wantCalled: true},
		{name: "demoter fails", token: rpcTestToken, method: "POST", auth: "Bearer " + rpcTestToken,
			demoter: &fakeDemoter{resp: DemoteResponse{Demoted: true}, err: errors.New("service stuck")}, wantStatus: 500,
			wantCalled: true, wantInError: "service stuck"},
		{name: "disabled", token: "", method: "POST", auth: "Bearer ",
			demoter: &fakeDemoter{}, wantStatus: 403, wantInError: "mutating endpoints disabled"},
		{name: "GET", token: rpcTestToken, method: "GET", auth: "Bearer " + rpcTestToken,
			demoter: &fakeDemoter{}, wantStatus: 405},
		{name: "no token", token: rpcTestToken, method: "POST",
			demoter: &fakeDemoter{}, wantStatus: 401},
		{name: "wrong token", token: rpcTestToken, method: "POST", auth: "Bearer " + rpcTestToken + "x",
			demoter: &fakeDemoter{}, wantStatus: 401},
		{name: "token as basic auth", token: rpcTestToken, method: "POST", auth: "Basic " + rpcTestToken,
			demoter: &fakeDemoter{}, wantStatus: 401},
		{name: "bad json", token: rpcTestToken, method: "POST", auth: "Bearer " + rpcTestToken, body: "{",
			demoter: &fakeDemoter{}, wantStatus: 400},
		{name: "huge body", token: rpcTestToken, method: "POST", auth: "Bearer " + rpcTestToken,
			body:    `{"reason":"` + strings.Repeat("x", 2*maxDemoteBody) + `"}`,
			demoter: &fakeDemoter{}, wantStatus: 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, DemotePath, strings.NewReader(tc.body))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			DemoteHandler(tc.demoter, tc.token).ServeHTTP(rec, req)

			if rec.Code != tc.wantStatus {
				t.Errorf("status = %d, want %d (body %s)", rec.Code, tc.wantStatus, rec.Body)
			}
			var resp DemoteResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatalf("body %q is not a DemoteResponse: %v", rec.Body, err)
			}
			if resp.Demoted != tc.wantDemoted {
				t.Errorf("demoted = %v, want %v", resp.Demoted, tc.wantDemoted)
			}
			if !strings.Contains(resp.Error, tc.wantInError) {
				t.Errorf("error = %q, want it to contain %q", resp.Error, tc.wantInError)
			}
			if called := len(tc.demoter.calls()) > 0; called != tc.wantCalled {
				t.Errorf("Demote called = %v, want %v", called, tc.wantCalled)
			}
		})
	}
}
