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
// is how often its heartbeat moves. 0: unknown.
type RenewInterval func(t Timing) time.Duration

var renewIntervals struct {
	sync.RWMutex
	byBackend map[string]RenewInterval
}

// SetRenewIntervals wires the coordination backends' renew intervals, by
// coordination.backend value, into Warnings and FailoverArithmetic, which
// compare election.suspect_after with them. config imports no backend:
// cmd/failoverd, which does, calls it at start-up, beside
// SetTimingChecks. Unwired, those comparisons are left out.
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

// SuspectProbeMax bounds the daemon's probe of a suspected leader's admin
// API, which precedes the proving fence: one probe takes at most
// min(election.suspect_after, SuspectProbeMax). FailoverArithmetic counts
// it.
const SuspectProbeMax = time.Second

// SuspectMinIntervals is how many renew intervals election.suspect_after
// should span at least: a heartbeat one whole renewal late (a slow write,
// a pause of the leader or of the coordination service) then still does
// not get a live leader suspected and fenced. Below it Warnings warns.
const SuspectMinIntervals = 2

// fenceFirstWarnings: with election.fence_first, a suspect_after too close
// to the renew interval, and a proving rpc method whose answer may cross
// the network unauthenticated.
func (c *Config) fenceFirstWarnings() []string {
	if !c.Election.FenceFirst {
		return nil
	}
	var w []string
	s := c.Election.SuspectAfter.Std()
	if renew, ok := c.renewInterval(); ok && s > 0 && s < SuspectMinIntervals*renew {
		w = append(w, fmt.Sprintf("election.suspect_after: %s is shorter than %d renew intervals (%s each, %s): a heartbeat one renewal late "+
			"(a slow write, a pause of the leader's process or of the coordination service) gets a live leader suspected and fenced; "+
			"below one interval every leader is suspected between two renewals; set it to %s or more",
			fmtDur(s), SuspectMinIntervals, fmtDur(renew), fmtDur(SuspectMinIntervals*renew), fmtDur(SuspectMinIntervals*renew)))
	}
	for i, m := range c.Fencing.Methods {
		if m.RPC != nil && m.RPC.AllowInsecureHTTP && m.Proving() {
			w = append(w, fmt.Sprintf("fencing.methods[%d].proves: this rpc method proves (the default for rpc) and may call over plain http (allow_insecure_http): "+
				"whoever can answer in its place can forge \"demoted\" and have election.fence_first end a live leader's term; use https, or set proves: false",
				i))
		}
	}
	return w
}

// FailoverArithmetic returns, one line each, what election.fence_first
// makes of a silent leader's failover, as `failoverd validate` prints it
// (worst cases): the fencing-first path (election.suspect_after, the probe
// of the leader, then the proving methods' step timeouts in order), the
// expiry path beside it (the session timeout or etcd.lease_ttl, then the
// whole fencing chain against the leader the breadcrumb names), the time
// within which probe and proving fence must be done to beat expiry, and
// the hooks both paths end with (service.pre_promote, service.promote).
// nil when fence_first is off. The lines assume c validated.
func (c *Config) FailoverArithmetic() []string {
	e := &c.Election
	if !e.FenceFirst {
		return nil
	}
	suspect := e.SuspectAfterOrDefault()
	probe := min(suspect, SuspectProbeMax)
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
	var by string
	switch {
	case c.Coordination.Backend == BackendEtcd && c.Etcd != nil:
		expiry = c.Etcd.LeaseTTL.Std()
		by = fmt.Sprintf("by expiry, when no proving method succeeded: etcd.lease_ttl %s after the leader's last renewal", fmtDur(expiry))
	case e.TakeOverAtDeadline:
		expiry = c.ZooKeeper.SessionTimeout.Std()
		by = fmt.Sprintf("by the leader's own deadline, when no proving method succeeded (election.take_over_at_deadline): "+
			"lease + demote budget + session/20 after the leader's last heartbeat, at most zookeeper.session_timeout %s", fmtDur(expiry))
	default:
		expiry = c.ZooKeeper.SessionTimeout.Std()
		by = fmt.Sprintf("by expiry, when no proving method succeeded: zookeeper.session_timeout %s after the leader's last renewal "+
			"(ZooKeeper checks expiry once per tickTime: up to one tickTime more)", fmtDur(expiry))
	}
	fence := "no fencing method"
	if len(all) > 0 {
		fence = fmt.Sprintf("every method in order, up to %s (%s)", fmtDur(allSum), strings.Join(all, ", "))
	}

	lines := []string{
		"failover of a silent leader with election.fence_first (worst cases, from the leader's last heartbeat):",
		fmt.Sprintf("  fencing first: election.suspect_after %s, a probe of the leader's admin API up to %s, then the proving methods in order (%s), "+
			"then one guarded operation that ends the leader's term: won within %s (%s + %s + %s) when a proving method succeeds; the winner does not fence that term again",
			fmtDur(suspect), fmtDur(probe), strings.Join(proving, ", "), fmtDur(suspect+probe+provingSum), fmtDur(suspect), fmtDur(probe), fmtDur(provingSum)),
		fmt.Sprintf("  %s; the winner then fences the leader the breadcrumb names: %s", by, fence),
	}
	if left := expiry - suspect; left > 0 {
		lines = append(lines, fmt.Sprintf("  fencing first is the faster path when probe and proving fence are done within %s (%s - election.suspect_after %s)",
			fmtDur(left), fmtDur(expiry), fmtDur(suspect)))
	}
	var hooks []string
	var hooksSum time.Duration
	if p := c.Service.PrePromote; p != nil {
		hooks, hooksSum = append(hooks, "service.pre_promote.timeout "+fmtDur(p.Timeout.Std())), p.Timeout.Std()
	}
	hooks, hooksSum = append(hooks, "service.promote.timeout "+fmtDur(c.Service.Promote.Timeout.Std())), hooksSum+c.Service.Promote.Timeout.Std()
	lines = append(lines, fmt.Sprintf("  then, either way: %s; up to %s", strings.Join(hooks, ", "), fmtDur(hooksSum)))
	if renew, ok := c.renewInterval(); ok {
		lines = append(lines, fmt.Sprintf("  heartbeat: the leader renews every %s; election.suspect_after is %.1f renew intervals (warned below %d)",
			fmtDur(renew), float64(suspect)/float64(renew), SuspectMinIntervals))
	}
	return lines
}
