package config_test

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/internal/lease"
)

// TestLeaseRuleMatchesElection keeps the rule config validates with the one
// the elector applies: both call lease.Compute with the same inputs, so a
// config that validates is never refused or shortened by the elector for
// the session timeout it was validated against, and the default lease is
// the same on both sides.
func TestLeaseRuleMatchesElection(t *testing.T) {
	for _, s := range []time.Duration{config.MinSessionTimeout, 1500 * time.Millisecond, 2 * time.Second, 4 * time.Second,
		5 * time.Second, 9*time.Second + 7, 40 * time.Second, config.MaxDuration} {
		for _, tick := range []time.Duration{0, 200 * time.Millisecond, 2 * time.Second} {
			for _, l := range []time.Duration{0, 300 * time.Millisecond, 3 * time.Second} {
				cfg := config.Default()
				cfg.ZooKeeper.SessionTimeout, cfg.ZooKeeper.TickTime, cfg.Election.Lease = config.Duration(s), config.Duration(tick), config.Duration(l)
				ct, cerr := cfg.Timing(s)
				et, eerr := election.Config{Lease: l, TickTime: tick, DemoteBudget: cfg.DemoteBudget()}.Timing(s)
				if (cerr == nil) != (eerr == nil) || ct != et {
					t.Errorf("session %v tick %v lease %v: config %+v (%v), elector %+v (%v)", s, tick, l, ct, cerr, et, eerr)
				}
			}
		}
	}
	if got, want := config.Default().DemoteBudget(), lease.DemoteBudget(lease.KillGrace, config.DefaultDemoteTimeout, lease.KillGrace); got != want {
		t.Errorf("default demote budget %v, want %v", got, want)
	}
}
