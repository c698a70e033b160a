package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// A graceful end: when this node ends a promoted term on purpose (a
// graceful stop, a cede, a handover to the target of a failover request,
// which a preemption is too), it keeps the term while its demote runs.
// The candidacy stays, so the backend goes on renewing the term (ZooKeeper
// renewals, etcd keepalives) and no other node can win it; the demote hook
// runs with Config.GracefulDemoteTimeout, which the lease does not bound;
// the term is given up (Finish deletes the breadcrumb and the election
// entry in one write) only after the demote succeeded, and the candidacy
// ends only then.
//
// One rule bounds it: the demote must be over before a successor may
// begin, as a forced demote is. By the clock, the hook is killed (SIGTERM,
// then SIGKILL after its kill grace) at the latest at the term's Expiry
// less the kill graces of a promote and of the demote: the moment a forced
// demote that started one demote budget before Expiry gets its SIGTERM.
// Renewals move Expiry, so a renewed term never reaches it. Once the term
// is known to be over (its context ended: lease, session or entry lost;
// Expiry fails), the demote has Demote.Timeout left, as a forced one that
// starts then. Either way the demote counts as forced: the breadcrumb
// stays, so the successor fences this node.
//
// Nothing else cuts it short: the reasons that would end the candidacy
// meanwhile (unhealthy, an operator demote or an rpc fence, the end of a
// stand-aside) find it ending already, and a demote request waits for it;
// the graceful stop's timeout is at least the graceful demote's (config
// validation, and New's default). A term that has not promoted yet, and
// every other end (lease lost, unhealthy, operator demote, a stuck hook),
// ends at once as before: its demote has Demote.Timeout.

// finishTimeout bounds Finish, the graceful end's last write.
const finishTimeout = 5 * time.Second

// gracefulRecheck is how often checkGraceful looks at a term whose
// graceful demote runs: a loss the loop finds by Expiry alone is capped
// by a cut at most this old.
const gracefulRecheck = time.Second

// errDemoteForced ends an end demote whose time ran out: its term was
// lost (a graceful one's forced time, or a forced one's timeout counted
// from the loss), or the graceful stop's deadline came.
var errDemoteForced = errors.New("controller: the demote's time ran out: its term was lost, or the stop's deadline came")

// gracefulTimeout is the graceful demote's timeout (Config.GracefulDemoteTimeout,
// at least Demote.Timeout).
func gracefulTimeout(cfg Config) time.Duration {
	return max(cfg.GracefulDemoteTimeout, cfg.Demote.Timeout)
}

// keepsForDemote reports whether ending the candidacy with cause ends tm
// gracefully, keeping it while it demotes (see above): a promoted term
// that is not over, and a reason that deletes the breadcrumb after a
// successful demote. A graceful stop while the cluster is paused leaves
// the service as it is (stopsWhilePaused): nothing to keep the term for.
func (c *Controller) keepsForDemote(tm *term, cause *endCause) bool {
	return tm.phase == phLeader && !tm.ended && graceful(cause.label) && !c.stopsWhilePaused(cause.label)
}

// endGracefully starts tm's graceful end: the candidacy is left for later
// (releaseTerm ends it), the demote is due.
func (c *Controller) endGracefully(tm *term, cause *endCause) {
	l := &c.l
	l.cand.later = cause
	reason := cause.label
	c.log.Info("leadership ends gracefully: demoting while the term is kept", "epoch", tm.epoch, "reason", reason,
		"graceful_timeout", gracefulTimeout(c.cfg).String())
	c.metrics.Leader(false, tm.epoch)
	c.metrics.LeadershipLost(reason)
	c.setState(StateDemoting, reason)
	tm.endReason, tm.phase, tm.graceful = reason, phEndDemote, true
}

// gracefulDemoting reports whether tm's graceful demote is pending or
// running and still graceful.
func (tm *term) gracefulDemoting() bool {
	return tm.graceful && !tm.forced && (tm.phase == phEndDemote || tm.phase == phEndDemoting)
}

