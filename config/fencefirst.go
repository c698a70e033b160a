package config

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"
)

// Fencing first (election.fence_first): the figures and warnings an
// operator needs besides validation's rules (validate.go, fenceFirst).

// RenewInterval is one coordination backend's renew interval for the
// timing t: how often a leader renews its term, which with fencing first
// is how often its heartbeat moves; t.RenewInterval is
// election.renew_interval, which it applies as the backend's elector
// does (0: the interval the backend derives). 0: unknown.
type RenewInterval func(t Timing) time.Duration

var renewIntervals struct {
	sync.RWMutex
	byBackend map[string]RenewInterval
}

// SetRenewIntervals wires the coordination backends' renew intervals, by
// coordination.backend value, into validation and FailoverArithmetic: a
// leader's heartbeat is overdue once it stood still for its renew interval
// plus election.suspect_after, which must be shorter than the session
// timeout or etcd.lease_ttl. config imports no backend: cmd/failoverd,
// which does, calls it at start-up, beside SetTimingChecks. Unwired,
// validation compares suspect_after alone with the expiry, and
// FailoverArithmetic names the renew interval without a figure.
func SetRenewIntervals(m map[string]RenewInterval) {
	renewIntervals.Lock()
	defer renewIntervals.Unlock()
	renewIntervals.byBackend = maps.Clone(m)
}

// renewInterval is the renew interval of c's backend, false when no
// backend's interval is wired or it is unknown.
func (c *Config) renewInterval() (time.Duration, bool) {
	renewIntervals.RLock()
	f := renewIntervals.byBackend[c.Coordination.Backend]
	renewIntervals.RUnlock()
	if f == nil {
		return 0, false
	}
	d := f(c.Timing())
	return d, d > 0
}

// derivedRenewInterval is the renew interval c's backend derives when
// election.renew_interval is 0; false as for renewInterval.
func (c *Config) derivedRenewInterval() (time.Duration, bool) {
	renewIntervals.RLock()
	f := renewIntervals.byBackend[c.Coordination.Backend]
	renewIntervals.RUnlock()
	if f == nil {
		return 0, false
	}
	t := c.Timing()
	t.RenewInterval = 0
	d := f(t)
	return d, d > 0
}

// MinRenewInterval is the shortest election.renew_interval validation
// accepts: every candidate renews at that rate.
const MinRenewInterval = 50 * time.Millisecond

// RenewIntervalLow is the election.renew_interval below which Warnings
// warns of its cost.
const RenewIntervalLow = 200 * time.Millisecond

// renewIntervalWarning: an election.renew_interval below
// RenewIntervalLow, and what it costs each candidate.
func (c *Config) renewIntervalWarning() string {
	r := c.Election.RenewInterval.Std()
	if r <= 0 || r >= RenewIntervalLow {
		return ""
	}
	per := time.Second.Seconds() / r.Seconds()
	cost := fmt.Sprintf("one ZooKeeper write per renewal by the leader and by each candidate that keeps a credit chain: %.0f writes/s each", per)
	if c.Coordination.Backend == BackendEtcd {
		reqs, what := 3*per, "two lease keepalives and a linearizable read per renewal"
		if c.Election.FenceFirst {
			reqs, what = 4*per, "two lease keepalives, a linearizable read and a heartbeat write (election.fence_first) per renewal"
		}
		cost = fmt.Sprintf("%s: %.0f requests/s per candidate", what, reqs)
	}
	return fmt.Sprintf("election.renew_interval: %s is below %s: the backend renews at that rate (%s); "+
		"set it to %s or more unless the sooner suspicion of a crashed leader is worth the load",
		fmtDur(r), fmtDur(RenewIntervalLow), cost, fmtDur(RenewIntervalLow))
}

// SuspectProbeMax bounds the daemon's probe of a suspected leader's admin
// API, which precedes the proving fence: one probe takes at most
// min(election.suspect_after, SuspectProbeMax). FailoverArithmetic counts
// it.
const SuspectProbeMax = time.Second

// SuspectAfterLow is the election.suspect_after below which Warnings
// warns: a heartbeat that one slow write made that late gets the leader
// suspected, and probed, on every such renewal.
const SuspectAfterLow = 100 * time.Millisecond

