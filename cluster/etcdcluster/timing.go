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
// path of the key to change, and warn for one that works but ends the
// leader's term when the etcd leader dies (RidesElection).
func CheckTiming(c TimingConfig, fail, warn func(path, msg string)) {
	renew := DefaultRenewInterval(c.LeaseTTL)
	if err := LeaseFits(c.LeaseTTL, 0, c.DemoteBudget); err != nil {
		fail("etcd.lease_ttl", fmt.Sprintf("%s is too short for service.demote.timeout %s: a leader renews every %s (a third of the TTL, at most %s) and must demote "+
			"within what is left after a renewal that went unanswered, less a margin of TTL/%d and %s; %s "+
			"(the demote budget is service.demote.timeout plus the kill graces of a running promote and of the demote)",
			timingDur(c.LeaseTTL), timingDur(c.DemoteTimeout), timingDur(renew), timingDur(MaxRenewInterval), RateDiv, timingDur(MinTolerance),
			strings.TrimPrefix(err.Error(), ErrLeaseTooShort.Error()+": ")))
		return
	}
	if left := electionRoom(c.LeaseTTL, c.DemoteBudget); left < EtcdElection {
		warn("etcd.lease_ttl", fmt.Sprintf("%s leaves %s after one renewal that went unanswered, less than an etcd leader election (about %s): "+
			"the TTL %s less the margin %s, the renew interval %s and the demote budget %s (service.demote.timeout %s plus the kill graces "+
			"of a running promote and of the demote); when the etcd leader dies the leader's term can end (lease_expired) and the service fails over. "+
			"%s rides an etcd election out",
			timingDur(c.LeaseTTL), timingDur(left), timingDur(EtcdElection), timingDur(c.LeaseTTL), timingDur(c.LeaseTTL/RateDiv),
			timingDur(renew), timingDur(c.DemoteBudget), timingDur(c.DemoteTimeout), timingDur(RidesElection(c.DemoteBudget))))
	}
}

// electionRoom is what a lease of TTL ttl leaves a leader after one
// renewal went unanswered: the Expiry of a renewal sent a renew interval
// earlier, less the demote budget. A renewal must be confirmed within it,
// and after an etcd leader's death none is until the next etcd leader is
// elected.
func electionRoom(ttl, budget time.Duration) time.Duration {
	return ttl - ttl/RateDiv - DefaultRenewInterval(ttl) - budget
}

// RidesElection is the shortest etcd.lease_ttl, in whole seconds, that
// leaves a leader with demote budget budget EtcdElection after one
// renewal went unanswered: at it, a leader keeps its term through the
// death of the etcd leader.
func RidesElection(budget time.Duration) time.Duration {
	ttl := time.Second
	for electionRoom(ttl, budget) < EtcdElection {
		ttl += time.Second
	}
	return ttl
}

// timingDur rounds to the millisecond for CheckTiming's messages ("3.333s"),
// as config's own messages do.
func timingDur(d time.Duration) string {
	if d >= time.Millisecond || d <= -time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}
