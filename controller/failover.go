package controller

import (
	"context"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// Manual failover requests: every node but the target stands aside until
// the target is promoted (the target marks the request done, or the
// requester deletes it) or the request's timeout ran out; a leader that is
// not the target hands over gracefully (demote, delete the breadcrumb).
//
// How long a node that first sees a request (after a restart, say) may
// stand aside: the request carries no age this node could trust (its
// deadline is another host's wall clock, and a znode's ctime is the
// ZooKeeper leader's), so the bound comes from the request's lifetime
// instead. The CLI writes it as an ephemeral znode of its own session and
// deletes it when it stops waiting (its timeout, success, SIGINT/SIGTERM);
// if it dies, ZooKeeper deletes it one session timeout later. The deletion
// ends every stand-aside for it at once. So nobody stands aside longer than
// the requester's remaining wait plus a session timeout, however late it
// saw the request. A persistent request (written by an earlier CLI, or by
// hand) has no such owner: the first node whose own timer for it runs out
// deletes it, which ends the others' stand-aside too.

// watchFailover feeds the failover request to the loop until ctx ends.
func (c *Controller) watchFailover(ctx context.Context) {
	for ctx.Err() == nil {
		err := c.rec.WatchFailover(ctx, func(r *cluster.FailoverRequest) { c.send(failoverSeen{req: r}) })
		if ctx.Err() == nil {
			c.log.Debug("failover watch ended; watching again", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

// onFailoverSeen acts on the request as the watch (or a term's first read)
// saw it.
func (c *Controller) onFailoverSeen(r *cluster.FailoverRequest) {
	l := &c.l
	c.noteFailoverTarget(r)
	c.noteRequest(r)
	if r == nil {
		c.endStandAside("", "the failover request was withdrawn")
		c.warm(false)
		return
	}
	if r.To == "" {
		return
	}
	switch key := r.Key(); {
	case r.Done:
		if r.To == c.cfg.NodeID && key != l.seenFailover {
			// This node won the election and met the request before
			// its watch brought it: say so once, as onFailoverRequest
			// would have.
			l.seenFailover = key
			c.logRequestToUs(r)
		}
		c.endStandAside(key, "the failover target was promoted")
		c.warm(false)
	case key != l.seenFailover:
		l.seenFailover = key
		c.onFailoverRequest(key, *r)
	}
}

// onFailoverRequest stands aside for a request to another node; a request
// to this node ends any stand-aside. Either way the request is deleted
// when its timeout (measured here) is over and it is not done, so that one
// whose requester died does not hold nodes that restart later.
func (c *Controller) onFailoverRequest(key string, r cluster.FailoverRequest) {
	l := &c.l
	now := time.Now()
	d := r.StandFor(now)
	if d <= 0 {
		return
	}
	l.expiry, l.expiryAt = &r, now.Add(d)
	if r.To == c.cfg.NodeID && c.priority == 0 {
		// The CLI refuses this (it reads our member record); a request
		// that names us anyway (an older CLI, a race with a config
		// change) cannot be met, and the others stand aside for it: we
		// delete it at once, so they join the election again.
		c.log.Warn("manual failover to this node refused: node.priority is 0, it never leads; deleting the request", "by", r.By)
		c.expireFailover(r)
		return
	}
	if r.To == c.cfg.NodeID {
		// A newer request may name us while we still stand aside for an
		// earlier one to another node (failover --to b, then --to us):
		// the earlier one is over, and we are the candidate now.
		c.logRequestToUs(&r)
		c.endStandAside("", "a newer failover request names this node")
		if now.Before(l.cededUntil) {
			// The operator named this node: a hold-off (after a fence, a
			// cede or a failed takeover) would otherwise keep it out while
			// every other node stands aside for the request, and nobody
			// would lead until it ran out. What makes a node unfit to lead
			// (health, a stuck hook, a refused join) still holds.
			c.log.Info("manual failover to this node ends its hold-off early", "remaining", l.cededUntil.Sub(now).Round(time.Millisecond).String())
			l.cededUntil = time.Time{}
		}
		c.warm(true)
		return
	}
	if r.Reason != "" && c.paused() && l.term != nil {
		// A node's own handover (a preemption whose report crossed the
		// pause) is automatic: while paused the leader keeps its term.
		c.log.Warn("cluster paused: not handing over for another node's request (only an operator's failover --to moves a paused leader)",
			"to", r.To, "by", r.By, "reason", r.Reason)
		return
	}
	if r.Reason != "" {
		// A node's own request: a leader (or a node that won the
		// election) hands over to a node it prefers.
		c.log.Info("handover to a preferred node requested: standing aside", "to", r.To, "by", r.By, "reason", r.Reason, "for", d.Round(time.Millisecond).String())
	} else {
		c.log.Info("manual failover requested by an operator: standing aside", "to", r.To, "by", r.By, "for", d.Round(time.Millisecond).String())
	}
	l.standAside = standAside{key: key, until: now.Add(d)} // monotonic: no other host's clock involved
	c.endCandidacy(causeFailover)
}

// endStandAside ends the stand-aside for request key ("": any) before its
// time; cedes of other origins (operator, holdoff, backoff) still hold:
// they are kept apart in the loop's state.
func (c *Controller) endStandAside(key, why string) {
	l := &c.l
	if l.standAside.key == "" || (key != "" && key != l.standAside.key) || !time.Now().Before(l.standAside.until) {
		return
	}
	l.standAside = standAside{}
	c.log.Info("manual failover over: joining the election again", "why", why)
}

// expireFailover deletes the request r if it is still there and not done.
func (c *Controller) expireFailover(r cluster.FailoverRequest) {
	bg := c.l.bg
	go func() {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		if err := c.rec.ExpireFailover(ctx, r.Key()); err != nil {
			c.log.Debug("expired failover request not deleted", "err", err)
			return
		}
		c.log.Warn("manual failover request timed out without the target being promoted; deleted it if still there", "to", r.To)
	}()
}

// warm tells an elector that can keep its lease chain warm while waiting
// whether this node is a failover target.
func (c *Controller) warm(on bool) {
	if w, ok := c.el.(Warmer); ok {
		w.Warm(on)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (c *Controller) logRequestToUs(r *cluster.FailoverRequest) {
	if r.Reason != "" {
		c.log.Info("handover to this node requested: the leader prefers it", "by", r.By, "reason", r.Reason, "done", r.Done)
	} else {
		c.log.Info("manual failover to this node requested by an operator", "by", r.By, "done", r.Done)
	}
}
