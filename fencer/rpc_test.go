package fencer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/internal/tlstest"
)

const rpcTestToken = "s3cret-token"

var rpcTarget = Target{NodeID: "node-a", Host: "127.0.0.1", Epoch: 7}

// fakeAdmin stands in for a peer's admin API (package admin serves the
// real one; its tests fence it with this package's client): it answers
// resp to a POST on adminapi.DemotePath with the test token and remembers
// the requests it got.
type fakeAdmin struct {
	resp adminapi.DemoteResponse

	mu   sync.Mutex
	reqs []adminapi.DemoteRequest
}

func (f *fakeAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method != http.MethodPost || r.URL.Path != adminapi.DemotePath:
		http.NotFound(w, r)
		return
	case r.Header.Get("Authorization") != "Bearer "+rpcTestToken:
		jsonHandler(http.StatusUnauthorized, `{"error":"missing or wrong bearer token"}`).ServeHTTP(w, r)
		return
	}
	var req adminapi.DemoteRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		jsonHandler(http.StatusBadRequest, `{"error":"invalid request body"}`).ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(f.resp)
}

func (f *fakeAdmin) calls() []adminapi.DemoteRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]adminapi.DemoteRequest(nil), f.reqs...)
}

func newRPCFor(t *testing.T, cfg RPCConfig) *RPC {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = rpcTestToken
	}
	m, err := NewRPC(cfg, Deps{})
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
		{"demoted in a later term", jsonHandler(200, `{"demoted":true,"node_id":"node-a","epoch":9}`), ""},
		{"202 demoted", jsonHandler(202, `{"demoted":true,"node_id":"node-a","epoch":7}`), ""},
		{"missing node id", jsonHandler(200, `{"demoted":true,"epoch":7}`), `answer names no node, so it does not show that "node-a" was demoted`},
		{"empty node id", jsonHandler(200, `{"demoted":true,"node_id":"","epoch":7}`), "answer names no node"},
		{"bare demoted", jsonHandler(200, `{"demoted":true}`), "answer names no node"},
		{"earlier epoch", jsonHandler(200, `{"demoted":true,"node_id":"node-a","epoch":6}`), `answered with epoch 6, before the fenced epoch 7`},
		{"no epoch", jsonHandler(200, `{"demoted":true,"node_id":"node-a"}`), `answered with epoch 0, before the fenced epoch 7`},
		{"server error", jsonHandler(500, `{"demoted":false,"error":"service stuck"}`), "500 Internal Server Error: service stuck"},
		{"server error without json", jsonHandler(502, `<html>bad gateway</html>`), "502 Bad Gateway"},
		{"not demoted", jsonHandler(200, `{"demoted":false,"node_id":"node-a","error":"still flushing"}`), "did not demote: still flushing"},
		{"not demoted, no reason", jsonHandler(200, `{"node_id":"node-a"}`), "did not demote: no reason given"},
		{"wrong node", jsonHandler(200, `{"demoted":true,"node_id":"node-b","epoch":7}`), `demoted node "node-b", want "node-a"`},
		{"not json", jsonHandler(200, `OK`), "is not a demote answer"},
		{"redirect", http.RedirectHandler("http://127.0.0.1:1/elsewhere", http.StatusFound), "refusing to follow a redirect"},
		{"wrong token", jsonHandler(401, `{"error":"missing or wrong bearer token"}`), "401 Unauthorized: missing or wrong bearer token"},
		{"endpoint disabled", jsonHandler(403, `{"error":"mutating endpoints disabled"}`), "403 Forbidden: mutating endpoints disabled"},
		{"refused as another node", jsonHandler(409, `{"demoted":false,"node_id":"node-c","epoch":0,"error":"not demoted"}`), "409 Conflict: not demoted"},
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
	d := &fakeAdmin{resp: adminapi.DemoteResponse{Demoted: true, NodeID: "node-a", Epoch: 7}}
	srv := httptest.NewServer(d)
	defer srv.Close()

	m := newRPCFor(t, RPCConfig{From: "node-b"})
	target := rpcTarget
	target.AdminURL = srv.URL + "/" // a trailing slash must not double up
	if err := m.Fence(t.Context(), target); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
	reqs := d.calls()
	if len(reqs) != 1 || reqs[0].Reason == "" || reqs[0].Epoch != 7 || reqs[0].From != "node-b" || reqs[0].Target != "node-a" {
		t.Errorf("demote requests = %+v, want one with a reason, epoch 7, from node-b, target node-a", reqs)
	}
}

