package controller

import (
	"context"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// The cluster's history (cluster.Layout.History) is written by each new
// leader once its promote hook succeeded: one entry per completed
// leadership change. It informs operators and decides nothing, so the
// append runs in the background, never on the takeover's path and never
// in the way of a hook; a failure costs the entry, never the leadership.

// History append pacing: a few attempts within the term, each bounded, so
// that a slow or unreachable coordination service costs a goroutine for
// a minute at most.
const (
	historyAttempts      = 4
	historyAttemptBudget = 5 * time.Second
	historyFirstRetry    = time.Second
)

// recordHistory appends tm's leadership change to the history in the
// background; at is when the promote hook succeeded. Called by the loop,
// which builds the entry from the term's state before handing it off.
func (c *Controller) recordHistory(tm *term, at time.Time) {
	e := c.historyEntry(tm, at)
	go c.appendHistory(tm.ctx, tm.t, e)
}

// historyEntry is the entry of tm, promoted at at. The old leader is the
// one the breadcrumb named (fenced before the promotion); with no
// breadcrumb it is left empty, for the append to take from the newest
// entry (cluster.AppendHistory), which then also turns a handoff with no
// known predecessor into a start.
func (c *Controller) historyEntry(tm *term, at time.Time) cluster.HistoryEntry {
	e := cluster.HistoryEntry{
		At: at.UTC(), NewLeader: c.cfg.NodeID, NewEpoch: tm.epoch, NewHost: c.cfg.Host,
		FenceMethod: cluster.FenceNone, DurationMS: at.Sub(tm.wonAt).Milliseconds(),
	}
	if p := tm.prev; p != nil && (p.NodeID != c.cfg.NodeID || p.Epoch != tm.epoch) {
		e.OldLeader, e.OldEpoch, e.OldHost = p.NodeID, p.Epoch, p.Host
		if tm.fenceMethod != "" {
			e.FenceMethod = tm.fenceMethod
		}
	}
	switch req := tm.request; {
	case req != nil && req.Reason != "" && (e.OldLeader == "" || e.OldLeader == req.By):
		// The old leader handed over (it asked, and left gracefully).
		e.Reason, e.RequestedBy = cluster.HistoryHandoverPreferred, req.By
	case req != nil && req.Reason != "":
		// Another node won after the old leader's term ended (a lost
		// lease, a crash, an unhealthy demote) and asked this one to take
		// over instead: it chose the successor, the change itself is a
		// failover of the leader the breadcrumb named.
		e.Reason = cluster.HistoryFailover
	case req != nil:
		e.Reason, e.RequestedBy = cluster.HistorySwitchover, req.By
	case e.OldLeader != "":
		e.Reason = cluster.HistoryFailover
	default:
		e.Reason = cluster.HistoryHandoff
	}
	return e
}

// appendHistory appends e through t, retrying a failure a few times while
// the term lasts (ctx is the term's context). A failure while the term
// stands is logged and counted; once the term is over the entry is given
// up quietly: the term's writes are refused by design, and the successor
// names this node as its old leader anyway (the breadcrumb, or the newest
// entry).
func (c *Controller) appendHistory(ctx context.Context, t cluster.Term, e cluster.HistoryEntry) {
	delay := historyFirstRetry
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, historyAttemptBudget)
		stored, err := t.AppendHistory(actx, e)
		cancel()
		if err == nil {
			// What the history now holds, not what was handed in: the
			// append fills in the old leader and the reason.
			c.log.Info("leadership change recorded in the history", stored.LogAttrs()...)
			return
		}
		if _, expired := t.Expiry(); ctx.Err() != nil || expired != nil {
			c.log.Info("history entry not recorded: the term ended", "epoch", e.NewEpoch, "err", err)
			return
		}
		c.metrics.HistoryAppendFailed()
		if attempt == historyAttempts {
			c.log.Error("history entry not recorded; giving up", "epoch", e.NewEpoch, "attempts", attempt, "err", err)
			return
		}
		c.log.Warn("history append failed; retrying", "epoch", e.NewEpoch, "attempt", attempt, "retry_in", delay.String(), "err", err)
		sleepCtx(ctx, delay)
		delay *= 2
	}
}
