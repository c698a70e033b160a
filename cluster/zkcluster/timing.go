package zkcluster

import (
	"fmt"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
)

// TimingConfig is what CheckTiming reads: a ZooKeeper leadership's timing
// settings as configured, and the demote budget of the hooks the daemon
// runs. The caller has checked each value's own range.
type TimingConfig struct {
	// SessionTimeout is zookeeper.session_timeout, the timeout asked for.
	SessionTimeout time.Duration
	// TickTime is zookeeper.tick_time; 0: unknown.
	TickTime time.Duration
	// Lease is election.lease; 0: the longest that fits.
	Lease time.Duration
	// DemoteTimeout is service.demote.timeout; 0 when it is not valid, and
	// then only the lease is checked against the session timeout.
	DemoteTimeout time.Duration
	// DemoteBudget is the controller's demote budget: DemoteTimeout plus
	// the kill graces of a running promote and of the demote.
	DemoteBudget time.Duration
	// KillGrace is each of those kill graces, named in messages.
	KillGrace time.Duration
}

// CheckTiming checks a ZooKeeper leadership's timing by the rule the
// elector applies to the session timeout ZooKeeper grants (lease.Compute,
// the same function): the lease plus the demote budget plus a margin
// (session/20) within the session timeout, and the lease at least two
// renew intervals plus lease.MinTolerance. It calls fail for each setting
// that cannot work, and warn when the lease works but a move to another
// ZooKeeper server can end a leadership (lease.Timing.RidesOutReconnect);
// each with the YAML path of the key to change. The daemon checks again
// against the granted timeout, and stays out of the election when it does
// not fit.
func CheckTiming(c TimingConfig, fail, warn func(path, msg string)) {
	const p = "election.lease"
	l, session, demote := c.Lease, c.SessionTimeout, c.DemoteTimeout
	if demote <= 0 {
		if l >= session-lease.Margin(session) {
			fail(p, fmt.Sprintf("%s is too long for zookeeper.session_timeout (%s): the lease, the demote budget and a margin (session/%d) must fit in it",
				timingDur(l), timingDur(session), lease.MarginDiv))
		}
		return
	}
	t, err := lease.Compute(session, c.TickTime, c.DemoteBudget, l, 0)
	tickDesc := "zookeeper.tick_time " + timingDur(c.TickTime)
	if !t.TickKnown {
		tickDesc = fmt.Sprintf("zookeeper.tick_time unknown (assumed %s, half the session timeout)", timingDur(t.Tick))
	}
	budget := fmt.Sprintf("the demote budget %s (service.demote.timeout %s plus the kill graces of a running promote and of the demote, %s each)",
		timingDur(t.Budget), timingDur(demote), timingDur(c.KillGrace))
	switch {
	case t.Max < t.MinLease():
		fix := "raise the session timeout or lower the demote timeout"
		if !t.TickKnown {
			fix = "raise the session timeout, lower the demote timeout or set zookeeper.tick_time"
		}
		fail("zookeeper.session_timeout", fmt.Sprintf("%s is too short for service.demote.timeout %s with %s: the session timeout minus %s minus a margin of %s leaves a lease of %s, "+
			"and a lease must be at least twice the renew interval (%s, tickTime/2 + %d%%) plus %s = %s to tolerate anything; %s",
			timingDur(session), timingDur(demote), tickDesc, budget, timingDur(t.Margin), timingDur(t.Max),
			timingDur(t.Renew), 100/lease.RateDiv, timingDur(lease.MinTolerance), timingDur(t.MinLease()), fix))
	case t.Clamped:
		fail(p, fmt.Sprintf("%s is too long for zookeeper.session_timeout (%s) and service.demote.timeout (%s): the lease plus %s plus a margin of %s (session/%d) must fit in the session timeout, "+
			"so that the old leader has demoted before its session can expire; use at most %s, or leave it unset for that",
			timingDur(l), timingDur(session), timingDur(demote), budget, timingDur(t.Margin), lease.MarginDiv, timingDur(t.Max)))
	case err != nil:
		fail(p, fmt.Sprintf("%s leaves no tolerance with %s: a lease must be at least twice the renew interval (%s, tickTime/2 + %d%%) plus %s = %s; raise it (at most %s) or leave it unset",
			timingDur(l), tickDesc, timingDur(t.Renew), 100/lease.RateDiv, timingDur(lease.MinTolerance), timingDur(t.MinLease()), timingDur(t.Max)))
	}
	if err != nil || t.RidesOutReconnect() {
		return
	}
	tick := "zookeeper.tick_time " + timingDur(t.Tick)
	path := "zookeeper.session_timeout"
	if !t.TickKnown {
		tick = fmt.Sprintf("zookeeper.tick_time unset (assumed %s, half the session timeout)", timingDur(t.Tick))
		path = "zookeeper.tick_time"
	}
	fix := "raise zookeeper.session_timeout or lower service.demote.timeout"
	if s := lease.SessionForReconnect(c.TickTime, t.Budget); s > 0 && l == 0 {
		fix = fmt.Sprintf("raise zookeeper.session_timeout to %s or more, or lower service.demote.timeout", timingDur(s))
	}
	if !t.TickKnown {
		fix = "set zookeeper.tick_time to the ensemble's tickTime, or " + fix
	}
	warn(path, fmt.Sprintf("with %s and a lease of %s renewed every %s, a leader rides out %s without ZooKeeper, "+
		"but after moving to another ZooKeeper server it needs one renew interval and round trips before its lease moves again: "+
		"a ZooKeeper server restart or a reset connection may end its leadership and cause a failover; %s",
		tick, timingDur(t.Lease), timingDur(t.Renew), timingDur(max(t.Tolerance(), 0)), fix))
}

// timingDur rounds to the millisecond for CheckTiming's messages ("3.333s"),
// as config's own messages do.
func timingDur(d time.Duration) string {
	if d >= time.Millisecond || d <= -time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}
