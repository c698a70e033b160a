package config

import (
	"strings"
	"testing"
	"time"
)

// election.preempt_after: 10s by default, 0 = never, otherwise a duration
// of at least MinTimeout; errors name the YAML path.
func TestPreemptAfter(t *testing.T) {
	doc := func(election string) string {
		return `cluster: orders
node: {id: node-a, host: 127.0.0.1}
zookeeper: {servers: ["127.0.0.1:2181"]}
election: {mode: fair` + election + `}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`
	}
	for _, tc := range []struct {
		election string
		want     time.Duration
	}{
		{"", 10 * time.Second},
		{", preempt_after: 0s", 0},
		{", preempt_after: 90s", 90 * time.Second},
	} {
		cfg, err := Parse([]byte(doc(tc.election)), "")
		if err != nil {
			t.Fatalf("%q: %v", tc.election, err)
		}
		if got := cfg.Election.PreemptAfter.Std(); got != tc.want {
			t.Errorf("%q: preempt_after %v, want %v", tc.election, got, tc.want)
		}
	}
	for _, tc := range []struct{ election, want string }{
		{", preempt_after: -1s", "election.preempt_after: must be >= 0 (0: never)"},
		{", preempt_after: 1ms", "election.preempt_after: must be at least 10ms"},
		{", preempt_after: 48h", "election.preempt_after: must be at most 24h"},
		{", preempt_after: soon", "election.preempt_after"},
	} {
		_, err := Parse([]byte(doc(tc.election)), "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.election, err, tc.want)
		}
	}
}
