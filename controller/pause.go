package controller

import (
	"context"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/healthcheck"
)

// Maintenance mode and the failover cooldown.
//
// While the cluster is paused (a pause record exists, see cluster.Pause)
// no node promotes, demotes or fences on its own:
//   - a standby leaves the election (cause "paused"), except the target of
//     a standing manual failover request: the operator is in charge, and
//     failover --to works as usual (the target fences the old leader);
//   - the leader keeps its term although its health fails (health is
//     still checked and shown);
//   - a term won but not promoted yet when the pause is seen is given back
//     (unless it is the failover target): no fence, pre_promote or promote
//     starts after the pause was seen. A fence already under way is cut
//     short with the term's context, but what it did (an rpc demote that
//     reached the old leader) stands: the pause cannot undo it, and a
//     promotion after it would be exactly the automatic failover the
//     operator asked not to happen. A promote already running finishes,
//     and the node then leads as any leader does while paused;
//   - a term that ends because the lease or the session is lost still
//     demotes first: cut off from ZooKeeper, the node cannot know whether
//     the pause still holds, or whether a failover target is taking over,
//     so it must assume a successor may be elected;
//   - a graceful stop of the leader leaves its service as it is (no demote,
//     the breadcrumb stays): the daemon can be restarted without touching
//     the service, and whoever leads next must fence it;
//   - a daemon that starts while paused does not run its startup demote
//     (it runs as soon as the pause is lifted, before the node joins the
//     election), unless a demote request or a failover request naming this
//     node needs it; until the first report of the pause watch it waits at
//     most Config.PauseWait, then demotes as it always did (unable to tell,
//     it takes the safe side); it never campaigns before that first report;
//   - follow hooks do not start (a restarted leader's service must not be
//     repointed); what is due runs after the resume;
//   - demote requests (an operator's, a failover target's rpc fence) and
//     cedes work as always.
//
// The failover cooldown (Config.FailoverCooldown): for that long after an
// automatic promotion (any takeover but that of the target of an
// operator's failover request), the leader keeps its term although its
// health fails; a lost lease or session still ends it.

// defaultPauseWait bounds the startup demote's wait for the first report
// of the pause watch.
const defaultPauseWait = 10 * time.Second

// causePaused keeps a standby out of the election while the cluster is
// paused; it never ends a promoted term.
var causePaused = &endCause{"paused"}

// pauseState is the loop's view of maintenance mode and of the cooldown.
type pauseState struct {
	known     bool           // the watch reported at least once (or there is none)
	cur       *cluster.Pause // nil: not paused
	waitUntil time.Time      // the startup demote waits for known until then
	waited    bool           // it gave up waiting (logged once)
	skipped   bool           // the startup demote was skipped (logged once)

	target      string    // key of a standing failover request naming this node
	targetUntil time.Time // when it stops standing (our monotonic clock)

	cooldownUntil time.Time // the leader keeps its term while unhealthy until then
	holding       bool      // an unhealthy leader is kept now (logged and counted once)
}

// pauseSeen is the pause as the watch reports it (nil: not paused).
type pauseSeen struct{ p *cluster.Pause }

func (pauseSeen) event() {}

