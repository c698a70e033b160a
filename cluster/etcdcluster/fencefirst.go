package etcdcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
)

// Fencing first, then taking over (ElectorConfig.FenceFirst; the package
// doc has the overview).

// retryProveOut is how long after a ProveOut that did not prove the
// leader out the candidate asks again while the same heartbeat stands
// (cluster.FenceFirst): a leader cut off from etcd still answers a probe
// that it is connected until its own renewals have failed, and a fence
// may fail once.
func retryProveOut(f cluster.FenceFirst) time.Duration {
	return max(f.SuspectAfter, 500*time.Millisecond)
}

// beat writes our key's heartbeats until the returned stop is called
// (stop waits until no heartbeat is in flight): after every renewal of
// sess that counted, one transaction puts the key's value again, keeping
// its lease, if the key is still the one of this join (its create
// revision). So the key's mod revision moves only while the lease is
// renewed and answered, and a heartbeat never re-creates a key that went.
// It ends by itself when the key is gone or the session ended.
func (e *Elector) beat(sess *Session, en entry) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			next := sess.renewals()
			select {
			case <-next:
			case <-sess.Done():
				return
			case <-ctx.Done():
				return
			}
			if f := e.cfg.hooks.beat; f != nil && !f() {
				continue
			}
			pctx, pcancel := context.WithTimeout(ctx, max(sess.RenewInterval(), time.Second))
			resp, err := e.s.cli.Txn(pctx).If(clientv3.Compare(clientv3.CreateRevision(en.key), "=", en.rev)).
				Then(clientv3.OpPut(en.key, en.val, clientv3.WithIgnoreLease())).Commit()
			pcancel()
			switch {
			case err != nil:
				if ctx.Err() == nil {
					e.log.Debug("a heartbeat failed; the next renewal's goes on", "key", en.key, "err", err)
				}
			case !resp.Succeeded:
				e.log.Debug("our election key is gone: no more heartbeats", "key", en.key)
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// overdue is how long one heartbeat of k must stand still before it is
// suspected: the renew interval k publishes plus SuspectAfter. ok is
// false when k publishes no heartbeat: it is never suspected.
func (e *Elector) overdue(k *mvccpb.KeyValue) (after time.Duration, ok bool) {
	var c candidate
	if json.Unmarshal(k.Value, &c) != nil || c.RenewMS <= 0 {
		return 0, false
	}
	return time.Duration(c.RenewMS)*time.Millisecond + e.cfg.FenceFirst.SuspectAfter, true
}

// beatOf is the Beat that k, an election key as read, names.
func beatOf(k *mvccpb.KeyValue) cluster.Beat {
	var c candidate
	_ = json.Unmarshal(k.Value, &c)
	return cluster.Beat{NodeID: c.NodeID, Version: k.ModRevision,
		Entry: cluster.Entry{Key: string(k.Key), Owner: k.Lease, Created: k.CreateRevision}}
}

// awaitBeat is waitGone for the candidate next in line with FenceFirst:
// pred is the oldest key, as read at revision from-1. It watches pred
// from revision from and times each mod revision it sees on the monotonic
// clock, from when it saw it (a new wait, after a re-read, times anew: a
// failed watch means our own view of etcd was in trouble). When a
// revision of a key that publishes heartbeats stood still for overdue, a
// linearizable read checks that it is still the key's newest (a lagging
// member's watch is no heartbeat that stood still), and ProveOut is asked
// to fence its node; while that revision stands it is asked again every
// retryProveOut, never twice at once. Only when ProveOut returned nil
// does EndTerm end the term, deleting the key if its heartbeat is still
// at that revision. It returns as waitGone does: nil when pred went (a
// term ended here included) or the watch failed, so that the caller reads
// the election again.
func (e *Elector) awaitBeat(ctx context.Context, sessDone <-chan struct{}, pred *mvccpb.KeyValue, from int64) error {
	key, created := string(pred.Key), pred.CreateRevision
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := e.s.cli.Watch(wctx, key, clientv3.WithRev(from))
	// ProveOut's context ends when the wait does (the key went, or the
	// watch failed): the caller reads the election again.
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	var (
		cur     *mvccpb.KeyValue // the newest revision seen,
		seenAt  time.Time        // when,
		askAt   time.Time        // when ProveOut is due for it (zero: never),
		refused bool             // and whether ProveOut refused it already
	)
	see := func(k *mvccpb.KeyValue) {
		cur, seenAt, askAt, refused = k, time.Now(), time.Time{}, false
		if after, ok := e.overdue(k); ok {
			askAt = seenAt.Add(after)
		}
	}
	see(pred)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var (
		proving chan error // ProveOut's answer, while it runs
		suspect cluster.Suspect
	)
	for {
		var due <-chan time.Time
		if proving == nil && !askAt.IsZero() {
			timer.Reset(time.Until(askAt))
			due = timer.C
		}
		select {
		case resp, ok := <-ch:
			if end, err := e.watchEnded(ctx, resp, ok); end {
				return err
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != created {
					return nil
				}
				if ev.Kv.ModRevision > cur.ModRevision {
					see(ev.Kv)
				}
			}
		case <-due:
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := e.s.cli.Get(clientv3.WithRequireLeader(rctx), key)
			rcancel()
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return ctx.Err()
				}
				e.log.Debug("reading the leader's heartbeat failed; timing it anew", "key", key, "err", err)
				see(cur)
				continue
			case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != created:
				return nil
			case resp.Kvs[0].ModRevision > cur.ModRevision:
				see(resp.Kvs[0])
				continue
			}
			suspect = cluster.Suspect{Beat: beatOf(cur), Stood: time.Since(seenAt)}
			if !refused {
				e.log.Info("the leader's heartbeat stood still; fencing it first", "leader_node", suspect.Beat.NodeID,
					"version", suspect.Beat.Version, "stood_seconds", suspect.Stood.Seconds())
			}
			proving = make(chan error, 1)
			go func(s cluster.Suspect) { proving <- e.cfg.FenceFirst.ProveOut(pctx, s) }(suspect)
		case err := <-proving:
			proving = nil
			if err == nil {
				err = e.endTerm(ctx, suspect.Beat)
				switch {
				case err == nil:
					e.log.Info("ended the old leader's term after fencing it: its heartbeat stood still", "leader_node", suspect.Beat.NodeID,
						"version", suspect.Beat.Version, "stood_seconds", time.Since(seenAt).Seconds())
					if f := e.cfg.FenceFirst.Ended; f != nil {
						f(suspect.Beat)
					}
					return nil
				case errors.Is(err, cluster.ErrEntryChanged):
					return nil
				case errors.Is(err, cluster.ErrBeatMoved):
					// Read it again at once (askAt passed): timed anew.
					e.log.Info("the old leader's heartbeat moved while it was fenced; its term goes on", "leader_node", suspect.Beat.NodeID,
						"version", suspect.Beat.Version)
					continue
				case ctx.Err() != nil:
					return ctx.Err()
				}
			}
			if cur.ModRevision != suspect.Beat.Version {
				continue // the heartbeat moved: timed anew (see)
			}
			if !refused {
				e.log.Info("fencing the old leader first did not prove it out; asking again while its heartbeat stands, "+
					"else its term ends by its lease", "leader_node", suspect.Beat.NodeID, "version", suspect.Beat.Version,
					"retry_after", retryProveOut(e.cfg.FenceFirst).String(), "err", err)
			} else {
				e.log.Debug("fencing the old leader first did not prove it out", "leader_node", suspect.Beat.NodeID,
					"version", suspect.Beat.Version, "err", err)
			}
			refused, askAt = true, time.Now().Add(retryProveOut(e.cfg.FenceFirst))
		case <-sessDone:
			return errSessionDone
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// endTerm is EndTerm, tried again after a failure that says nothing of
// the entry (the transaction is guarded: a retry of one that went through
// finds the key gone, ErrEntryChanged).
func (e *Elector) endTerm(ctx context.Context, b cluster.Beat) error {
	var err error
	for range 3 {
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = e.s.EndTerm(ectx, b)
		cancel()
		if err == nil || errors.Is(err, cluster.ErrEntryChanged) || errors.Is(err, cluster.ErrBeatMoved) || ctx.Err() != nil {
			return err
		}
		cluster.Sleep(ctx, retryInterval)
	}
	return err
}

// The Store's EndTerm is cluster.Store's, which calls kv's.
var (
	_ cluster.TermEnder = kv{}
	_ cluster.TermEnder = (*Store)(nil)
)

// EndTerm deletes the election key b names in one transaction that
// compares its create revision (b.Entry.Created), its lease (b.Entry.Owner,
// unless zero) and its mod revision (b.Version, the heartbeat), and then
// revokes that lease, so that the node's member record goes too. A key
// that went or is another (another create revision or lease) is
// ErrEntryChanged, a heartbeat that moved ErrBeatMoved; either way
// nothing changed. Of two calls with one Beat only one can delete the
// key: the other finds it gone.
func (k kv) EndTerm(ctx context.Context, b cluster.Beat) error {
	e := b.Entry
	if e.Key == "" || e.Created <= 0 || b.Version <= 0 {
		// A zero create revision would compare "absent", and the delete
		// of an absent key succeeds.
		return fmt.Errorf("%w: no entry or heartbeat named (%s, version %d)", cluster.ErrEntryChanged, e, b.Version)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Created),
		clientv3.Compare(clientv3.ModRevision(e.Key), "=", b.Version)}
	if e.Owner != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(e.Key), "=", clientv3.LeaseID(e.Owner)))
	}
	resp, err := k.s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(e.Key)).Else(clientv3.OpGet(e.Key)).Commit()
	if err != nil {
		return fmt.Errorf("ending the term of %s: %w", e.Key, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		switch {
		case len(kvs) == 0:
			return fmt.Errorf("%w: %s is gone", cluster.ErrEntryChanged, e)
		case kvs[0].CreateRevision != e.Created || (e.Owner != 0 && kvs[0].Lease != e.Owner):
			return fmt.Errorf("%w: %s is another key now (created %d, lease %x)", cluster.ErrEntryChanged, e, kvs[0].CreateRevision, kvs[0].Lease)
		default:
			return fmt.Errorf("%w: %s (node %s) was at heartbeat version %d, is at %d now; nothing was removed",
				cluster.ErrBeatMoved, e, b.NodeID, b.Version, kvs[0].ModRevision)
		}
	}
	if e.Owner == 0 {
		return nil
	}
	if _, err := k.s.cli.Revoke(ctx, clientv3.LeaseID(e.Owner)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The key is gone already: the term is over. The lease (and the
		// member record on it) runs out by itself.
		k.s.log.Warn("revoking the ended term's lease failed; its member record stays until the lease expires",
			"lease_id", fmt.Sprintf("%x", e.Owner), "err", err)
	}
	return nil
}
