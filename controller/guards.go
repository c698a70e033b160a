package controller

import (
	"errors"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// primaryTracker remembers whether the local service may be acting as
// primary, across leaderships. Hooks never overlap, so the last hook event
// decides: a promote that starts (whatever it then does) makes the service
// possibly primary; only a demote that succeeded makes it surely not. A
// failed or stuck demote changes nothing. It starts true: whatever the
// service did before this process started is unknown until the startup
// demote succeeded. demotes counts successful demotes, so that a demote
// request can tell whether one succeeded since it arrived.
type primaryTracker struct {
	mayBePrimary bool
	demotes      uint64
}

func (p *primaryTracker) promoteStarted() { p.mayBePrimary = true }

func (p *primaryTracker) demoted() {
	p.mayBePrimary = false
	p.demotes++
}

// demotedSince reports whether the service is known not to be primary by a
// demote that succeeded after the count was seen (and after every promote).
func (p *primaryTracker) demotedSince(seen uint64) bool {
	return !p.mayBePrimary && p.demotes > seen
}

// ErrHookStuck is returned instead of running a hook while an earlier hook
// is still alive after SIGKILL.
var ErrHookStuck = errors.New("an earlier hook is still running after SIGKILL")

// stuckHook is a hook that proc.Run gave up on: it did not exit after
// SIGKILL (uninterruptible sleep). Reaped closes when it finally goes.
type stuckHook struct {
	name     string
	since    time.Time
	reaped   <-chan struct{}
	reapSeen bool      // the loop saw it reaped: the demote after it may run
	retryAt  time.Time // next try of that demote
	failures int
	msg      string // what it put in lastErr
}

// alive reports whether the stuck hook has not been reaped yet.
func (h *stuckHook) alive() bool {
	select {
	case <-h.reaped:
		return false
	default:
		return true
	}
}

// hookUnkillable records a hook that did not exit after SIGKILL and says so
// loudly. Until it is reaped, no hook runs and this node stays out of the
// election: a leadership in progress ends (the candidacy ends, the elector
// deletes our znode), so a successor is elected and fences us, and the
// service counts as possibly primary (a demote cannot succeed).
func (c *Controller) hookUnkillable(name string, reaped <-chan struct{}, err error) {
	h := &stuckHook{name: name, since: time.Now(), reaped: reaped}
	h.msg = fmt.Sprintf("%s hook did not exit after SIGKILL; out of the election until it exits: %v", name, err)
	c.l.stuck = h
	c.setErr(h.msg)
	c.log.Error("HOOK DID NOT EXIT AFTER SIGKILL: giving up leadership and staying out of the election until it exits; the successor fences this node",
		"hook", name, "err", err)
	c.metrics.HookUnkillable(name)
	go func() {
		if reaped != nil {
			select {
			case <-reaped:
			case <-c.loopDone:
				return
			}
		}
		c.send(hookReaped{h: h})
	}()
}

// onHookReaped: the stuck hook finally exited. The node stays out of the
// election until the service is known not to be primary: the stuck hook
// may have been a promote, or a demote that never finished, so the service
// may still act as primary while a successor leads. The demote is retried
// (with the takeover backoff) until it succeeds (startNextHook).
func (c *Controller) onHookReaped(h *stuckHook) {
	if c.l.stuck != h {
		return
	}
	c.log.Warn("the stuck hook finally exited", "hook", h.name, "stuck_for", time.Since(h.since).Round(time.Millisecond).String())
	h.reapSeen = true
}

// onReapDemote: the demote after a stuck hook was reaped is over.
func (c *Controller) onReapDemote(h *stuckHook, err error) {
	if c.l.stuck != h {
		return // it got stuck in turn: that hook's own reap takes over
	}
	if err == nil {
		c.stuckOver(h)
		return
	}
	c.clearErr(h.msg)
	h.msg = "after a stuck hook exited, the demote failed; out of the election until it succeeds: " + err.Error()
	c.setErr(h.msg)
	d := c.retryDelay(h.failures)
	h.failures++
	h.retryAt = time.Now().Add(d)
}

// stuckOver lets the node join again: the service is demoted.
func (c *Controller) stuckOver(h *stuckHook) {
	c.l.stuck = nil
	c.clearErr(h.msg)
	c.log.Warn("the service is demoted; this node may join the election again", "hook", h.name)
}

// KillGrace is the time between SIGTERM and SIGKILL for a hook that sets
// no kill grace of its own (Hook.KillGrace 0): the promote, killed when its
// leadership ends, and the demote that follows are part of the demote
// budget, so it is kept short; a hook gets its full timeout before it.
const KillGrace = 250 * time.Millisecond

// DemoteBudget is how long, after a leadership's lease ended, this
// controller may need to stop the service: kill a promote that may be
// running (its kill grace), then demote (its timeout, then its kill
// grace). It is the one formula of the budget: config validation checks
// the configured lease against it (the daemon wires each backend's timing
// check), and the daemon hands it to the elector, which keeps that much
// between the lease and the session timeout or lease TTL.
func DemoteBudget(cfg Config) time.Duration {
	return killGrace(cfg.Promote) + cfg.Demote.Timeout + killGrace(cfg.Demote)
}

// killGrace is a hook's kill grace: KillGrace unless set.
func killGrace(h Hook) time.Duration {
	if h.KillGrace > 0 {
		return h.KillGrace
	}
	return KillGrace
}

// checkDemoteBudget refuses a leadership whose expiry, as the backend
// reports it at the win, cannot hold the demote budget need: the
// term would be over for acting (valid) before anything happened. A
// backend sizes its lease so that this holds when it was given the same
// budget (the daemon does); this catches one configured without it.
func checkDemoteBudget(cfg Config, need time.Duration, t cluster.Term) error {
	exp, err := t.Expiry()
	if err != nil {
		return nil // over already: the term ends for that reason
	}
	left := time.Until(exp)
	if need < left {
		return nil
	}
	return fmt.Errorf("the demote budget %s (promote kill grace %s + service.demote.timeout %s + kill grace %s) does not fit in the %s "+
		"the coordination backend guarantees this term from its start (session timeout %s); shorten the demote timeout or raise the session timeout",
		need, killGrace(cfg.Promote), cfg.Demote.Timeout, killGrace(cfg.Demote), left.Round(time.Millisecond), t.SessionTimeout())
}
