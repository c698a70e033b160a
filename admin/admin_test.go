package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/secret"
	"github.com/failoverd/failoverd/metrics"
)

const testToken = "s3cret-admin-token"

// fakeNode answers with fixed values and remembers the mutating calls.
type fakeNode struct {
	status  controller.Status
	demote  controller.DemoteOutcome
	cedeErr error

	mu      sync.Mutex
	demotes []string
	cedes   []time.Duration
}

func (n *fakeNode) Status() controller.Status { return n.status }

func (n *fakeNode) Demote(_ context.Context, reason string) controller.DemoteOutcome {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.demotes = append(n.demotes, reason)
	return n.demote
}

func (n *fakeNode) Cede(_ context.Context, d time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cedes = append(n.cedes, d)
	return n.cedeErr
}

func (n *fakeNode) calls() (demotes []string, cedes []time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.demotes...), append([]time.Duration(nil), n.cedes...)
}

var _ admin.Node = (*fakeNode)(nil)

func leaderStatus() controller.Status {
	return controller.Status{State: controller.StateLeader, Member: cluster.Member{
		Cluster: "orders", NodeID: "node-a", Host: "10.0.0.11",
		Role: "leader", Health: "healthy",
		Epoch: 42, Since: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Connected: true, ZKConnected: true, LeaseRemaining: 2.5, Version: "1.2.3",
	}}
}

func withState(state controller.State, health string) controller.Status {
	s := leaderStatus()
	s.State, s.Health = state, health
	if state != controller.StateLeader {
		s.Role = "standby"
	}
	return s
}

// newHandler is the admin API of n, built as the daemon builds it.
func newHandler(t *testing.T, n admin.Node, reg prometheus.Gatherer, token string, logger *slog.Logger) http.Handler {
	t.Helper()
	s, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: secret.Secret(token)}, admin.Deps{Node: n, Gatherer: reg, Logger: logger})
	if err != nil {
		t.Fatalf("admin.New: %v", err)
	}
	return s.Handler()
}

// do serves one request and returns the recorded response.
func do(t *testing.T, h http.Handler, method, target, auth string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, target, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decoding %q: %v", rec.Body.String(), err)
	}
	return v
}

func TestReadEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   controller.Status
		method   string
		path     string
		wantCode int
		wantBody string // substring
	}{
		{"healthz", leaderStatus(), "GET", "/healthz", 200, "ok\n"},
		{"healthz when out", withState(controller.StateOut, "unhealthy"), "GET", "/healthz", 200, "ok"},
		{"healthz head", leaderStatus(), "HEAD", "/healthz", 200, ""},
		{"healthz post", leaderStatus(), "POST", "/healthz", 405, ""},
		{"status", leaderStatus(), "GET", "/v1/status", 200, `"node_id":"node-a"`},
		{"status delete", leaderStatus(), "DELETE", "/v1/status", 405, ""},
		{"leader when leader", leaderStatus(), "GET", "/leader", 200, `"state":"leader"`},
		{"leader head", leaderStatus(), "HEAD", "/leader", 200, ""},
		{"leader when promoting", withState(controller.StatePromoting, "healthy"), "GET", "/leader", 503, `"state":"promoting"`},
		{"leader when fencing", withState(controller.StateFencing, "healthy"), "GET", "/leader", 503, ""},
		{"leader when standby", withState(controller.StateStandby, "healthy"), "GET", "/leader", 503, `"epoch":42`},
		{"leader post", leaderStatus(), "POST", "/leader", 405, ""},
		{"standby when healthy standby", withState(controller.StateStandby, "healthy"), "GET", "/standby", 200, `"state":"standby"`},
		{"standby when unhealthy standby", withState(controller.StateStandby, "unhealthy"), "GET", "/standby", 503, `"health":"unhealthy"`},
		{"standby when out", withState(controller.StateOut, "healthy"), "GET", "/standby", 503, ""},
		{"standby when leader", leaderStatus(), "GET", "/standby", 503, ""},
		{"standby put", withState(controller.StateStandby, "healthy"), "PUT", "/standby", 405, ""},
		{"unknown path", leaderStatus(), "GET", "/v1/nope", 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandler(t, &fakeNode{status: tc.status}, prometheus.NewRegistry(), testToken, nil)
			rec := do(t, h, tc.method, tc.path, "")
			if rec.Code != tc.wantCode {
				t.Fatalf("%s %s = %d, want %d; body %q", tc.method, tc.path, rec.Code, tc.wantCode, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("%s %s body = %q, want it to contain %q", tc.method, tc.path, rec.Body, tc.wantBody)
			}
			if rec.Code == 405 && rec.Header().Get("Allow") == "" {
				t.Errorf("%s %s: 405 without Allow header", tc.method, tc.path)
			}
		})
	}
}

