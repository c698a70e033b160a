package controller

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/zk"
)

// watchFailover acts on manual failover requests: every node but the target
// stands aside until the target is promoted (the target marks the request
// done, or the requester deletes it) or the request's timeout ran out; a
// leader that is not the target hands over gracefully (demote, delete the
// breadcrumb).
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
func (c *Controller) watchFailover(ctx context.Context) {
	path := c.layout().Failover()
	seen := ""
	// A request not done by its timeout (measured here) is deleted, so that
	// one whose requester died does not hold nodes that restart later.
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	var expiring *cluster.FailoverRequest
	for ctx.Err() == nil {
		sess, err := c.client.Session(ctx)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		data, _, ch, err := sess.GetW(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = sess.ExistsW(ctx, path)
			if err == nil && ok {
				continue
			}
			if err == nil {
				c.endStandAside("", "the failover request was withdrawn")
			}
		}
		if err != nil {
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		var req cluster.FailoverRequest
		if data != nil && json.Unmarshal(data, &req) == nil && req.To != "" {
			switch key := req.Key(); {
			case req.Done:
				c.endStandAside(key, "the failover target was promoted")
			case key != seen:
				seen = key
				if d := c.onFailoverRequest(key, req); d > 0 {
					expiring = &req
					expiry.Reset(d)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-ch:
		case <-sess.Done():
		case <-expiry.C:
			c.deleteExpiredRequest(ctx, sess, path, *expiring)
		}
	}
}

// deleteExpiredRequest deletes the failover request r if it is still there
// and not done.
func (c *Controller) deleteExpiredRequest(ctx context.Context, sess *zk.Session, path string, r cluster.FailoverRequest) {
	data, st, err := sess.Get(ctx, path)
	if err != nil {
		return
	}
	var now cluster.FailoverRequest
	if json.Unmarshal(data, &now) != nil || now.Key() != r.Key() || now.Done {
		return
	}
	if err := sess.Delete(ctx, path, st.Version); err == nil {
		c.log.Warn("manual failover request timed out without the target being promoted; deleted it", "to", r.To)
	}
}

// onFailoverRequest stands aside for a request to another node. It returns
// how long the request stands (<= 0: over already).
func (c *Controller) onFailoverRequest(key string, req cluster.FailoverRequest) time.Duration {
	d := req.StandFor(time.Now())
	if d <= 0 {
		return d
	}
	if req.To == c.cfg.NodeID {
		// A newer request may name us while we still stand aside for an
		// earlier one to another node (failover --to b, then --to us):
		// the earlier one is over, and we are the candidate now.
		c.log.Info("manual failover requested to this node")
		c.endStandAside("", "a newer failover request names this node")
		return d
	}
	c.log.Info("manual failover requested: standing aside", "to", req.To, "for", d.Round(time.Millisecond).String())
	c.cedeMu.Lock()
	defer c.cedeMu.Unlock()
	c.mu.Lock()
	c.endReason = reasonFailover
	c.standAsideKey = key
	c.standAsideUntil = time.Now().Add(d) // monotonic: no other host's clock involved
	c.mu.Unlock()
	c.el.Cede(d)
	c.poke(c.wake) // Run re-arms its end-of-cede timer
	c.setStateIfIdle()
	return d
}

// testHookEndStandAside, when set (tests only), runs in endStandAside
// between reading the other cedes' deadline and shortening the elector's.
var testHookEndStandAside func()

// endStandAside ends the stand-aside for request key ("": any) before its
// time; cedes of other origins (operator, holdoff, backoff) still hold. It
// holds cedeMu from reading their deadline to shortening the elector's
// cede to it: a cede made in between (a demote request's holdoff) would
// otherwise be cut short.
func (c *Controller) endStandAside(key, why string) {
	c.cedeMu.Lock()
	defer c.cedeMu.Unlock()
	c.mu.Lock()
	if c.standAsideKey == "" || (key != "" && key != c.standAsideKey) || !time.Now().Before(c.standAsideUntil) {
		c.mu.Unlock()
		return
	}
	c.standAsideKey, c.standAsideUntil = "", time.Time{}
	until := c.cededUntil
	c.mu.Unlock()
	c.log.Info("manual failover over: joining the election again", "why", why)
	if testHookEndStandAside != nil {
		testHookEndStandAside()
	}
	c.el.EndCede(until)
	c.poke(c.wake)
}

// completeFailover marks a pending failover request to this node done once
// we are promoted, so the other nodes stop standing aside (they are the
// candidates if we die now). Bounded and best effort: the requester deletes
// the request when it sees us lead, and the request times out anyway.
func (c *Controller) completeFailover(lctx context.Context, l election.Leadership) {
	ctx, cancel := context.WithTimeout(lctx, 2*time.Second)
	defer cancel()
	path := c.layout().Failover()
	data, st, err := l.Session.Get(ctx, path)
	if err != nil {
		return
	}
	var req cluster.FailoverRequest
	if json.Unmarshal(data, &req) != nil || req.To != c.cfg.NodeID || req.Done {
		return
	}
	req.Done, req.Epoch = true, l.Epoch
	b, _ := json.Marshal(req)
	if _, err := l.Session.Set(ctx, path, b, st.Version); err != nil {
		c.log.Warn("could not mark the failover request done; the others rejoin when it is deleted or times out", "err", err)
		return
	}
	c.log.Info("failover request to this node marked done", "epoch", l.Epoch)
}
