package election

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// awaitDeadline is the wait of the candidate next in line with
// Config.TakeOverAtDeadline: it watches pred, the lowest znode, and times
// each version of it it reads on the monotonic clock. When one version
// stood for the deadline_ms its data carries, the owner's own deadline has
// passed (it demoted by its lease, or was dead), and awaitDeadline ends
// that term with a delete of pred at exactly that version, which
// ZooKeeper refuses if a heartbeat moved it since (docs/safety.md, "Taking
// over at the leader's own deadline"). It returns nil when the caller
// should list the candidates again (pred is gone, or the watch was lost),
// or why the wait is over. w is the wait's warmer, run as waitTurn runs it.
func (e *Elector) awaitDeadline(ctx context.Context, r *run, w *warmer, pred string) error {
	var (
		have   bool  // a version is being timed:
		seen   int32 // this one,
		seenAt time.Time
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
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
		var due <-chan time.Time
		// Only a heartbeat publishes a deadline; -1 (a version wrapped
		// round) would make the delete unconditional.
		if c.DeadlineMS > 0 && seen != -1 {
			timer.Reset(time.Until(seenAt.Add(time.Duration(c.DeadlineMS) * time.Millisecond)))
			due = timer.C
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
			case <-due:
				timer.Stop()
				stood := time.Since(seenAt)
				err := r.sess.Delete(ctx, pred, seen)
				switch {
				case err == nil:
					e.log.Info("ended the old leader's term at its own deadline: its heartbeat stood still past it",
						"leader_node", pred, "version", seen, "stood_seconds", stood.Seconds(), "deadline_ms", c.DeadlineMS)
					r.woke = time.Now()
					return nil
				case errors.Is(err, zk.ErrNoNode):
					return nil
				case errors.Is(err, zk.ErrBadVersion):
					e.log.Info("the old leader's heartbeat moved before its term could be ended; waiting again", "leader_node", pred)
				default:
					e.log.Warn("ending the old leader's term at its deadline failed; waiting again", "leader_node", pred, "err", err)
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
