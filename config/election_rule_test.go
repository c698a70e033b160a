package config_test

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/election"
)

// TestLeaseRuleMatchesElection keeps the lease rule that config validates
// with (it mirrors the election package rather than import it) no looser
// than the one the elector applies: a lease that validates must never be
// shortened or refused by the elector for the session timeout it was
// validated against.
func TestLeaseRuleMatchesElection(t *testing.T) {
	if config.MinLease < election.MinLease {
		t.Errorf("config.MinLease %v is below election.MinLease %v", config.MinLease, election.MinLease)
	}
	for _, s := range []time.Duration{config.MinSessionTimeout, 1500 * time.Millisecond, 2 * time.Second, 4 * time.Second,
		5 * time.Second, 9*time.Second + 7, 40 * time.Second, config.MaxDuration} {
		if got, want := config.MaxLeaseFor(s), election.MaxLease(s, 0); got > want {
			t.Errorf("session %v: config allows a lease of up to %v, the elector only %v", s, got, want)
		}
		if def := (config.Election{}).LeaseFor(s); def > election.MaxLease(s, 0) || def < election.MinLease {
			t.Errorf("session %v: the default lease %v does not suit the elector (%v to %v)", s, def, election.MinLease, election.MaxLease(s, 0))
		}
	}
}