func TestStatusJSON(t *testing.T) {
	want := leaderStatus()
	h := newHandler(t, &fakeNode{status: want}, prometheus.NewRegistry(), "", nil)
	rec := do(t, h, "GET", "/v1/status", "")
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if got := decode[controller.Status](t, rec); got != want {
		t.Errorf("GET /v1/status = %+v, want %+v", got, want)
	}
}

func TestRoleAnswer(t *testing.T) {
	h := newHandler(t, &fakeNode{status: leaderStatus()}, prometheus.NewRegistry(), "", nil)
	got := decode[adminapi.RoleAnswer](t, do(t, h, "GET", "/leader", ""))
	want := adminapi.RoleAnswer{NodeID: "node-a", State: "leader", Health: "healthy", Epoch: 42}
	if got != want {
		t.Errorf("GET /leader = %+v, want %+v", got, want)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, "1.2.3")
	reg.MustRegister(metrics.StatusCollector(leaderStatus))
	m.Leader(true, 42)
	m.FenceAttempt("rpc", "success", time.Second)
	h := newHandler(t, &fakeNode{status: leaderStatus()}, reg, "", nil)

	rec := do(t, h, "GET", "/metrics", "")
	if rec.Code != 200 {
		t.Fatalf("GET /metrics = %d, want 200", rec.Code)
	}
	for _, want := range []string{
		"failoverd_is_leader 1",
		"failoverd_epoch 42",
		`failoverd_state{state="initializing"} 1`,
		`failoverd_fence_attempts_total{method="rpc",result="success"} 1`,
		"failoverd_coordination_connected 1",
		"failoverd_zk_connected 1",
		"failoverd_lease_remaining_seconds 2.5",
		`failoverd_build_info{goversion="`,
		"go_goroutines ",
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	if rec := do(t, h, "POST", "/metrics", ""); rec.Code != 405 {
		t.Errorf("POST /metrics = %d, want 405", rec.Code)
	}
}

// TestMutatingRefusals checks the one middleware in front of both mutating
// endpoints: no token configured (403, whatever the method), another method
// than POST (405 with Allow), a missing or wrong bearer (401 with
// WWW-Authenticate); a refused request never reaches the node, and the
// right one does.
func TestMutatingRefusals(t *testing.T) {
	for _, path := range []string{"/v1/demote", "/v1/cede?for=30s"} {
		for _, tc := range []struct {
			name      string
			token     string // configured
			method    string
			auth      string // sent
			wantCode  int
			wantInErr string // in the JSON "error"
		}{
			{"no token", "", "POST", "Bearer ", 403, "mutating endpoints disabled"},
			{"no token, token sent", "", "POST", "Bearer " + testToken, 403, "mutating endpoints disabled"},
			{"no token, get", "", "GET", "", 403, "mutating endpoints disabled"},
			{"wrong method get", testToken, "GET", "Bearer " + testToken, 405, "method must be POST"},
			{"wrong method put", testToken, "PUT", "Bearer " + testToken, 405, "method must be POST"},
			{"wrong method, no bearer", testToken, "DELETE", "", 405, "method must be POST"},
			{"no bearer", testToken, "POST", "", 401, "missing or wrong bearer token"},
			{"empty bearer", testToken, "POST", "Bearer ", 401, "missing or wrong bearer token"},
			{"not bearer", testToken, "POST", "Basic " + testToken, 401, "missing or wrong bearer token"},
			{"no scheme", testToken, "POST", testToken, 401, "missing or wrong bearer token"},
			{"wrong bearer", testToken, "POST", "Bearer wrong", 401, "missing or wrong bearer token"},
			{"prefix of token", testToken, "POST", "Bearer " + testToken[:5], 401, "missing or wrong bearer token"},
			{"token with more", testToken, "POST", "Bearer " + testToken + "x", 401, "missing or wrong bearer token"},
			{"ok", testToken, "POST", "Bearer " + testToken, 200, ""},
		} {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				n := &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Demoted: true, Epoch: 42}}
				h := newHandler(t, n, prometheus.NewRegistry(), tc.token, nil)
				rec := do(t, h, tc.method, path, tc.auth)
				if rec.Code != tc.wantCode {
					t.Errorf("%s %s = %d, want %d; body %q", tc.method, path, rec.Code, tc.wantCode, rec.Body)
				}
				if got := decode[struct{ Error string }](t, rec).Error; !strings.Contains(got, tc.wantInErr) || (tc.wantInErr == "") != (got == "") {
					t.Errorf("%s %s: error %q, want it to contain %q", tc.method, path, got, tc.wantInErr)
				}
				if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q, want application/json", ct)
				}
				if got := rec.Header().Get("Allow"); (tc.wantCode == 405) != (got == "POST") {
					t.Errorf("Allow = %q with status %d", got, rec.Code)
				}
				if got := rec.Header().Get("WWW-Authenticate"); (tc.wantCode == 401) != (got != "") {
					t.Errorf("WWW-Authenticate = %q with status %d", got, rec.Code)
				}
				d, c := n.calls()
				if called := len(d)+len(c) > 0; called != (tc.wantCode == 200) {
					t.Errorf("node reached = %v (demotes %q, cedes %v), want %v", called, d, c, tc.wantCode == 200)
				}
			})
		}
	}
}

