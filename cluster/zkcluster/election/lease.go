package election

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// Anchor returns the send time of the newest answered write Z for which
// acks hold a credit chain: a write X over the same connection sent at least
// gap after Z's answer, and a write Y over it sent after X's answer (see
// "What is guaranteed"). It is the zero time when there is none. The acks
// need not be evenly spaced: a renewal answered late counts only from its
// own send time, and only once later writes complete a chain behind it.
func Anchor(acks []zk.Ack, gap time.Duration) time.Time {
	lastSent := map[uint64]time.Time{} // per connection: newest send (a Y)
	for _, a := range acks {
		if a.Sent.After(lastSent[a.Conn]) {
			lastSent[a.Conn] = a.Sent
		}
	}
	var anchor time.Time
	for _, x := range acks {
		if y, ok := lastSent[x.Conn]; !ok || y.Before(x.Answered) {
			continue // no Y after X's answer
		}
		for _, z := range acks {
			if z.Conn == x.Conn && !x.Sent.Before(z.Answered.Add(gap)) && z.Sent.After(anchor) {
				anchor = z.Sent
			}
		}
	}
	return anchor
}

// renewNow reports whether a write sent now would move the anchor (it would
// be the Y of a chain whose Z is newer than the anchor); otherwise the next
// renewal (an X) waits a renew interval after the newest answer.
func renewNow(acks []zk.Ack, gap time.Duration, now time.Time) bool {
	if len(acks) == 0 {
		return true
	}
	newest := acks[len(acks)-1]
	probe := append(append([]zk.Ack(nil), acks...), zk.Ack{Sent: now, Answered: now, Conn: newest.Conn})
	return Anchor(probe, gap).After(Anchor(acks, gap))
}

// anchorFn returns the anchor of the writes acks returns, never moving
// back: a chain seen once stays a fact even after its writes left the ring.
func anchorFn(acks func() []zk.Ack, gap time.Duration) func() time.Time {
	var mu sync.Mutex
	var cur time.Time
	return func() time.Time {
		a := Anchor(acks(), gap)
		mu.Lock()
		defer mu.Unlock()
		if a.After(cur) {
			cur = a
		}
		return cur
	}
}

// warmer runs a waiting candidate's renewals while they are wanted: the
// renew loop a leader runs, writing a version check of path (our queue
// znode, or in unfair mode the election directory) without the read
// after it. Each answer goes into the session's Acks, from which lead
// takes the anchor when this candidate wins.
type warmer struct {
	e *Elector
	// r is a copy of the wait's run, with path as its node: lead sets
	// the run's timing anew when we win, while a renewal of the loop may
	// still be in flight.
	r run

	cancel context.CancelFunc // of the running loop, nil when none runs
	// lost is closed when the running loop found path gone (and ended);
	// nil when no loop runs. The waiter then calls stop and looks again.
	lost chan struct{}
	// done is closed when the newest loop ended, a renewal it had in
	// flight answered (nil: no loop ran).
	done chan struct{}
}

func (e *Elector) newWarmer(r *run, path string) *warmer {
	w := &warmer{e: e, r: *r}
	w.r.node = path
	return w
}

// run starts (on) or stops the loop; it does nothing when it already
// runs, or already stands, as asked.
func (w *warmer) run(on bool) {
	if on == (w.cancel != nil) {
		return
	}
	if !on {
		w.stop()
		return
	}
	var ctx context.Context
	ctx, w.cancel = context.WithCancel(context.Background())
	lost := make(chan struct{})
	w.lost = lost
	w.e.log.Debug("keeping a credit chain while waiting", "node", w.r.node)
	done := make(chan struct{})
	w.done = done
	// renewLoop reports at most once, and returns right after.
	go func() {
		defer close(done)
		w.e.renewLoop(ctx, &w.r, false, nil, func(error) { close(lost) })
	}()
}

// stop ends the loop without waiting for a renewal in flight: that one
// runs to its answer, which goes into the session's Acks. It returns a
// channel closed once the loop is over (nil: no loop ran), which a win
// waits for before it judges the chain (see ready).
func (w *warmer) stop() <-chan struct{} {
	if w.cancel != nil {
		w.cancel()
		w.cancel, w.lost = nil, nil
	}
	return w.done
}

// acks returns the session's acks the lease may run from: all of them, or
// with Config.TakeOverAtDeadline only the heartbeats sent since r.beatsFrom
// (docs/safety.md, "Taking over at the leader's own deadline", step 2).
func (e *Elector) acks(r *run) []zk.Ack {
	all := r.sess.Acks()
	if !e.beats() {
		return all
	}
	beats := all[:0]
	for _, a := range all {
		if a.Beat && !a.Sent.Before(r.beatsFrom) {
			beats = append(beats, a)
		}
	}
	return beats
}

// renewal is the write that renews a lease on node: a version check, or
// with Config.TakeOverAtDeadline a heartbeat, a rewrite of node's data
// carrying the deadline of tm (and leading, for a leader's heartbeat),
// sent with a zk.Beat context (the returned ctx).
func (e *Elector) renewal(ctx context.Context, node string, tm lease.Timing, leading bool) (context.Context, zk.Op) {
	if !e.beats() {
		return ctx, zk.CheckOp{Path: node, Version: -1}
	}
	return zk.Beat(ctx), zk.SetOp{Path: node, Data: e.beatData(tm, leading), Version: -1}
}

