package controller

import (
	"context"
	"errors"
	"sync"
	"time"
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
// One rule bounds it: as soon as the term can no longer be assumed (its
// context ended: lease, session or entry lost; or valid fails by the
// clock: Expiry less the demote budget passed), the demote is a forced
// one. From that moment it has Demote.Timeout left (then SIGTERM, and
// SIGKILL after its kill grace): what the forced path gives a demote that
// starts when a term ends, so it is over within the demote budget, before
// a successor may begin. The breadcrumb then stays, so the successor
// fences this node.
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

// errDemoteForced ends a graceful demote whose term was lost and whose
// forced time ran out.
var errDemoteForced = errors.New("controller: the term was lost during the graceful demote, and the forced demote's timeout ran out")

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

// checkGraceful applies the rule's clock half: a graceful demote whose
// term can no longer be acted on becomes a forced one.
func (c *Controller) checkGraceful() {
	if tm := c.l.term; tm != nil && tm.gracefulDemoting() {
		if err := tm.valid(); err != nil {
			c.forceDemote(tm, err)
		}
	}
}

// forceDemote turns tm's graceful demote into a forced one (why: how the
// term was lost). A demote not started yet starts with Demote.Timeout.
func (c *Controller) forceDemote(tm *term, why error) {
	tm.forced = true
	c.log.Warn("leadership lost during a graceful demote: the demote now has the demote timeout left, and the breadcrumb stays (the successor fences this node)",
		"epoch", tm.epoch, "err", why, "demote_timeout", c.cfg.Demote.Timeout.String())
	if h := c.l.hook; h != nil && h.term == tm && h.force != nil {
		h.force()
	}
}

// gracefulDemoteContext is the graceful demote hook's context, and the
// function that gives it Demote.Timeout from the call on (forceDemote).
func (c *Controller) gracefulDemoteContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	var once sync.Once
	left := c.cfg.Demote.Timeout
	return ctx, func() {
		once.Do(func() { time.AfterFunc(left, func() { cancel(errDemoteForced) }) })
	}
}