func TestDemote(t *testing.T) {
	for _, tc := range []struct {
		name     string
		node     *fakeNode
		body     string
		wantCode int
		want     adminapi.DemoteResponse
	}{
		{
			name:     "demoted",
			node:     &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Demoted: true, Epoch: 42}},
			body:     `{"reason":"fenced","epoch":42,"from":"node-b"}`,
			wantCode: 200,
			want:     adminapi.DemoteResponse{Demoted: true, NodeID: "node-a", Epoch: 42},
		},
		{
			name:     "empty body",
			node:     &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Demoted: true}},
			wantCode: 200,
			want:     adminapi.DemoteResponse{Demoted: true, NodeID: "node-a"},
		},
		{
			name:     "demote hook failed",
			node:     &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Epoch: 42, Err: errors.New("demote hook: exit status 1")}},
			wantCode: 500,
			want:     adminapi.DemoteResponse{NodeID: "node-a", Epoch: 42, Error: "demote hook: exit status 1"},
		},
		{
			// Demoted with an error is not demoted.
			name:     "demoted and an error",
			node:     &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Demoted: true, Epoch: 42, Err: errors.New("stopping")}},
			wantCode: 500,
			want:     adminapi.DemoteResponse{NodeID: "node-a", Epoch: 42, Error: "stopping"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandler(t, tc.node, prometheus.NewRegistry(), testToken, nil)
			req := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/demote", strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode {
				t.Fatalf("POST /v1/demote = %d, want %d; body %q", rec.Code, tc.wantCode, rec.Body)
			}
			if got := decode[adminapi.DemoteResponse](t, rec); got != tc.want {
				t.Errorf("POST /v1/demote = %+v, want %+v", got, tc.want)
			}
			if d, _ := tc.node.calls(); len(d) != 1 {
				t.Errorf("Demote called %d times, want 1", len(d))
			}
		})
	}
}