// deadlineMS is what a heartbeat publishes for tm: lease + demote budget
// + margin, in milliseconds rounded up.
func deadlineMS(tm lease.Timing) int64 {
	d := tm.Lease + tm.Budget + tm.Margin
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// beatData is our znode's data as a heartbeat writes it.
func (e *Elector) beatData(tm lease.Timing, leading bool) []byte {
	c := candidate{NodeID: e.cfg.NodeID, GUID: e.guid, DeadlineMS: deadlineMS(tm), Leading: leading}
	if e.cfg.FenceFirst.On() {
		c.RenewMS = int64((tm.Renew + time.Millisecond - 1) / time.Millisecond)
	}
	b, _ := json.Marshal(c)
	return b
}

// confirm renews the lease: a multi holding one version check of our znode
// is a write that changes nothing, so the ZooKeeper leader answers it only
// after a quorum acknowledged it (a follower cut off from its leader, or a
// leader cut off from its quorum, cannot), and an answer goes into
// sess.Acks, the material of the credit chain. It also fails when the znode is gone.
// The Exists after it (read-your-writes: as fresh as the write) checks that
// the znode is still ours.
// With Config.TakeOverAtDeadline it is a heartbeat instead (renewal).
func (e *Elector) confirm(ctx context.Context, r *run) (bool, error) {
	ctx, op := e.renewal(ctx, r.node, r.tm, true)
	return renewWith(ctx, r.sess, r.node, op)
}

// announce is confirm with a write of our znode's data (the same, less the
// join nonce, which matters only before a win) in place of the version
// check: one write as well, so a renewal like any other, which also fires
// the exists watch of the candidate behind us.
func (e *Elector) announce(ctx context.Context, sess *zk.Session, node string) (bool, error) {
	return renewWith(ctx, sess, node, zk.SetOp{Path: node, Data: e.data(""), Version: -1})
}

// renewWith sends op (one write naming node) as a renewal, then checks
// with a read as fresh as the write that node is still ours; false when
// it is gone.
func renewWith(ctx context.Context, sess *zk.Session, node string, op zk.Op) (bool, error) {
	err := sess.Multi(ctx, op)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ok, st, err := sess.Exists(ctx, node)
	if err != nil {
		return false, err
	}
	return ok && st.EphemeralOwner == sess.ID(), nil
}

// touch is a waiting candidate's renewal: the write of confirm (a version
// check of r.node, or a heartbeat) without the read after it.
func (e *Elector) touch(ctx context.Context, r *run) (bool, error) {
	ctx, op := e.renewal(ctx, r.node, r.tm, false)
	err := r.sess.Multi(ctx, op)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	return err == nil, err
}

// renewLoop renews the lease until ctx ends: each renewal is a write
// (confirm); a pair (X, then Y at once) every renew interval keeps the
// anchor within two intervals of now. After a reconnect (full) it renews at
// once and, in fair mode, checks that we are still first. A waiting
// candidate (leader false) runs it too, writing without the read after it;
// it reports a renewal that found r.node gone.
//
// In fair mode with Config.WarmStandby a leader's first renewal rewrites
// its znode's data instead of checking its version (announce): the only
// candidate watching our znode is the one behind us, which moved up to next
// in line when we won without anything telling it, and must start its chain.
func (e *Elector) renewLoop(ctx context.Context, r *run, leader bool, full <-chan struct{}, report func(error)) {
	check := false
	// A heartbeat rewrites the data anyway.
	announcing := leader && e.cfg.Mode == Fair && e.cfg.WarmStandby && !e.beats()
	next := time.Now()
	if acks := e.acks(r); len(acks) > 0 {
		next = acks[len(acks)-1].Answered.Add(r.tm.Renew)
	}
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-full:
			check = true
		case <-t.C:
		}
		if ctx.Err() != nil {
			return // stopped while a renewal was due: send none
		}
		if f := e.cfg.testHooks.skipRenewal; leader && f != nil && f() {
			t.Reset(r.tm.Renew)
			continue
		}
		// An answer to a request sent more than a lease ago cannot help
		// any more: give up on it so that the next renewal tries afresh.
		// A waiting candidate's renewal is not abandoned when its loop is
		// stopped (it won, say): its answer still goes into the session's
		// Acks, and may complete the chain the win takes its anchor from.
		parent := ctx
		if !leader {
			parent = context.WithoutCancel(ctx)
		}
		rctx, cancel := context.WithTimeout(parent, r.tm.Lease)
		var ok bool
		var err error
		switch {
		case announcing:
			ok, err = e.announce(rctx, r.sess, r.node)
		case leader:
			ok, err = e.confirm(rctx, r)
		default:
			ok, err = e.touch(rctx, r)
		}
		if err == nil && ok && check && e.cfg.Mode == Fair {
			var kids []string
			if kids, err = r.sess.Children(rctx, e.cfg.Dir); err == nil {
				order := sortCandidates(kids)
				ok = len(order) > 0 && e.cfg.Dir+"/"+order[0] == r.node
			}
		}
		cancel()
		if err == nil && !ok {
			report(ErrNodeDeleted)
			return
		}
		if err == nil {
			check, announcing = false, false
			if f := e.cfg.testHooks.renewed; leader && f != nil {
				f()
			}
		}
		next = time.Now().Add(r.tm.Renew)
		if acks := e.acks(r); err == nil && len(acks) > 0 {
			if now := time.Now(); renewNow(acks, r.gap, now) {
				next = now
			} else {
				next = acks[len(acks)-1].Answered.Add(r.tm.Renew)
			}
		}
		t.Reset(time.Until(next))
	}
}
