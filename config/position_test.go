package config

import (
	"strings"
	"testing"
	"time"
)

// service.position: interval 1s and timeout = interval by default, a
// timeout longer than the interval refused; election.max_lag: absent = no
// limit, >= 0, and only with service.position. Every error names its YAML
// path.
func TestPositionAndMaxLag(t *testing.T) {
	doc := func(election, svc string) string {
		return `cluster: orders
node: {id: node-a, host: 127.0.0.1}
zookeeper: {servers: ["127.0.0.1:2181"]}
election: {mode: fair` + election + `}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
` + svc + `
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`
	}
	cfg, err := Parse([]byte(doc("", "")), "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Service.Position != nil || cfg.Election.MaxLag != nil {
		t.Errorf("defaults: position %+v, max_lag %v; want neither", cfg.Service.Position, cfg.Election.MaxLag)
	}
	cfg, err = Parse([]byte(doc(", max_lag: 0", "  position: {command: [/bin/echo, '1']}")), "")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Service.Position; p == nil || p.Interval != Duration(time.Second) || p.Timeout != Duration(time.Second) {
		t.Errorf("position %+v; want interval and timeout 1s", p)
	}
	if l := cfg.Election.MaxLag; l == nil || *l != 0 {
		t.Errorf("max_lag %v; want 0 (set, not absent)", l)
	}
	cfg, err = Parse([]byte(doc(", max_lag: 9223372036854775807", "  position: {command: [/bin/true], interval: 5s}")), "")
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Service.Position; p.Timeout != Duration(5*time.Second) || *cfg.Election.MaxLag != 1<<63-1 {
		t.Errorf("position %+v, max_lag %d; want the timeout to follow the 5s interval", p, *cfg.Election.MaxLag)
	}
	for _, tc := range []struct{ election, svc, want string }{
		{", max_lag: 100", "", "election.max_lag: needs service.position"},
		{", max_lag: -1", "  position: {command: [/bin/true]}", "election.max_lag: must be >= 0"},
		{", max_lag: lots", "  position: {command: [/bin/true]}", "election.max_lag"},
		{"", "  position: {interval: 1s}", "service.position.command: required"},
		{"", "  position: {command: [/bin/true], interval: 1ms}", "service.position.interval"},
		{"", "  position: {command: [/bin/true], timeout: 2s}", "service.position.timeout: 2s is longer than service.position.interval"},
		{"", "  position: {command: [/bin/true], argv: [x]}", "service.position.argv: unknown key"},
	} {
		_, err := Parse([]byte(doc(tc.election, tc.svc)), "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %q: err %v, want %q", tc.election, tc.svc, err, tc.want)
		}
	}
}