// watchPause feeds the pause watch's reports to the loop until ctx ends.
func (c *Controller) watchPause(ctx context.Context) {
	for ctx.Err() == nil {
		err := c.rec.WatchPause(ctx, func(p *cluster.Pause) { c.send(pauseSeen{p: p}) })
		if ctx.Err() == nil {
			c.log.Debug("pause watch ended; watching again", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

// paused reports whether the cluster is paused (as last reported).
func (c *Controller) paused() bool { return c.l.pause.cur != nil }

func (c *Controller) onPauseSeen(p *cluster.Pause) {
	ps := &c.l.pause
	was := ps.cur
	ps.known, ps.cur = true, p
	switch {
	case p != nil && was == nil:
		c.log.Warn("cluster PAUSED: no automatic promotion, demotion or fencing until resumed (failover --to and demote requests still work)",
			"by", p.By, "reason", p.Reason, "at", p.At)
	case p == nil && was != nil:
		c.log.Info("cluster resumed: automatic failover is back", "paused_by", was.By)
	}
}

// noteFailoverTarget tracks whether a standing operator's failover request
// (failover --to; Reason empty) names this node: its target campaigns
// while paused, and its promotion starts no cooldown. A handover a node
// asked for (Reason set) is automatic: it counts as neither.
func (c *Controller) noteFailoverTarget(r *cluster.FailoverRequest) {
	ps := &c.l.pause
	if r == nil || r.To != c.cfg.NodeID || r.Done || r.Reason != "" {
		ps.target, ps.targetUntil = "", time.Time{}
		return
	}
	if key := r.Key(); key != ps.target {
		now := time.Now()
		ps.target, ps.targetUntil = key, now.Add(r.StandFor(now))
	}
}

// failoverTarget reports whether this node is the target of a standing
// manual failover request.
func (c *Controller) failoverTarget(now time.Time) bool {
	ps := &c.l.pause
	return ps.target != "" && now.Before(ps.targetUntil)
}

// pausedOut reports whether the pause keeps this node out of the election
// now: paused, not the failover target, and not holding a promoted term
// (or one whose promote already started).
func (c *Controller) pausedOut(now time.Time) bool {
	if !c.paused() || c.failoverTarget(now) {
		return false
	}
	tm := c.l.term
	return tm == nil || (tm.phase != phPromoting && tm.phase != phLeader)
}

// keepsUnhealthy reports whether the leader keeps its term although its
// health fails: while paused, or within its failover cooldown.
func (c *Controller) keepsUnhealthy(now time.Time) bool {
	tm := c.l.term
	if tm == nil {
		return false
	}
	switch {
	case c.paused():
		return tm.phase == phPromoting || tm.phase == phLeader
	case now.Before(c.l.pause.cooldownUntil):
		return tm.phase == phLeader
	}
	return false
}

// trackHold logs (and for the cooldown counts) each hold of an unhealthy
// leader once, when it begins.
func (c *Controller) trackHold(now time.Time) {
	ps := &c.l.pause
	hold := c.l.health != healthcheck.Healthy && c.keepsUnhealthy(now)
	if !hold {
		if ps.holding && c.l.term != nil && c.l.health != healthcheck.Healthy {
			c.log.Warn("the unhealthy leader is no longer held (cooldown over or cluster resumed): stepping down", "epoch", c.l.term.epoch)
		}
		ps.holding = false
		return
	}
	if ps.holding {
		return
	}
	ps.holding = true
	if c.paused() {
		c.log.Warn("leader unhealthy while the cluster is paused: keeping leadership", "epoch", c.l.term.epoch, "health", c.l.health.String())
		return
	}
	c.log.Warn("leader unhealthy within its failover cooldown: keeping leadership until the cooldown ends",
		"epoch", c.l.term.epoch, "health", c.l.health.String(), "cooldown_until", ps.cooldownUntil)
	c.metrics.CooldownHold()
}

// startupDemoteAllowed reports whether the startup demote may run now:
// not while paused (the service is left as it is), unless a demote request
// or a failover request naming this node needs it. Until the pause watch
// reported, it waits at most until pause.waitUntil.
func (c *Controller) startupDemoteAllowed(now time.Time) bool {
	ps := &c.l.pause
	switch {
	case c.waitersNeedHook(), c.failoverTarget(now):
		return true
	case !ps.known:
		if now.Before(ps.waitUntil) {
			return false
		}
		if !ps.waited {
			ps.waited = true
			c.log.Warn("the pause record could not be read in time; running the startup demote (the safe side); not joining the election until it is read",
				"waited", c.cfg.PauseWait.String())
		}
		return true
	case c.paused():
		if !ps.skipped {
			ps.skipped = true
			c.log.Warn("cluster paused: startup demote deferred until resume (the service is left as it is; this node stays out of the election)")
		}
		return false
	}
	return true
}

// stopsWhilePaused reports whether a leader's term ending with reason
// leaves the service as it is: a graceful stop while paused.
func (c *Controller) stopsWhilePaused(reason string) bool {
	return reason == causeShutdown.label && c.paused()
}

// keepsWhilePaused reports whether this node leads (or promotes) while
// the cluster is paused: a priority set to 0 by a reload does not end its
// term then (no automatic demotion while paused, and nobody else may take
// over); it hands over once the cluster is resumed.
func (c *Controller) keepsWhilePaused() bool {
	tm := c.l.term
	return c.paused() && tm != nil && (tm.phase == phPromoting || tm.phase == phLeader)
}

// promoted starts the failover cooldown after an automatic promotion. A
// term that answers an operator's request (tm.request, read in the term)
// is not automatic even when this node's failover watch has not reported
// the request yet: the two watches are not ordered.
func (c *Controller) promoted(tm *term, now time.Time) {
	ps := &c.l.pause
	ps.cooldownUntil, ps.holding = time.Time{}, false
	operators := tm.request != nil && tm.request.Reason == ""
	if c.cfg.FailoverCooldown <= 0 || c.failoverTarget(now) || operators {
		return
	}
	ps.cooldownUntil = now.Add(c.cfg.FailoverCooldown)
	c.log.Info("failover cooldown: an unhealthy health check does not end this leadership until it is over", "epoch", tm.epoch, "until", ps.cooldownUntil)
}

// cooldownShown is the end of the leader's cooldown for status (zero:
// none now).
func (c *Controller) cooldownShown(now time.Time) time.Time {
	ps := &c.l.pause
	if c.l.state != StateLeader || !now.Before(ps.cooldownUntil) {
		return time.Time{}
	}
	return ps.cooldownUntil
}

// considerPause adds the pause's and the cooldown's deadlines to the
// loop's timer.
func (c *Controller) considerPause(consider func(time.Time)) {
	ps := &c.l.pause
	if !ps.known {
		consider(ps.waitUntil)
	}
	consider(ps.targetUntil)
	consider(ps.cooldownUntil)
}