// suspectRetryMin: while a suspected heartbeat stands, the candidate asks
// again every max(election.suspect_after, suspectRetryMin)
// (cluster.FenceFirst).
const suspectRetryMin = 500 * time.Millisecond

// fenceFirstWarnings: with election.fence_first, a suspect_after that
// leaves a renewal no room to be late, and a proving rpc method whose
// answer may cross the network unauthenticated.
func (c *Config) fenceFirstWarnings() []string {
	if !c.Election.FenceFirst {
		return nil
	}
	var w []string
	if s := c.Election.SuspectAfter.Std(); s > 0 && s < SuspectAfterLow {
		w = append(w, fmt.Sprintf("election.suspect_after: %s is below %s: it is how late a heartbeat may be beyond the leader's renew interval, "+
			"and a renewal that a slow write (an fsync, a busy coordination server) or a short pause of the leader's process makes that late "+
			"gets the leader suspected and probed, and fenced if the probe is not answered in time; set it to %s or more",
			fmtDur(s), fmtDur(SuspectAfterLow), fmtDur(SuspectAfterLow)))
	}
	for i, m := range c.Fencing.Methods {
		if m.RPC != nil && m.RPC.AllowInsecureHTTP && m.Proving() {
			w = append(w, fmt.Sprintf("fencing.methods[%d].proves: this rpc method proves (the default for rpc) and may call over plain http (allow_insecure_http): "+
				"whoever can answer in its place can forge \"demoted\" and have election.fence_first end a live leader's term; use https, or set proves: false",
				i))
		}
		if m.RPC == nil && m.Proving() {
			w = append(w, fmt.Sprintf("fencing.methods[%d].proves: with election.fence_first a success of this %s method is taken as proof that the old node "+
				"can no longer act while its term is still valid by its own lease: its command must stop the old node's failoverd, its hooks and its service "+
				"(or power the host off) and check that before it exits 0; killing the service alone is no proof", i, m.Name()))
		}
	}
	return w
}