// TestDemoteRequestBody checks what POST /v1/demote does with the request
// once the token is right: the target rule (a request for another node, or
// from this node itself, is refused with 409 and never reaches the node)
// and malformed bodies.
func TestDemoteRequestBody(t *testing.T) {
	for _, tc := range []struct {
		name        string
		body        string
		nodeErr     error
		wantCode    int
		wantCalled  bool
		wantInError string
	}{
		{name: "demoted", body: `{"reason":"failover","epoch":42,"from":"node-b"}`, wantCode: 200, wantCalled: true},
		{name: "meant for this node", body: `{"epoch":42,"from":"node-b","target":"node-a"}`, wantCode: 200, wantCalled: true},
		{name: "meant for another node", body: `{"epoch":42,"from":"node-b","target":"node-c"}`, wantCode: 409,
			wantInError: `this is node "node-a", not "node-c"`},
		{name: "from this node itself", body: `{"epoch":42,"from":"node-a","target":"node-c"}`, wantCode: 409, wantInError: "not demoted"},
		{name: "from this node itself, no target", body: `{"epoch":42,"from":"node-a"}`, wantCode: 409, wantInError: "asked itself to demote"},
		{name: "empty body", wantCode: 200, wantCalled: true},
		{name: "node fails", nodeErr: errors.New("service stuck"), wantCode: 500, wantCalled: true, wantInError: "service stuck"},
		{name: "bad json", body: "{", wantCode: 400, wantInError: "invalid request body"},
		{name: "huge body", body: `{"reason":"` + strings.Repeat("x", 2*adminapi.MaxDemoteBody) + `"}`, wantCode: 413,
			wantInError: "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Demoted: tc.nodeErr == nil, Epoch: 42, Err: tc.nodeErr}}
			h := newHandler(t, n, prometheus.NewRegistry(), testToken, nil)
			req := httptest.NewRequestWithContext(t.Context(), "POST", adminapi.DemotePath, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode {
				t.Errorf("status = %d, want %d (body %s)", rec.Code, tc.wantCode, rec.Body)
			}
			resp := decode[adminapi.DemoteResponse](t, rec)
			if resp.Demoted != (tc.wantCode == 200) {
				t.Errorf("demoted = %v, want %v", resp.Demoted, tc.wantCode == 200)
			}
			if !strings.Contains(resp.Error, tc.wantInError) || (tc.wantInError == "") != (resp.Error == "") {
				t.Errorf("error = %q, want it to contain %q", resp.Error, tc.wantInError)
			}
			if tc.wantCode == 409 && resp.NodeID != "node-a" {
				t.Errorf("409 answer names node %q, want node-a", resp.NodeID)
			}
			if d, _ := n.calls(); (len(d) > 0) != tc.wantCalled {
				t.Errorf("Demote calls %q, want called = %v", d, tc.wantCalled)
			}
		})
	}
}

// A breadcrumb whose admin URL reaches the wrong daemon (every node's
// loopback address, the reference config's default listen address): the
// daemon that answers is the fencer's own node or a third one. It must not
// demote (the fencer's own node would step down from the term it is
// fencing for), and the fence must fail so that the chain's next method
// runs.
func TestRPCFenceReachingTheWrongDaemonDemotesNobody(t *testing.T) {
	for _, tc := range []struct{ name, self, from string }{
		{"its own daemon", "node-b", "node-b"},
		{"a third node", "node-c", "node-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := leaderStatus()
			st.NodeID = tc.self
			n := &fakeNode{status: st, demote: controller.DemoteOutcome{Demoted: true, Epoch: 9}}
			srv := httptest.NewServer(newHandler(t, n, prometheus.NewRegistry(), testToken, nil))
			t.Cleanup(srv.Close)
			f, err := fencer.NewRPC(fencer.RPCConfig{Token: testToken, Timeout: 5 * time.Second, From: tc.from}, fencer.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			err = f.Fence(t.Context(), fencer.Target{NodeID: "node-a", Epoch: 7, AdminURL: srv.URL})
			if err == nil || !strings.Contains(err.Error(), "409 Conflict") || !strings.Contains(err.Error(), "not demoted") {
				t.Errorf("fence through %s: %v, want a 409 refusal", tc.name, err)
			}
			if d, _ := n.calls(); len(d) != 0 {
				t.Errorf("the daemon reached demoted itself: %q", d)
			}
		})
	}
}

// TestDemoteByRPCFencer checks the admin API against its real client.
func TestDemoteByRPCFencer(t *testing.T) {
	n := &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Demoted: true, Epoch: 42}}
	srv := httptest.NewServer(newHandler(t, n, prometheus.NewRegistry(), testToken, nil))
	defer srv.Close()
	rpc, err := fencer.NewRPC(fencer.RPCConfig{Token: testToken, From: "node-b"}, fencer.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rpc.Fence(t.Context(), fencer.Target{NodeID: "node-a", AdminURL: srv.URL, Epoch: 42}); err != nil {
		t.Errorf("Fence = %v, want nil", err)
	}
	if d, _ := n.calls(); len(d) != 1 || !strings.Contains(d[0], "node-b") {
		t.Errorf("Demote reasons = %q, want one naming node-b", d)
	}
}

