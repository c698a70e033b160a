package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/fencer"
)

// The probe of a suspected leader counts it as alive only when its admin
// API answers 200 with its own node id, the suspected epoch or a later
// one, a leading state and connected: true; anything else (no answer, an error status,
// another node, a restarted daemon, not connected) is a failed probe.
func TestStatusProbe(t *testing.T) {
	var body string
	var code int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status" || r.Method != http.MethodGet || r.Header.Get("Authorization") != "" {
			t.Errorf("probe sent %s %s (authorization %q)", r.Method, r.URL.Path, r.Header.Get("Authorization"))
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	cfg := &config.Config{}
	cfg.Election.SuspectAfter = config.Duration(300 * time.Millisecond)
	p, err := newStatusProbe(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target := fencer.Target{NodeID: "a", AdminURL: srv.URL + "/", Epoch: 7}
	for _, tc := range []struct {
		name  string
		code  int
		body  string
		alive bool
	}{
		{"connected", 200, `{"node_id":"a","state":"leader","epoch":7,"connected":true}`, true},
		{"promoting", 200, `{"node_id":"a","state":"promoting","epoch":7,"connected":true}`, true},
		{"not connected", 200, `{"node_id":"a","state":"leader","epoch":7,"connected":false}`, false},
		{"another node", 200, `{"node_id":"b","state":"leader","epoch":7,"connected":true}`, false},
		{"restarted: standby", 200, `{"node_id":"a","state":"standby","epoch":7,"connected":true}`, false},
		{"a later term", 200, `{"node_id":"a","state":"leader","epoch":9,"connected":true}`, true},
		{"an earlier term", 200, `{"node_id":"a","state":"leader","epoch":5,"connected":true}`, false},
		{"error status", 500, `{"node_id":"a","state":"leader","epoch":7,"connected":true}`, false},
		{"garbage", 200, `not json`, false},
	} {
		code, body = tc.code, tc.body
		err := p.Probe(context.Background(), target)
		if (err == nil) != tc.alive {
			t.Errorf("%s: Probe = %v, want alive %v", tc.name, err, tc.alive)
		}
	}
	srv.Close()
	if err := p.Probe(context.Background(), target); err == nil {
		t.Error("a closed admin API counted as alive")
	}
	if err := p.Probe(context.Background(), fencer.Target{NodeID: "a"}); err == nil {
		t.Error("a target without an admin URL counted as alive")
	}
}