// FailoverArithmetic returns, one line each, what election.fence_first
// makes of a silent leader's failover, as `failoverd validate` prints it
// (worst cases): the fencing-first path (the leader's renew interval plus
// election.suspect_after until its heartbeat is overdue, the probe of the
// leader, then the proving methods' step timeouts in order), the expiry
// path beside it (the session timeout or etcd.lease_ttl, then the whole
// fencing chain against the leader the breadcrumb names), the time within
// which probe and proving fence must be done to beat expiry, the hooks
// both paths end with (service.pre_promote, service.promote), and when a
// heartbeat counts as overdue. The renew interval is the backend's
// (SetRenewIntervals); unwired, the lines name it without a figure. nil
// when fence_first is off. The lines assume c validated.
func (c *Config) FailoverArithmetic() []string {
	e := &c.Election
	if !e.FenceFirst {
		return nil
	}
	suspect := e.SuspectAfterOrDefault()
	probe := min(suspect, SuspectProbeMax)
	renew, renewOK := c.renewInterval()
	var proving, all []string
	var provingSum, allSum time.Duration
	for i, m := range c.Fencing.Methods {
		d := m.StepTimeout()
		step := fmt.Sprintf("fencing.methods[%d] %s %s", i, m.Name(), fmtDur(d))
		all, allSum = append(all, step), allSum+d
		if m.Proving() {
			proving, provingSum = append(proving, step), provingSum+d
		}
	}

	var expiry time.Duration
	var by, expiryKey string
	switch {
	case c.Coordination.Backend == BackendEtcd && c.Etcd != nil:
		expiry, expiryKey = c.Etcd.LeaseTTL.Std(), "etcd.lease_ttl"
		by = fmt.Sprintf("by expiry, when no proving method succeeded: etcd.lease_ttl %s after the leader's last renewal", fmtDur(expiry))
	case e.TakeOverAtDeadline:
		expiry, expiryKey = c.ZooKeeper.SessionTimeout.Std(), "zookeeper.session_timeout"
		by = fmt.Sprintf("by the leader's own deadline, when no proving method succeeded (election.take_over_at_deadline): "+
			"lease + demote budget + session/20 after the leader's last heartbeat, at most zookeeper.session_timeout %s", fmtDur(expiry))
	default:
		expiry, expiryKey = c.ZooKeeper.SessionTimeout.Std(), "zookeeper.session_timeout"
		by = fmt.Sprintf("by expiry, when no proving method succeeded: zookeeper.session_timeout %s after the leader's last renewal "+
			"(ZooKeeper checks expiry once per tickTime: up to one tickTime more)", fmtDur(expiry))
	}
	fence := "no fencing method"
	if len(all) > 0 {
		fence = fmt.Sprintf("every method in order, up to %s (%s)", fmtDur(allSum), strings.Join(all, ", "))
	}

	// overdue: when the heartbeat counts as overdue; won: when fencing
	// first has won, from the last heartbeat.
	overdue := "the leader's renew interval + election.suspect_after " + fmtDur(suspect)
	won := fmt.Sprintf("the leader's renew interval + %s (%s + %s + %s)", fmtDur(suspect+probe+provingSum), fmtDur(suspect), fmtDur(probe), fmtDur(provingSum))
	if renewOK {
		overdue = fmt.Sprintf("the leader's renew interval %s + election.suspect_after %s", fmtDur(renew), fmtDur(suspect))
		won = fmt.Sprintf("%s (%s + %s + %s + %s)", fmtDur(renew+suspect+probe+provingSum), fmtDur(renew), fmtDur(suspect), fmtDur(probe), fmtDur(provingSum))
	}
	lines := []string{
		"failover of a silent leader with election.fence_first (worst cases, from the leader's last heartbeat):",
		fmt.Sprintf("  fencing first: the heartbeat is overdue after %s, then a probe of the leader's admin API up to %s, then the proving methods in order (%s), "+
			"then one guarded operation that ends the leader's term: won within %s when a proving method succeeds; the winner does not fence that term again",
			overdue, fmtDur(probe), strings.Join(proving, ", "), won),
		fmt.Sprintf("  %s; the winner then fences the leader the breadcrumb names: %s", by, fence),
	}
	switch left := expiry - renew - suspect; {
	case !renewOK:
		lines = append(lines, fmt.Sprintf("  fencing first is the faster path when probe and proving fence are done within %s less the leader's renew interval and election.suspect_after %s",
			fmtDur(expiry), fmtDur(suspect)))
	case left > 0:
		lines = append(lines, fmt.Sprintf("  fencing first is the faster path when probe and proving fence are done within %s (%s %s - renew interval %s - election.suspect_after %s)",
			fmtDur(left), expiryKey, fmtDur(expiry), fmtDur(renew), fmtDur(suspect)))
	}
	var hooks []string
	var hooksSum time.Duration
	if p := c.Service.PrePromote; p != nil {
		hooks, hooksSum = append(hooks, "service.pre_promote.timeout "+fmtDur(p.Timeout.Std())), p.Timeout.Std()
	}
	hooks, hooksSum = append(hooks, "service.promote.timeout "+fmtDur(c.Service.Promote.Timeout.Std())), hooksSum+c.Service.Promote.Timeout.Std()
	lines = append(lines, fmt.Sprintf("  then, either way: %s; up to %s", strings.Join(hooks, ", "), fmtDur(hooksSum)))
	retry := fmtDur(max(suspect, suspectRetryMin))
	if renewOK {
		lines = append(lines, fmt.Sprintf("  heartbeat: the leader renews every %s and publishes that interval; its heartbeat counts as overdue once it stood still for %s (renew interval %s + election.suspect_after %s), "+
			"so a crashed leader is suspected %s after the crash on average (renew interval/2 + election.suspect_after); while that heartbeat stands the candidate asks again every %s",
			fmtDur(renew), fmtDur(renew+suspect), fmtDur(renew), fmtDur(suspect), fmtDur(renew/2+suspect), retry))
	} else {
		lines = append(lines, fmt.Sprintf("  heartbeat: it counts as overdue once it stood still for the renew interval the leader publishes + election.suspect_after %s; "+
			"while it stands the candidate asks again every %s", fmtDur(suspect), retry))
	}
	return lines
}
