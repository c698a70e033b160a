package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// Leadership is what a won election hands to OnElected.
type Leadership struct {
	Epoch   int64       // fencing token: czxid of the winning znode
	Path    string      // our election znode; breadcrumb writes check it exists
	Session *zk.Session // the session that owns Path
	NodeID  string
	// Mode is the recipe that won: in Unfair mode Path is the shared
	// "lock", which another session may hold under the same name once
	// ours is gone (see StillOwned).
	Mode Mode
	// Lease is how long this leadership trusts itself after its anchor
	// (see "What is guaranteed").
	Lease time.Duration
	// SessionTimeout is the session timeout ZooKeeper negotiated for Session
	// when the leadership began; a reconnect that negotiates one the lease
	// does not fit ends the leadership.
	SessionTimeout time.Duration
	// RenewInterval is how often the elector renews the lease.
	RenewInterval time.Duration
	// Grace is how long after the lease ended no successor can have been
	// elected yet: SessionTimeout - Lease - SessionTimeout/20, at least
	// Config.DemoteBudget (with Config.TakeOverAtDeadline at most
	// DemoteBudget + SessionTimeout/20: the successor's wait). What must happen after the lease ends (killing
	// a promote, the demote) must fit in it (controller.DemoteBudget); the
	// controller refuses to lead when it does not.
	Grace time.Duration
	// Timing is the whole arithmetic (tick assumed, tolerance).
	Timing lease.Timing

	deadline func() time.Time
	// deleted is set by Deleted: the term deleted Path itself.
	deleted *atomic.Bool
	// finishing is set by Finishing while the term's own write that
	// deletes Path is in flight (or done).
	finishing *atomic.Bool
}

// Finishing tells the elector that this leadership's own write is
// deleting Path (on) or failed to (off): a deletion of Path seen meanwhile
// ends the leadership as released (ErrReleased), not as deleted by
// someone else (ErrNodeDeleted).
func (l Leadership) Finishing(on bool) {
	if l.finishing != nil {
		l.finishing.Store(on)
	}
}

// Deleted tells the elector that this leadership's own write deleted Path
// (Term.Finish: one multi hands the breadcrumb over and deletes it). Leaving
// then sends nothing, where it would delete Path again (fair mode) or read
// the lock after a sync (unfair mode): requests that would reach the
// ensemble just as the successor reads, for nothing. Call it only once that
// write was answered as done.
func (l Leadership) Deleted() {
	if l.deleted != nil {
		l.deleted.Store(true)
	}
}

// Valid reports, without waiting for any goroutine, whether leadership can
// still be assumed: the session is alive and the lease has not run out. Call
// it right before acting (promote, write), because a paused process may wake
// with a context that is not cancelled yet.
func (l Leadership) Valid() error {
	select {
	case <-l.Session.Done():
		return ErrSessionExpired
	default:
	}
	if l.deadline != nil && !time.Now().Before(l.deadline()) {
		return ErrLeaseExpired
	}
	return nil
}

// LeaseRemaining is how long the lease still runs (<= 0: expired).
func (l Leadership) LeaseRemaining() time.Duration {
	if l.deadline == nil {
		return 0
	}
	return time.Until(l.deadline())
}