// gracefulCut is when, by the clock, tm's graceful demote must be killed:
// its Expiry less the kill graces of a promote and of the demote. err:
// the term is over.
func (c *Controller) gracefulCut(tm *term) (time.Time, error) {
	exp, err := tm.t.Expiry()
	if err != nil {
		return time.Time{}, err
	}
	return exp.Add(-killGrace(c.cfg.Promote) - killGrace(c.cfg.Demote)), nil
}

// checkGraceful applies the rule's clock half to a graceful demote. A
// term found over gets Demote.Timeout from now, but never past the last
// cut seen while it was valid: the loop may notice the loss late, and a
// successor's start is bounded by the term's Expiry, not by when this loop
// looked.
func (c *Controller) checkGraceful(now time.Time) {
	tm := c.l.term
	if tm == nil || !tm.gracefulDemoting() {
		return
	}
	cut, err := c.gracefulCut(tm)
	switch {
	case err != nil:
		at := now.Add(c.cfg.Demote.Timeout)
		if !tm.lastCut.IsZero() && tm.lastCut.Before(at) {
			at = tm.lastCut
		}
		c.forceDemote(tm, err, at)
	case !now.Before(cut):
		c.forceDemote(tm, fmt.Errorf("%w: the term's expiry less the kill graces has passed", cluster.ErrLeaseExpired), now)
	default:
		tm.lastCut = cut
	}
}

// forceDemote makes tm's graceful demote a forced one (why: how the term
// was lost) that must end by at: its hook is killed then, or, not started
// yet, it starts with the time left until then (startEndDemote).
func (c *Controller) forceDemote(tm *term, why error, at time.Time) {
	tm.forced = true
	tm.forcedBy = at
	c.log.Warn("leadership lost during a graceful demote: the demote is cut short as a forced one, and the breadcrumb stays (the successor fences this node)",
		"epoch", tm.epoch, "err", why, "left", time.Until(at).Round(time.Millisecond).String())
	if h := c.l.hook; h != nil && h.term == tm && h.cut != nil {
		h.cut(at)
	}
}

// endDemoteRun is the hook run of tm's end demote and its context. A
// graceful demote runs with the graceful timeout and can be cut short
// (forceDemote); a forced one (a term lost, or a graceful one forced
// before it started) ends by the instant it was forced to end by, not a
// whole Demote.Timeout after it starts late (it waited for the hook slot
// or for the loop). During a graceful stop, either ends a kill
// grace before the stop's deadline, when the session closes: the term is
// never released while its demote may still run.
func (c *Controller) endDemoteRun(tm *term) (*hookRun, context.Context) {
	l := &c.l
	h := &hookRun{name: "demote", purpose: forTermEnd, term: tm, env: HookEnv{Reason: tm.endReason, Epoch: tm.epoch}}
	ctx, cut := gracefulDemoteContext()
	h.cut = cut
	switch {
	case tm.graceful && !tm.forced:
		h.env.Timeout = gracefulTimeout(c.cfg)
	case !tm.forcedBy.IsZero():
		// A forced demote: its timeout counts from the loss (or the
		// instant a graceful one was forced to end by).
		h.env.Timeout = max(min(c.cfg.Demote.Timeout, time.Until(tm.forcedBy)), time.Millisecond)
		cut(tm.forcedBy)
	}
	if l.stopping {
		c.cutForStop(h)
	}
	return h, ctx
}

// cutForStop makes a graceful end's demote end a kill grace before the
// graceful stop's deadline.
func (c *Controller) cutForStop(h *hookRun) {
	if h != nil && h.cut != nil && !c.l.stopDeadline.IsZero() {
		h.cut(c.l.stopDeadline.Add(-killGrace(c.cfg.Demote)))
	}
}

// gracefulDemoteContext is the graceful demote hook's context, and the
// function that ends it at a given instant (the earliest one it was
// given).
func gracefulDemoteContext() (context.Context, func(at time.Time)) {
	ctx, cancel := context.WithCancelCause(context.Background())
	var by time.Time
	var timer *time.Timer
	return ctx, func(at time.Time) {
		if !by.IsZero() && !at.Before(by) {
			return
		}
		by = at
		if timer != nil {
			timer.Stop()
		}
		timer = time.AfterFunc(time.Until(at), func() { cancel(errDemoteForced) })
	}
}