func TestRPCFenceSendsTokenAndRequest(t *testing.T) {
	var (
		gotAuth, gotPath string
		gotReq           adminapi.DemoteRequest
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotPath = r.Header.Get("Authorization"), r.URL.Path
		_ = json.NewDecoder(r.Body).Decode(&gotReq)
		_, _ = io.WriteString(w, `{"demoted":true,"node_id":"node-a","epoch":7}`)
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
	if gotPath != adminapi.DemotePath {
		t.Errorf("path = %q, want %q", gotPath, adminapi.DemotePath)
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
			_, _ = io.WriteString(w, `{"demoted":true,"node_id":"node-a","epoch":7}`)
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
			URL:        "https://node-a.invalid:9000",
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
			URL:        "https://node-a.invalid:9000",
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
		{"loopback http url", RPCConfig{Token: "t", URL: "http://127.0.0.1:9101"}, ""},
		{"remote http url", RPCConfig{Token: "t", URL: "http://10.0.0.12:9101"}, "refusing to send the admin token over plain http"},
		{"remote http url allowed", RPCConfig{Token: "t", URL: "http://10.0.0.12:9101", AllowInsecureHTTP: true}, ""},
		{"url with user", RPCConfig{Token: "t", URL: "https://u:p@node-a:8443"}, "must not carry user information"},
		{"missing CA file", RPCConfig{Token: "t", CAFile: "/nonexistent/ca.pem"}, "reading CA file"},
		{"CA file and client", RPCConfig{Token: "t", CAFile: "ca.pem", HTTPClient: &http.Client{}}, "not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewRPC(tc.cfg, Deps{})
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

// demoteServerTLS serves h over HTTPS with pki's certificate and counts the
// requests that reached it.
func demoteServerTLS(t *testing.T, pki *tlstest.PKI, h http.Handler) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.Cert}, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestRPCFenceHTTPSWithCAFile(t *testing.T) {
	pki := tlstest.New(t, "rpc")
	d := &fakeAdmin{resp: adminapi.DemoteResponse{Demoted: true, NodeID: "node-a", Epoch: 7}}
	srv, hits := demoteServerTLS(t, pki, d)
	target := rpcTarget
	target.AdminURL = srv.URL // https://127.0.0.1:port

	m := newRPCFor(t, RPCConfig{CAFile: pki.CAFile, From: "node-b"})
	if err := m.Fence(t.Context(), target); err != nil {
		t.Fatalf("Fence over https with the CA = %v, want nil", err)
	}
	if n := len(d.calls()); n != 1 {
		t.Errorf("Demote called %d times, want 1", n)
	}

	// Without the CA (system roots) the handshake fails: the token is never
	// sent, so the handler never runs.
	before := hits.Load()
	m = newRPCFor(t, RPCConfig{From: "node-b"})
	err := m.Fence(t.Context(), target)
	var unknown x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &unknown) {
		t.Fatalf("Fence over https without the CA = %v, want an unknown-authority error", err)
	}
	// Another CA does not verify it either.
	other := tlstest.New(t, "other")
	m = newRPCFor(t, RPCConfig{CAFile: other.CAFile, From: "node-b"})
	if err := m.Fence(t.Context(), target); err == nil || !errors.As(err, &unknown) {
		t.Fatalf("Fence over https with another CA = %v, want an unknown-authority error", err)
	}
	if got := hits.Load(); got != before {
		t.Errorf("%d requests reached the server over unverified TLS, want 0", got-before)
	}
	if n := len(d.calls()); n != 1 {
		t.Errorf("Demote called %d times in all, want 1", n)
	}
}

func TestRPCFenceCAFileWithoutCertificate(t *testing.T) {
	name := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(name, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewRPC(RPCConfig{Token: rpcTestToken, CAFile: name}, Deps{})
	if err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Fatalf("NewRPC with a CA file holding no certificate = %v, want an error", err)
	}
}

// countingDialer fails every dial and counts them, so a test can show that
// nothing was sent without any traffic leaving loopback.
type countingDialer struct{ n atomic.Int32 }

func (c *countingDialer) client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			c.n.Add(1)
			return nil, errors.New("test dialer: no network")
		},
	}}
}