// lead runs the callback and watches leadership until it ends.
func (e *Elector) lead(ctx context.Context, r *run, epoch int64, deleted *atomic.Bool, onElected func(context.Context, Leadership)) {
	if epoch <= e.lastEpoch {
		// Never lead twice with one epoch, whatever went wrong in between.
		e.log.Error("refusing to lead with an epoch not above our last one", "epoch", epoch, "last_epoch", e.lastEpoch, "node", r.node)
		return
	}
	// The timeout may have changed since the campaign began (a reconnect).
	tm, err := e.timing(r.sess.Timeout())
	e.setRefusal(err)
	if err != nil {
		e.log.Error("won the election but cannot lead safely; giving it back", "node", r.node, "err", err)
		return
	}
	won := time.Now()
	e.log.Debug("candidate won", "node", r.node, "epoch", epoch, "duration_seconds", won.Sub(r.woke).Seconds())
	// Heartbeats published the deadline of the campaign's timing; when
	// this term's is longer, only heartbeats sent from now on, which
	// publish it, may anchor the lease (the warm chain does not count).
	grew := e.beats() && deadlineMS(tm) > deadlineMS(r.tm)
	if grew {
		// A renewal of the wait still in flight carries the old
		// deadline: let it be answered (or time out) first.
		if r.warmDone != nil {
			select {
			case <-r.warmDone:
			case <-ctx.Done():
				return
			}
		}
		r.beatsFrom = time.Now()
	}
	grace := tm.Grace()
	if e.beats() {
		grace = min(grace, tm.Budget+tm.Margin)
	}
	r.tm, r.gap = tm, lease.Gap(tm.Session, e.cfg.TickTime)
	r.anchor = anchorFn(func() []zk.Ack { return e.acks(r) }, r.gap)
	// The lease runs from an anchor that a credit chain of answered writes
	// proves; a candidate that waited without keeping one has none.
	sctx, cancelSettle := context.WithTimeout(ctx, tm.Session)
	warm, err := e.ready(sctx, r, !grew)
	cancelSettle()
	if err == nil {
		e.log.Debug("lease ready", "node", r.node, "epoch", epoch, "warm", warm, "duration_seconds", time.Since(won).Seconds())
	}
	if err != nil {
		e.log.Warn("could not confirm leadership with the zookeeper leader", "node", r.node, "err", err)
		return
	}
	e.lastEpoch = epoch
	l := Leadership{Epoch: epoch, Path: r.node, Session: r.sess, NodeID: e.cfg.NodeID, Mode: e.cfg.Mode, Lease: tm.Lease,
		SessionTimeout: tm.Session, RenewInterval: tm.Renew, Grace: grace, Timing: tm, deadline: r.deadline,
		deleted: deleted, finishing: new(atomic.Bool)}

	// The term's context derives from Run's: when Run's context is
	// cancelled with a cause, context.Cause of the term is that cause (the
	// caller's reason, such as a shutdown or an unhealthy service); the
	// elector's own reasons (ErrLeaseExpired, ErrNodeDeleted, ...) are the
	// cause when the term ends otherwise.
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(ErrStopped)
	done := make(chan struct{})
	e.log.Info("elected", "epoch", epoch, "node", r.node, "lease", tm.Lease.String(),
		"renew_every", tm.Renew.String(), "tolerance", tm.Tolerance().String(), "grace", grace.String(),
		"demote_budget", tm.Budget.String(), "tick_time", tm.Tick.String(), "tick_time_known", tm.TickKnown,
		"session_timeout", tm.Session.String(), "lease_left", l.LeaseRemaining().Round(time.Millisecond).String())
	go func() {
		defer close(done)
		onElected(lctx, l)
	}()

	if f := e.cfg.testHooks.leading; f != nil {
		f(l)
	}
	// The renewals and the watch of our znode run beside the leadership;
	// they end after it (never delaying its end), before Run returns.
	var watchers sync.WaitGroup
	cause := e.watch(ctx, r, done, l.finishing, &watchers)
	cancel(cause)
	<-done
	watchers.Wait()
	e.log.Info("leadership ended", "epoch", epoch, "reason", cause.Error())
}

// ready returns once the lease leaves this new leader the tolerance a
// leader has in steady state. A candidate that kept a credit chain while
// it waited (warm) is ready at once when the chain's anchor, on the
// connection in use, is at most 2R + MinTolerance/2 old (what a leader
// renewing every R has), or once the wait's renewal still in flight was
// answered (it may be the one that completes a fresh chain, and any write
// sent before its answer could not be the Y of its chain), or after at most
// two more writes complete a newer chain (its renewals ran late: the pair
// the renew loop would send now); otherwise it settles. warm says which. (Acks are per connection:
// after a reconnect only a chain on the new connection counts here,
// although the lease may still run from an older one.)
func (e *Elector) ready(ctx context.Context, r *run, chain bool) (warm bool, err error) {
	if on, _ := e.warmState(); chain && (on || e.cfg.WarmStandby) {
		pending := r.warmDone // the wait's renewal, maybe still in flight
		r.warmDone = nil
		for writes := 0; ; {
			acks := e.acksOn(r)
			if a := Anchor(acks, r.gap); !a.IsZero() && time.Since(a) <= 2*r.tm.Renew+lease.MinTolerance/2 {
				return true, nil
			}
			if pending != nil {
				// A renewal of the wait still in flight is answered before
				// any write we could send now (one session's requests are
				// answered in order) and may complete a fresh chain, or be
				// its X: wait for it rather than send a write that could
				// not be the Y of that chain, then judge again.
				select {
				case <-pending:
				case <-ctx.Done():
					return false, ctx.Err()
				}
				pending = nil
				continue
			}
			// A write now moves the anchor when it is the Y of a chain, or
			// the X of one (a gap after the newest answer) that a Y completes.
			now := time.Now()
			if writes == 2 || len(acks) == 0 || !renewNow(acks, r.gap, now) && now.Sub(acks[len(acks)-1].Answered) < r.gap {
				break
			}
			ok, err := e.confirm(ctx, r)
			if err != nil {
				return false, err
			}
			if !ok {
				return false, ErrNodeDeleted
			}
			writes++
		}
	}
	return false, e.settle(ctx, r)
}

// acksOn returns the session's acks over the connection in use.
func (e *Elector) acksOn(r *run) []zk.Ack {
	conn := r.sess.Conn()
	var acks []zk.Ack
	for _, a := range e.acks(r) {
		if a.Conn == conn {
			acks = append(acks, a)
		}
	}
	return acks
}

