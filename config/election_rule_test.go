package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
)

// TestLeaseRuleMatchesElection keeps the rule config validates with the one
// the elector applies: the ZooKeeper backend's timing check and the elector
// both call lease.Compute with the same inputs, so a config that validates
// is never refused or shortened by the elector for the session timeout it
// was validated against, and one the elector would refuse or shorten does
// not validate.
func TestLeaseRuleMatchesElection(t *testing.T) {
	budget := controller.DemoteBudget(controller.Config{Demote: controller.Hook{Timeout: config.DefaultDemoteTimeout}})
	for _, s := range []time.Duration{config.MinSessionTimeout, 1500 * time.Millisecond, 2 * time.Second, 4 * time.Second,
		5 * time.Second, 9*time.Second + 7, 40 * time.Second, config.MaxDuration} {
		for _, tick := range []time.Duration{0, 200 * time.Millisecond, 2 * time.Second} {
			for _, l := range []time.Duration{0, 300 * time.Millisecond, 3 * time.Second} {
				cfg := config.Default()
				cfg.ZooKeeper.Servers = []string{"127.0.0.1:2181"}
				cfg.ZooKeeper.SessionTimeout, cfg.ZooKeeper.TickTime, cfg.Election.Lease = config.Duration(s), config.Duration(tick), config.Duration(l)
				var leaseErrs []string
				var es config.ValidationErrors
				errors.As(cfg.Validate(), &es)
				for _, e := range es {
					if e.Path == "election.lease" || strings.HasPrefix(e.Path, "zookeeper.") {
						leaseErrs = append(leaseErrs, e.Error())
					}
				}
				et, eerr := election.Config{Lease: l, TickTime: tick, DemoteBudget: budget}.Timing(s)
				if elector := eerr == nil && !et.Clamped; elector != (len(leaseErrs) == 0) {
					t.Errorf("session %v tick %v lease %v: config %q, elector %+v (%v)", s, tick, l, leaseErrs, et, eerr)
				}
			}
		}
	}
}

// A config whose lease a move to another ZooKeeper server can end gets a
// warning naming the setting to change and a session timeout that works.
func TestReconnectWarning(t *testing.T) {
	for _, tc := range []struct {
		name          string
		session, tick time.Duration
		want          []string // substrings; nil: no warning
	}{
		{"defaults: tick unknown", 5 * time.Second, 0,
			[]string{"zookeeper.tick_time: ", "tick_time unset (assumed 2.5s", "set zookeeper.tick_time", "session_timeout to 10s or more"}},
		{"tick known, session too short", 4 * time.Second, 2 * time.Second,
			[]string{"zookeeper.session_timeout: ", "tick_time 2s", "session_timeout to 5s or more"}},
		{"tick 2s, 5s", 5 * time.Second, 2 * time.Second, nil},
		{"tick unknown, 10s", 10 * time.Second, 0, nil},
	} {
		cfg := config.Default()
		cfg.ZooKeeper.SessionTimeout, cfg.ZooKeeper.TickTime = config.Duration(tc.session), config.Duration(tc.tick)
		w := cfg.Warnings()
		if tc.want == nil {
			if len(w) != 0 {
				t.Errorf("%s: unexpected warnings %q", tc.name, w)
			}
			continue
		}
		if len(w) != 1 {
			t.Fatalf("%s: warnings %q, want one", tc.name, w)
		}
		for _, s := range tc.want {
			if !strings.Contains(w[0], s) {
				t.Errorf("%s: warning %q lacks %q", tc.name, w[0], s)
			}
		}
	}
}

// A node that publishes a loopback admin URL on a real host, with rpc
// fencing: peers' rpc fencers would reach their own daemons.
func TestLoopbackAdminWarning(t *testing.T) {
	for _, tc := range []struct {
		name, host, listen, advertise string
		rpcURL                        string
		warn                          bool
	}{
		{"loopback on a real host", "10.0.0.11", "127.0.0.1:9101", "", "", true},
		{"localhost advertised", "10.0.0.11", "0.0.0.0:9101", "http://localhost:9101", "", true},
		{"wildcard listen: the host is published", "10.0.0.11", "0.0.0.0:9101", "", "", false},
		{"advertised address", "10.0.0.11", "127.0.0.1:9101", "https://db1.example:9101", "", false},
		{"all on one host (tests, the demo)", "127.0.0.1", "127.0.0.1:9101", "", "", false},
		{"rpc with a fixed url", "10.0.0.11", "127.0.0.1:9101", "", "https://proxy.example:9101", false},
	} {
		cfg := config.Default()
		cfg.ZooKeeper.TickTime = config.Duration(2 * time.Second) // no reconnect warning
		cfg.Node.Host, cfg.Node.Admin.Listen, cfg.Node.Admin.AdvertiseURL = tc.host, tc.listen, tc.advertise
		cfg.Fencing.Methods = []config.FencingMethod{{RPC: &config.RPCFencing{URL: tc.rpcURL}}}
		w := cfg.Warnings()
		if got := len(w) == 1 && strings.HasPrefix(w[0], "node.admin.listen: "); got != tc.warn || len(w) > 1 {
			t.Errorf("%s: warnings %q, want a loopback warning: %v", tc.name, w, tc.warn)
		}
	}
	cfg := config.Default()
	cfg.ZooKeeper.TickTime = config.Duration(2 * time.Second)
	cfg.Node.Host, cfg.Node.Admin.Listen = "10.0.0.11", "127.0.0.1:9101"
	cfg.Fencing.Methods = []config.FencingMethod{{Shell: &config.ShellFencing{Command: []string{"/bin/true"}}}}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("no rpc method: warnings %q", w)
	}
}