func TestRPCFenceRefusesPlainHTTPToRemoteHost(t *testing.T) {
	// 192.0.2.1 is TEST-NET-1: never dialled, as the fencer refuses first.
	for _, adminURL := range []string{"http://192.0.2.1:1", "http://db-a.example.com:9101", "HTTP://192.0.2.1:1/"} {
		t.Run(adminURL, func(t *testing.T) {
			target := rpcTarget
			target.AdminURL = adminURL

			var dials countingDialer
			m := newRPCFor(t, RPCConfig{HTTPClient: dials.client()})
			if err := m.Fence(t.Context(), target); !errors.Is(err, ErrInsecureHTTP) {
				t.Fatalf("Fence(%s) = %v, want ErrInsecureHTTP", adminURL, err)
			}
			if n := dials.n.Load(); n != 0 {
				t.Fatalf("Fence(%s) dialled %d times, want 0", adminURL, n)
			}

			// The default client refuses the same way, at once.
			m = newRPCFor(t, RPCConfig{Timeout: time.Minute})
			start := time.Now()
			if err := m.Fence(t.Context(), target); !errors.Is(err, ErrInsecureHTTP) {
				t.Fatalf("Fence(%s) with the default client = %v, want ErrInsecureHTTP", adminURL, err)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("refusing took %s; it must not wait for the network", el)
			}

			// With allow_insecure_http the request does go out: the guard, not
			// something else, is what stopped it above.
			m = newRPCFor(t, RPCConfig{HTTPClient: dials.client(), AllowInsecureHTTP: true})
			if err := m.Fence(t.Context(), target); err == nil || errors.Is(err, ErrInsecureHTTP) {
				t.Fatalf("Fence(%s) with AllowInsecureHTTP = %v, want the test dialer's error", adminURL, err)
			}
			if n := dials.n.Load(); n == 0 {
				t.Errorf("Fence(%s) with AllowInsecureHTTP did not dial", adminURL)
			}
		})
	}
}

func TestRPCFenceAllowsPlainHTTPToLoopback(t *testing.T) {
	d := &fakeAdmin{resp: adminapi.DemoteResponse{Demoted: true, NodeID: "node-a", Epoch: 7}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, base := range []string{srv.URL, "http://localhost:" + port} {
		target := rpcTarget
		target.AdminURL = base
		if err := newRPCFor(t, RPCConfig{}).Fence(t.Context(), target); err != nil {
			t.Errorf("Fence(%s) = %v, want nil", base, err)
		}
	}
}

// TestRPCFenceDoesNotFollowRedirects checks that a redirect fails the fence
// and that the token does not reach the redirect's target, whichever client
// sends the request.
func TestRPCFenceDoesNotFollowRedirects(t *testing.T) {
	var gotAuth atomic.Value
	var hits atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		gotAuth.Store(r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, `{"demoted":true,"node_id":"node-a","epoch":7}`)
	}))
	defer elsewhere.Close()
	redirector := httptest.NewServer(http.RedirectHandler(elsewhere.URL+adminapi.DemotePath, http.StatusTemporaryRedirect))
	defer redirector.Close()

	for name, client := range map[string]*http.Client{"default client": nil, "given client": {}} {
		t.Run(name, func(t *testing.T) {
			target := rpcTarget
			target.AdminURL = redirector.URL
			m := newRPCFor(t, RPCConfig{HTTPClient: client})
			if err := m.Fence(t.Context(), target); !errors.Is(err, ErrRedirect) {
				t.Fatalf("Fence via a redirect = %v, want ErrRedirect", err)
			}
			if n := hits.Load(); n != 0 {
				t.Fatalf("the redirect was followed %d times (Authorization %q)", n, gotAuth.Load())
			}
		})
	}
}

func TestRPCFenceTargetWithoutNodeID(t *testing.T) {
	var dials countingDialer
	m := newRPCFor(t, RPCConfig{HTTPClient: dials.client()})
	err := m.Fence(t.Context(), Target{AdminURL: "http://127.0.0.1:1", Epoch: 7})
	if err == nil || !strings.Contains(err.Error(), "target has no node id") {
		t.Fatalf("Fence of a target without node id = %v, want an error", err)
	}
	if n := dials.n.Load(); n != 0 {
		t.Errorf("dialled %d times, want 0", n)
	}
}
