package etcdcluster

import (
	"fmt"
	"strings"
	"time"
)

// TimingConfig is what CheckTiming reads: an etcd leadership's timing
// settings as configured, and the demote budget of the hooks the daemon
// runs. The caller has checked each value's own range (etcd's floor,
// whole seconds).
type TimingConfig struct {
	// LeaseTTL is etcd.lease_ttl, the TTL asked for.
	LeaseTTL time.Duration
	// DemoteTimeout is service.demote.timeout, named in messages.
	DemoteTimeout time.Duration
	// DemoteBudget is the controller's demote budget: DemoteTimeout plus
	// the kill graces of a running promote and of the demote.
	DemoteBudget time.Duration
}

// CheckTiming checks that a lease of the configured TTL holds the demote
// budget, by the rule the elector applies to the TTL etcd grants
// (LeaseFits). It calls fail for a setting that cannot work, with the YAML
// path of the key to change; warn is for what works but deserves a word
// (nothing yet).
func CheckTiming(c TimingConfig, fail, warn func(path, msg string)) {
	err := LeaseFits(c.LeaseTTL, 0, c.DemoteBudget)
	if err == nil {
		return
	}
	fail("etcd.lease_ttl", fmt.Sprintf("%s is too short for service.demote.timeout %s: a leader renews every third of the TTL and must demote "+
		"within what is left after a renewal that went unanswered, less a margin of TTL/%d and %s; %s "+
		"(the demote budget is service.demote.timeout plus the kill graces of a running promote and of the demote)",
		timingDur(c.LeaseTTL), timingDur(c.DemoteTimeout), RateDiv, timingDur(MinTolerance), strings.TrimPrefix(err.Error(), ErrLeaseTooShort.Error()+": ")))
}

// timingDur rounds to the millisecond for CheckTiming's messages ("3.333s"),
// as config's own messages do.
func timingDur(d time.Duration) string {
	if d >= time.Millisecond || d <= -time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}