// settle renews until the lease runs from a write sent after the win: a
// first write (Z), one a gap after its answer (X), one right after that
// (Y). An older chain (of the writes that joined the election) may still
// be valid, but would leave a new leader little of its lease.
func (e *Elector) settle(ctx context.Context, r *run) error {
	start := time.Now()
	for {
		ok, err := e.confirm(ctx, r)
		if err != nil {
			return err
		}
		if !ok {
			return ErrNodeDeleted
		}
		if !r.anchor().Before(start) {
			return nil
		}
		acks := e.acks(r)
		if renewNow(acks, r.gap, time.Now()) {
			continue
		}
		wait := r.tm.Renew
		if len(acks) > 0 {
			wait = time.Until(acks[len(acks)-1].Answered.Add(r.tm.Renew))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// watch returns why the leadership ended. It makes no ZooKeeper call itself:
// renewals and the watch on our znode run in goroutines that report over
// channels, so however long any call blocks, the loop only selects and ends
// leadership when the lease runs out by the clock. Those goroutines run in
// watchers; they are told to stop when watch returns.
func (e *Elector) watch(ctx context.Context, r *run, done <-chan struct{}, finishing *atomic.Bool, watchers *sync.WaitGroup) error {
	wctx, stop := context.WithCancel(ctx)
	defer stop()

	gone := make(chan error, 1)
	report := func(err error) {
		select {
		case gone <- err:
		default:
		}
	}
	full := make(chan struct{}, 1)
	watchers.Go(func() { e.renewLoop(wctx, r, true, full, report) })
	watchers.Go(func() { e.watchNode(wctx, r, report) })

	timer := time.NewTimer(r.tm.Lease)
	defer timer.Stop()
	_, stateChanged := r.sess.State()
	for {
		// Check the clock first: after a pause every case may be ready at once.
		left := time.Until(r.deadline())
		if left <= 0 {
			return ErrLeaseExpired
		}
		timer.Reset(left)
		select {
		case <-done:
			return ErrReleased
		case <-ctx.Done():
			return stopCause(ctx)
		case <-r.sess.Done():
			return ErrSessionExpired
		case err := <-gone:
			if errors.Is(err, ErrNodeDeleted) && finishing.Load() {
				return ErrReleased // the term's own Finish deleted it
			}
			if time.Until(r.deadline()) <= 0 {
				// Woken after a pause: the lease ran out first (a
				// successor may have deleted our znode at our deadline).
				return ErrLeaseExpired
			}
			return err
		case <-stateChanged:
			var st zk.State
			st, stateChanged = r.sess.State()
			if st != zk.StateConnected {
				continue
			}
			// Reconnected within the session: the server may have granted
			// another timeout (the gap stays: tick <= the smaller one / 2).
			if t := r.sess.Timeout(); t != r.tm.Session {
				ntm, err := e.timing(t)
				if err != nil || r.tm.Lease > ntm.Max {
					// Reported as a lease expiry (errors.Is matches both).
					return fmt.Errorf("%w: %w: lease %v, session timeout %v (was %v), demote budget %v",
						ErrLeaseExpired, ErrTimeoutShrunk, r.tm.Lease, t, r.tm.Session, r.tm.Budget)
				}
			}
			// Make sure our znode survived and is still first.
			select {
			case full <- struct{}{}:
			default:
			}
		case <-timer.C:
		}
	}
}

// stopCause is why Run's context ended: the cause its caller gave, or
// ErrStopped when it gave none.
func stopCause(ctx context.Context) error {
	if c := context.Cause(ctx); c != nil && c != ctx.Err() {
		return c
	}
	return ErrStopped
}

// watchNode watches our znode until ctx ends and reports its deletion, so
// that an operator deleting it ends leadership at once. It sets the watch
// again after a data change and after a failed call (once the session is
// connected again).
func (e *Elector) watchNode(ctx context.Context, r *run, report func(error)) {
	for ctx.Err() == nil {
		ok, _, ch, err := r.sess.ExistsW(ctx, r.node)
		switch {
		case err == nil && !ok:
			report(ErrNodeDeleted)
			return
		case err == nil:
			select {
			case ev := <-ch:
				if ev.Type == zk.EventNodeDeleted {
					report(ErrNodeDeleted)
					return
				}
				if ev.Type == zk.EventNotWatching {
					cluster.Sleep(ctx, 100*time.Millisecond) // no tight loop if it persists
				}
				// Changed, or not watching any more: watch again.
			case <-ctx.Done():
				return
			}
		case r.sess.Err() != nil:
			return // the session is over; watch reports that
		default:
			if waitConnected(ctx, r.sess) != nil {
				return
			}
			cluster.Sleep(ctx, 100*time.Millisecond)
		}
	}
}
