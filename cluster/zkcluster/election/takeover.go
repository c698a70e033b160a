package election

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// beats reports whether every renewal is a heartbeat (Config.TakeOverAtDeadline
// or Config.FenceFirst).
func (e *Elector) beats() bool { return e.cfg.TakeOverAtDeadline || e.cfg.FenceFirst.On() }

// awaitDeadline is the wait of the candidate next in line when renewals
// are heartbeats (Elector.beats): it watches pred, the lowest znode, and
// times each version of it it reads on the monotonic clock.
//
// With Config.TakeOverAtDeadline, when one version stood for the
// deadline_ms its data carries, the owner's own deadline has passed (it
// demoted by its lease, or was dead), and awaitDeadline ends that term
// with a delete of pred at exactly that version, which ZooKeeper refuses
// if a heartbeat moved it since (docs/safety.md, "Taking over at the
// leader's own deadline").
//
// With Config.FenceFirst, when one version stood for the renew interval
// the owner publishes (renew_ms) plus SuspectAfter, it asks ProveOut to
// fence the owner (again every retryProveOut while that version stands);
// when that proved the owner out, it deletes pred at that version at once
// (docs/safety.md, "Fencing first, then taking over").
//
// Only a znode whose data carries a heartbeat (deadline_ms) is ever
// deleted. It returns nil when the caller should list the candidates
// again (pred is gone, or the watch was lost), or why the wait is over. w
// is the wait's warmer, run as waitTurn runs it.
func (e *Elector) awaitDeadline(ctx context.Context, r *run, w *warmer, pred string) error {
	var (
		have   bool  // a version is being timed:
		seen   int32 // this one,
		seenAt time.Time
	)
	deadline := time.NewTimer(time.Hour)
	deadline.Stop()
	defer deadline.Stop()
	suspect := time.NewTimer(time.Hour)
	suspect.Stop()
	defer suspect.Stop()
	for {
		data, st, ch, err := r.sess.GetW(ctx, pred)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		if f := e.cfg.testHooks.staleView; f != nil && have && f() {
			st.Version = seen // a view that does not move (a lagging server)
		}
		if !have || st.Version != seen {
			have, seen, seenAt = true, st.Version, time.Now()
		}
		var c candidate
		_ = json.Unmarshal(data, &c)
		// Only a heartbeat publishes a deadline; -1 (a version wrapped
		// round) would make the delete unconditional.
		beat := c.DeadlineMS > 0 && seen != -1
		var due, suspected <-chan time.Time
		if beat && e.cfg.TakeOverAtDeadline {
			deadline.Reset(time.Until(seenAt.Add(time.Duration(c.DeadlineMS) * time.Millisecond)))
			due = deadline.C
		}
		if beat && c.RenewMS > 0 && e.cfg.FenceFirst.On() {
			overdue := time.Duration(c.RenewMS)*time.Millisecond + e.cfg.FenceFirst.SuspectAfter
			suspect.Reset(time.Until(seenAt.Add(overdue)))
			suspected = suspect.C
		}
	wait:
		for {
			warm, warmChanged := e.warmState()
			w.run(warm || e.cfg.WarmStandby)
			select {
			case ev := <-ch:
				if ev.Type == zk.EventNodeDataChanged {
					break wait // a heartbeat: read the new version
				}
				r.woke = time.Now()
				return nil // deleted, or not watching any more: look again
			case <-suspected:
				b := cluster.Beat{NodeID: c.NodeID, Version: int64(seen),
					Entry: cluster.Entry{Key: pred, Owner: st.EphemeralOwner, Created: st.Czxid}}
				stood := time.Since(seenAt)
				if err := e.cfg.FenceFirst.ProveOut(ctx, cluster.Suspect{Beat: b, Stood: stood}); err != nil {
					e.log.Info("suspected the old leader but did not prove it out; asking again while its heartbeat stands",
						"leader_node", pred, "version", seen, "err", err)
					suspect.Reset(retryProveOut(e.cfg.FenceFirst))
					continue
				}
				removed, done, err := e.endTerm(ctx, r, pred, seen, "ended the old leader's term after fencing it: its heartbeat stood still",
					"leader_node", pred, "version", seen, "stood_seconds", stood.Seconds())
				if f := e.cfg.FenceFirst.Ended; removed && f != nil {
					f(b)
				}
				if done || err != nil {
					return err
				}
				have = false
				break wait
			case <-due:
				deadline.Stop()
				stood := time.Since(seenAt)
				if _, done, err := e.endTerm(ctx, r, pred, seen, "ended the old leader's term at its own deadline: its heartbeat stood still past it",
					"leader_node", pred, "version", seen, "stood_seconds", stood.Seconds(), "deadline_ms", c.DeadlineMS); done || err != nil {
					return err
				}
				have = false // time the version read next from now on, whatever it is
				break wait
			case <-warmChanged:
			case <-w.lost: // our znode is gone: look again
				w.stop()
				return nil
			case <-r.sess.Done():
				return r.sess.Err()
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// retryProveOut is how long after a refused ProveOut the candidate asks
// again while the same heartbeat stands: a leader that answered its probe
// may lose the coordination service a moment later, and a fence may fail
// once. Each ask is bounded by the fence's own timeouts.
func retryProveOut(f cluster.FenceFirst) time.Duration {
	return max(f.SuspectAfter, 500*time.Millisecond)
}

// endTerm deletes pred at version seen, logging msg and args when it did.
// removed: this delete ended the term; done: look at the candidates again
// (deleted, or gone already); neither with a nil error: the delete was
// refused, time the version read next.
func (e *Elector) endTerm(ctx context.Context, r *run, pred string, seen int32, msg string, args ...any) (removed, done bool, err error) {
	err = r.sess.Delete(ctx, pred, seen)
	switch {
	case err == nil:
		e.log.Info(msg, args...)
		r.woke = time.Now()
		return true, true, nil
	case errors.Is(err, zk.ErrNoNode):
		return false, true, nil
	case errors.Is(err, zk.ErrBadVersion):
		e.log.Info("the old leader's heartbeat moved before its term could be ended; waiting again", "leader_node", pred)
	case ctx.Err() != nil:
		return false, false, ctx.Err()
	default:
		e.log.Warn("ending the old leader's term failed; waiting again", "leader_node", pred, "err", err)
	}
	return false, false, nil
}