func TestCede(t *testing.T) {
	for _, tc := range []struct {
		name      string
		query     string
		cedeErr   error
		wantCode  int
		wantCede  time.Duration // 0: Cede must not be called
		wantInErr string
	}{
		{"30s", "?for=30s", nil, 200, 30 * time.Second, ""},
		{"minutes", "?for=5m", nil, 200, 5 * time.Minute, ""},
		{"max", "?for=24h", nil, 200, 24 * time.Hour, ""},
		{"missing", "", nil, 400, 0, "is required"},
		{"empty", "?for=", nil, 400, 0, "is required"},
		{"not a duration", "?for=soon", nil, 400, 0, "invalid duration"},
		{"bare number", "?for=30", nil, 400, 0, "missing unit"},
		{"zero", "?for=0s", nil, 400, 0, "must be > 0"},
		{"negative", "?for=-1s", nil, 400, 0, "must be > 0"},
		{"too long", "?for=24h1s", nil, 400, 0, "<= 24h0m0s"},
		{"node refuses", "?for=30s", errors.New("controller: stopping"), 500, 30 * time.Second, "controller: stopping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &fakeNode{status: leaderStatus(), cedeErr: tc.cedeErr}
			h := newHandler(t, n, prometheus.NewRegistry(), testToken, nil)
			rec := do(t, h, "POST", "/v1/cede"+tc.query, "Bearer "+testToken)
			if rec.Code != tc.wantCode {
				t.Fatalf("POST /v1/cede%s = %d, want %d; body %q", tc.query, rec.Code, tc.wantCode, rec.Body)
			}
			got := decode[adminapi.CedeAnswer](t, rec)
			if got.Ceded != (tc.wantCode == 200) {
				t.Errorf("ceded = %v, want %v", got.Ceded, tc.wantCode == 200)
			}
			if !strings.Contains(got.Error, tc.wantInErr) || (tc.wantInErr == "") != (got.Error == "") {
				t.Errorf("error = %q, want it to contain %q", got.Error, tc.wantInErr)
			}
			_, cedes := n.calls()
			switch {
			case tc.wantCede == 0 && len(cedes) != 0:
				t.Errorf("Cede called with %v, want no call", cedes)
			case tc.wantCede != 0 && (len(cedes) != 1 || cedes[0] != tc.wantCede):
				t.Errorf("Cede calls = %v, want [%v]", cedes, tc.wantCede)
			}
			if tc.wantCode == 200 && (got.NodeID != "node-a" || got.For != tc.wantCede.String()) {
				t.Errorf("answer = %+v, want node_id node-a and for %s", got, tc.wantCede)
			}
		})
	}
}

// TestMutationLog checks that mutating calls are logged with the caller's
// address and outcome, and that no token, right or wrong, is logged.
func TestMutationLog(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	n := &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Demoted: true}}
	h := newHandler(t, n, prometheus.NewRegistry(), testToken, logger)

	do(t, h, "POST", "/v1/cede?for=30s", "Bearer "+testToken)
	do(t, h, "POST", "/v1/demote", "Bearer "+testToken)
	do(t, h, "POST", "/v1/demote", "Bearer guessed-token")
	do(t, h, "GET", "/v1/status", "") // reads are not logged

	type line struct {
		Level      string `json:"level"`
		Msg        string `json:"msg"`
		Component  string `json:"component"`
		Method     string `json:"method"`
		Path       string `json:"path"`
		RemoteAddr string `json:"remote_addr"`
		Status     int    `json:"status"`
	}
	logged := buf.String()
	var got []line
	dec := json.NewDecoder(strings.NewReader(logged))
	for {
		var l line
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got = append(got, l)
	}
	want := []line{
		{"INFO", "mutating request", "admin", "POST", "/v1/cede", "192.0.2.1:1234", 200},
		{"INFO", "mutating request", "admin", "POST", "/v1/demote", "192.0.2.1:1234", 200},
		{"INFO", "mutating request", "admin", "POST", "/v1/demote", "192.0.2.1:1234", 401},
	}
	if len(got) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(got), len(want), logged)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("log line %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if strings.Contains(logged, testToken) || strings.Contains(logged, "guessed-token") {
		t.Errorf("a token reached the log:\n%s", logged)
	}
}
