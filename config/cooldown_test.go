package config

import (
	"strings"
	"testing"
	"time"
)

// election.failover_cooldown: 0 (off) by default, a duration from 10ms to
// 24h otherwise; errors name the YAML path.
func TestFailoverCooldown(t *testing.T) {
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
	cfg, err := Parse([]byte(doc("")), "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Election.FailoverCooldown != 0 {
		t.Errorf("default failover_cooldown %v, want 0 (off)", cfg.Election.FailoverCooldown)
	}
	for _, ok := range []string{"0s", "10ms", "5m", "24h"} {
		if _, err := Parse([]byte(doc(", failover_cooldown: "+ok)), ""); err != nil {
			t.Errorf("failover_cooldown %s: %v", ok, err)
		}
	}
	cfg, _ = Parse([]byte(doc(", failover_cooldown: 5m")), "")
	if cfg.Election.FailoverCooldown != Duration(5*time.Minute) {
		t.Errorf("failover_cooldown %v, want 5m", cfg.Election.FailoverCooldown)
	}
	for _, tc := range []struct{ value, want string }{
		{"-1s", "election.failover_cooldown: must not be negative (0 turns the cooldown off), got -1s"},
		{"1ms", "election.failover_cooldown: must be at least 10ms, got 1ms"},
		{"25h", "election.failover_cooldown: must be at most 24h"},
		{"300", "election.failover_cooldown: invalid duration"},
		{"soon", "election.failover_cooldown: invalid duration"},
	} {
		_, err := Parse([]byte(doc(", failover_cooldown: "+tc.value)), "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("failover_cooldown %s: err %v, want %q", tc.value, err, tc.want)
		}
	}
}
