package etcdcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
)

// Mode selects the election recipe (cluster's election modes).
type Mode = cluster.ElectionMode

// Election modes.
const (
	Fair   = cluster.Fair
	Unfair = cluster.Unfair
)

// Election key names under the layout's ElectionDir: fair candidates are
// c_<lease id in hex>, the unfair lock is "lock".
const (
	fairPrefix = cluster.FairPrefix
	lockName   = cluster.LockName
)

// ElectorConfig describes one candidate.
type ElectorConfig struct {
	NodeID string // stored in the election key, shown by status
	Mode   Mode
	// DemoteBudget is how long the controller may need, after Expiry less
	// its budget, to stop the service: the elector refuses to campaign on
	// a lease that cannot hold it (Refusal).
	DemoteBudget time.Duration
	// FenceFirst (fair mode only) makes every counted renewal of the
	// candidate's lease a heartbeat, a guarded re-put of its election key
	// that moves the key's mod revision, and lets the candidate next in
	// line end the term of a leader whose heartbeat is overdue by
	// FenceFirst.SuspectAfter, once ProveOut fenced it (see the package
	// doc, "Fencing first"). Zero: off, and the election key's bytes are
	// those of a candidate without heartbeats.
	FenceFirst cluster.FenceFirst

	// hooks, set by tests only, are this elector's failpoints (nil:
	// none). They are fixed before the elector exists and only read after,
	// so that no test's hook is seen by, or races with, another's elector.
	hooks *electorHooks
}

// electorHooks are one elector's failpoints for tests: waiting sees a
// fair candidate's key and the predecessor it is about to watch; woke
// runs when a waiting fair candidate woke to look at the election again;
// watchFailed runs when a wait ended because its watch failed (etcd's
// leader changed, the stream broke), not because the watched key went
// or the wait was called off.
//
// beat runs before each heartbeat; false skips it (the heartbeat stands
// still while the lease is renewed).
type electorHooks struct {
	waiting     func(key, pred string)
	woke        func()
	watchFailed func()
	beat        func() bool
}

// Elector campaigns for one node in the Store's layout (cluster.Elector).
// It does not implement cluster.Warmer: a candidate's lease is renewed
// all the time, so a winner's Expiry is as far ahead as a leader's.
type Elector struct {
	s    *Store
	cfg  ElectorConfig
	log  *slog.Logger
	guid string // tells this elector's keys apart from other processes'

	mu      sync.Mutex
	refusal error
	// lastEpoch is the epoch of our newest term; a new one must be above
	// it. Only Campaign's goroutine uses it.
	lastEpoch int64
}

var _ cluster.Elector = (*Elector)(nil)

// Elector returns a candidate campaigning in the Store's layout on its
// Conn's sessions.
func (s *Store) Elector(cfg ElectorConfig) (*Elector, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("etcdcluster: the elector's node id is empty")
	}
	if cfg.DemoteBudget < 0 {
		return nil, errors.New("etcdcluster: negative demote budget")
	}
	if cfg.FenceFirst.On() {
		if cfg.Mode != Fair {
			return nil, errors.New("etcdcluster: fencing first needs the fair election mode: " +
				"in unfair mode no candidate is next in line to time the leader's heartbeat")
		}
		if cfg.FenceFirst.SuspectAfter <= 0 {
			return nil, fmt.Errorf("etcdcluster: fencing first needs a positive SuspectAfter, not %v", cfg.FenceFirst.SuspectAfter)
		}
	}
	var b [16]byte
	rand.Read(b[:])
	if cfg.hooks == nil {
		cfg.hooks = &electorHooks{}
	}
	return &Elector{s: s, cfg: cfg, guid: hex.EncodeToString(b[:]),
		log: s.log.With("mode", cfg.Mode.String())}, nil
}

// candidate is the JSON stored in an election key.
type candidate struct {
	NodeID string `json:"node_id"`
	GUID   string `json:"guid"`
	// Join is a nonce of the join that created the key: after a lost
	// answer only a key of the current join may be adopted.
	Join string `json:"join,omitempty"`
	// RenewMS (ElectorConfig.FenceFirst) says that the key is a
	// heartbeat: every counted renewal of its lease puts it again, moving
	// its mod revision, about every RenewMS milliseconds (the session's
	// renew interval, rounded up). A successor suspects the key once one
	// revision stood still for RenewMS plus its SuspectAfter. Absent: no
	// heartbeats (the option is off, or an older version), never
	// suspected. ZooKeeper's heartbeats publish the same field.
	RenewMS int64 `json:"renew_ms,omitempty"`
}

// data is the value of our election key of join; renew is the heartbeat
// interval it publishes (0: none).
func (e *Elector) data(join string, renew time.Duration) string {
	ms := int64((renew + time.Millisecond - 1) / time.Millisecond)
	b, _ := json.Marshal(candidate{NodeID: e.cfg.NodeID, GUID: e.guid, Join: join, RenewMS: ms})
	return string(b)
}

func leaseHex(id clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(id)) }

func nonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Refusal says why the elector stays out of the election (the lease etcd
// granted cannot hold the demote budget), or nil.
func (e *Elector) Refusal() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refusal
}

// ErrLeaseTooShort: the lease etcd granted leaves no room for the demote
// budget; the elector stays out of the election.
var ErrLeaseTooShort = cluster.Reason(cluster.ErrLeaseTooShort, "etcdcluster: lease too short")

// LeaseFits checks that a lease of TTL ttl renewed every renew (0:
// DefaultRenewInterval) holds the demote budget: a leader's Expiry is at
// worst ttl - ttl/RateDiv - renew ahead (just before a renewal's answer),
// which must leave the budget and MinTolerance. The elector applies it to the TTL etcd granted;
// configuration checks can apply it to the TTL asked for.
func LeaseFits(ttl, renew, budget time.Duration) error {
	if renew <= 0 {
		renew = DefaultRenewInterval(ttl)
	}
	left := ttl - ttl/RateDiv - renew - MinTolerance
	if left < budget {
		return fmt.Errorf("%w: the lease TTL %v less the margin (%v), the renew interval (%v) and %v leaves %v, "+
			"less than the demote budget %v; raise the lease TTL or shorten the demote", ErrLeaseTooShort,
			ttl, ttl/RateDiv, renew, MinTolerance, left, budget)
	}
	return nil
}

// fits applies LeaseFits to a session's granted TTL and records the
// verdict as the elector's Refusal.
func (e *Elector) fits(sess *Session) error {
	err := LeaseFits(sess.TTL(), sess.RenewInterval(), e.cfg.DemoteBudget)
	e.mu.Lock()
	e.refusal = err
	e.mu.Unlock()
	return err
}

// Campaign joins the election until ctx ends (cluster.Elector): won runs
// once per term, in its own goroutine; its ctx ends when the term can no
// longer be assumed, and context.Cause says why (ctx's own cause, or one
// of cluster's reasons). Campaign returns nil once ctx ended, after the
// last won returned and our key was deleted (or, if etcd could not be
// reached for that, our lease was given up so that the key goes with it).
func (e *Elector) Campaign(ctx context.Context, won func(ctx context.Context, t cluster.Term)) error {
	if won == nil {
		return errors.New("etcdcluster: nil won")
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		sess, err := e.s.conn.Session(ctx)
		if err != nil {
			cluster.Sleep(ctx, backoff)
			continue
		}
		if err := e.fits(sess); err != nil {
			e.log.Error("not joining the election", "err", err)
			cluster.Sleep(ctx, 5*time.Second)
			continue
		}
		err = e.campaign(ctx, sess, won)
		switch {
		case err == nil:
			backoff = 100 * time.Millisecond
		case ctx.Err() != nil:
		default:
			e.log.Warn("campaign interrupted", "err", err)
			cluster.Sleep(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
		}
	}
	return nil
}

// entry is our election key of one join.
type entry struct {
	key string
	rev int64  // its create revision: the term's epoch if it wins
	val string // its value, which heartbeats put again
}

// campaign joins with one key on sess, waits for our turn, leads, and
// leaves. It returns nil when the term or the candidacy ended normally.
func (e *Elector) campaign(ctx context.Context, sess *Session, won func(context.Context, cluster.Term)) error {
	var en entry
	var err error
	if e.cfg.Mode == Unfair {
		en, err = e.acquireLock(ctx, sess)
	} else {
		en, err = e.join(ctx, sess)
	}
	if en.key != "" {
		defer e.leave(sess, en)
		if e.cfg.FenceFirst.On() {
			// Every candidate beats, from its join on; stopped before
			// leave deletes the key (deferred calls run last in, first
			// out), though a heartbeat never re-creates it anyway.
			defer e.beat(sess, en)()
		}
	}
	if err == nil && e.cfg.Mode == Fair {
		err = e.waitTurn(ctx, sess, en)
	}
	if err != nil || ctx.Err() != nil {
		return err
	}
	e.lead(ctx, sess, en, won)
	return nil
}

// errEntryGone: our key went while we waited (its lease, or a delete).
var errEntryGone = errors.New("etcdcluster: our election key is gone")

// join creates our fair-mode key, c_<lease>, bound to the lease, in one
// transaction "create if absent". An existing key of our lease is a
// leftover of an earlier term (its delete was lost): it is deleted first,
// so that no epoch is used twice. After a lost answer the key is looked up
// again and adopted only when it carries this join's nonce.
func (e *Elector) join(ctx context.Context, sess *Session) (entry, error) {
	key := dir(e.s.layout.ElectionDir()) + fairPrefix + leaseHex(sess.ID)
	if err := e.deleteOrphans(ctx, key); err != nil {
		return entry{}, err
	}
	join := nonce()
	var beat time.Duration
	if e.cfg.FenceFirst.On() {
		beat = sess.RenewInterval()
	}
	val := e.data(join, beat)
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return entry{}, err
		}
		resp, err := e.s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, val, clientv3.WithLease(sess.ID))).
			Else(clientv3.OpGet(key)).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			if err := e.s.conn.check(sess); err != nil {
				return entry{}, err
			}
		}
		if err != nil {
			if attempt < 5 && ctx.Err() == nil {
				e.log.Warn("creating our election key failed; looking again", "key", key, "err", err)
				cluster.Sleep(ctx, retryInterval)
				continue
			}
			return entry{}, fmt.Errorf("joining the election: %w", err)
		}
		if resp.Succeeded {
			return entry{key: key, rev: resp.Header.Revision, val: val}, nil
		}
		k := resp.Responses[0].GetResponseRange().Kvs[0]
		var c candidate
		_ = json.Unmarshal(k.Value, &c)
		if c.Join == join && clientv3.LeaseID(k.Lease) == sess.ID {
			e.log.Info("found our election key after a lost answer", "key", key)
			return entry{key: key, rev: k.CreateRevision, val: val}, nil
		}
		// A leftover of an earlier term of this lease: never adopted.
		if err := e.deleteAt(ctx, key, k.CreateRevision); err != nil {
			return entry{}, err
		}
	}
}

// deleteOrphans deletes the fair-mode keys of this elector (its GUID)
// other than key: keys of earlier sessions whose leases may live on (we
// stopped trusting them, and etcd may not have expired them yet). Their
// terms are over; left there, they would keep the queue behind them
// waiting until the lease expires.
func (e *Elector) deleteOrphans(ctx context.Context, key string) error {
	resp, err := e.s.cli.Get(ctx, dir(e.s.layout.ElectionDir())+fairPrefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("listing the election: %w", err)
	}
	for _, k := range resp.Kvs {
		var c candidate
		if string(k.Key) == key || json.Unmarshal(k.Value, &c) != nil || c.GUID != e.guid {
			continue
		}
		e.log.Info("deleting an election key of an earlier session of ours", "key", string(k.Key))
		if err := e.deleteAt(ctx, string(k.Key), k.CreateRevision); err != nil {
			return err
		}
	}
	return nil
}

// deleteAt deletes key if it is still the key created at rev.
func (e *Elector) deleteAt(ctx context.Context, key string, rev int64) error {
	e.log.Debug("deleting election key", "key", key, "create_revision", rev)
	_, err := e.s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("deleting election key %s: %w", key, err)
	}
	return nil
}

// waitTurn blocks until our key is the oldest of the election: it reads,
// in one transaction that also checks our key is still there, the key
// created last before ours (our predecessor), and watches only that one
// until it goes; then it looks again. So a change wakes exactly one
// candidate, and a win is checked against a linearizable read in which
// our key exists, at our create revision (a key of a lost lease is gone,
// so a candidate whose lease expired while it waited never wins with it).
//
// With FenceFirst, the candidate whose predecessor is the oldest key (the
// leader's, or the next leader's) times that key's heartbeat instead
// (awaitBeat); the same read tells, by a second range of the oldest key.
// Every other candidate also watches the oldest key (waitBehind), so that
// it looks again, and times its predecessor, once that is the oldest.
func (e *Elector) waitTurn(ctx context.Context, sess *Session, en entry) error {
	prefix := dir(e.s.layout.ElectionDir())
	ops := []clientv3.Op{clientv3.OpGet(prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(en.rev-1))...)}
	if e.cfg.FenceFirst.On() {
		ops = append(ops, clientv3.OpGet(prefix, clientv3.WithFirstCreate()...))
	}
	for {
		resp, err := e.s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(en.key), "=", en.rev)).
			Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("reading the election: %w", err)
		}
		if !resp.Succeeded {
			return fmt.Errorf("%w: %s", errEntryGone, en.key)
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil // the oldest: ours
		}
		pred := string(kvs[0].Key)
		if f := e.cfg.hooks.waiting; f != nil {
			f(en.key, pred)
		}
		e.log.Debug("waiting for predecessor", "predecessor", pred)
		var first []*mvccpb.KeyValue
		if e.cfg.FenceFirst.On() {
			first = resp.Responses[1].GetResponseRange().Kvs
		}
		switch {
		case len(first) == 1 && string(first[0].Key) == pred:
			err = e.awaitBeat(ctx, sess.Done(), kvs[0], resp.Header.Revision+1)
		case len(first) == 1:
			err = e.waitBehind(ctx, sess.Done(), kvs[0], first[0], resp.Header.Revision+1)
		default:
			err = e.waitGone(ctx, sess.Done(), nil, pred, kvs[0].CreateRevision, resp.Header.Revision+1)
		}
		if err != nil {
			return sessionErr(sess, err)
		}
		if f := e.cfg.hooks.woke; f != nil {
			f()
		}
	}
}

// watchEnded reports whether a watch answer ends a wait: the stream closed,
// failed or was cancelled. err is ctx's error when ctx ended (the stream
// closes then, which is no failed watch); otherwise the failure goes to
// the watchFailed hook and, after a short pause (no tight loop if it
// persists), the caller looks again (err nil).
func (e *Elector) watchEnded(ctx context.Context, resp clientv3.WatchResponse, ok bool) (end bool, err error) {
	if ok && resp.Err() == nil && !resp.Canceled {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	if f := e.cfg.hooks.watchFailed; f != nil {
		f()
	}
	cluster.Sleep(ctx, 100*time.Millisecond)
	return true, nil
}

// waitGone watches key (created at rev) from revision from until it is
// deleted or re-created (nil), its watch fails or wake is closed (nil: the
// caller looks again), sessDone is closed or ctx ends (errSessionDone,
// ctx's error; the watch's channel closes when ctx ends, which is no
// failed watch).
func (e *Elector) waitGone(ctx context.Context, sessDone, wake <-chan struct{}, key string, rev, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := e.s.cli.Watch(wctx, key, clientv3.WithRev(from))
	for {
		select {
		case resp, ok := <-ch:
			if end, err := e.watchEnded(ctx, resp, ok); end {
				return err
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != rev {
					return nil
				}
			}
		case <-wake:
			return nil
		case <-sessDone:
			return errSessionDone
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitBehind is waitGone of pred for a candidate behind the one next in
// line, with FenceFirst: it returns nil too once first, the oldest key,
// is deleted (a watch of deletions only: the heartbeats are not sent to
// it) or that watch fails, so that the caller looks again and, when pred
// is now the oldest, times its heartbeat. With fencing first a change of
// leader so wakes every waiting candidate once, not only the next one.
func (e *Elector) waitBehind(ctx context.Context, sessDone <-chan struct{}, pred, first *mvccpb.KeyValue, from int64) error {
	fctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	firstGone := make(chan struct{})
	go func() {
		defer close(firstGone)
		for resp := range e.s.cli.Watch(fctx, string(first.Key), clientv3.WithRev(from), clientv3.WithFilterPut()) {
			if len(resp.Events) > 0 {
				return
			}
			if resp.Err() != nil || resp.Canceled {
				break
			}
		}
		cluster.Sleep(fctx, 100*time.Millisecond) // no tight loop if the watch keeps failing
	}()
	return e.waitGone(ctx, sessDone, firstGone, string(pred.Key), pred.CreateRevision, from)
}

// errSessionDone: the session ended while we waited (sessionErr says why).
var errSessionDone = errors.New("etcdcluster: the session ended")

// sessionErr is the session's own error in place of errSessionDone.
func sessionErr(sess *Session, err error) error {
	if errors.Is(err, errSessionDone) {
		return sess.Err()
	}
	return err
}

// acquireLock blocks until we hold the unfair-mode lock: a transaction
// creates it, bound to our lease, if it does not exist, and otherwise
// reads it; every candidate watches it and races when it goes. Success of
// that transaction is the check of the win: the put with our lease fails
// when the lease is gone. A lock of ours from an earlier term or session
// (its delete was lost) is deleted, never adopted, unless it carries this
// join's nonce and our lease (our create went through although its
// answer was lost).
func (e *Elector) acquireLock(ctx context.Context, sess *Session) (entry, error) {
	key := dir(e.s.layout.ElectionDir()) + lockName
	join := nonce()
	for {
		if err := ctx.Err(); err != nil {
			return entry{}, err
		}
		resp, err := e.s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, e.data(join, 0), clientv3.WithLease(sess.ID))).
			Else(clientv3.OpGet(key)).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			if err := e.s.conn.check(sess); err != nil {
				return entry{}, err
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return entry{}, ctx.Err()
			}
			select {
			case <-sess.Done():
				return entry{}, sess.Err()
			default:
			}
			e.log.Warn("taking the lock failed; looking again", "err", err)
			cluster.Sleep(ctx, retryInterval)
			continue
		}
		if resp.Succeeded {
			return entry{key: key, rev: resp.Header.Revision}, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		k := kvs[0]
		var c candidate
		_ = json.Unmarshal(k.Value, &c)
		if c.GUID == e.guid {
			if c.Join == join && clientv3.LeaseID(k.Lease) == sess.ID {
				e.log.Info("found our lock after a lost answer")
				return entry{key: key, rev: k.CreateRevision}, nil
			}
			e.log.Info("deleting an old lock of ours", "create_revision", k.CreateRevision)
			if err := e.deleteAt(ctx, key, k.CreateRevision); err != nil {
				return entry{}, err
			}
			continue
		}
		if err := e.waitGone(ctx, sess.Done(), nil, key, k.CreateRevision, resp.Header.Revision+1); err != nil {
			return entry{}, sessionErr(sess, err)
		}
	}
}

// leave deletes our key if it is still the one of this join, bounded in
// time; if etcd cannot be reached for that within a lease TTL, the session
// is given up (its lease is no longer renewed, so the key goes with it),
// so that no key of a live lease of ours stays in the election.
func (e *Elector) leave(sess *Session, en entry) {
	ctx, cancel := context.WithTimeout(context.Background(), sess.TTL())
	defer cancel()
	for {
		select {
		case <-sess.Done():
			return // the key goes with the lease
		default:
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err := e.deleteAt(rctx, en.key, en.rev)
		rcancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			e.log.Warn("leaving the election failed; giving up the session so that the key goes with its lease", "key", en.key, "err", err)
			e.s.conn.abandon(sess)
			return
		}
		cluster.Sleep(ctx, retryInterval)
	}
}

// lead hands the term to won and watches it until it ends.
func (e *Elector) lead(ctx context.Context, sess *Session, en entry, won func(context.Context, cluster.Term)) {
	if en.rev <= e.lastEpoch {
		e.log.Error("refusing to lead with an epoch not above our last one", "epoch", en.rev, "last_epoch", e.lastEpoch)
		return
	}
	e.waitLease(ctx, sess)
	if ctx.Err() != nil {
		return
	}
	if err := e.fits(sess); err != nil {
		e.log.Error("won the election but cannot lead safely; giving it back", "err", err)
		return
	}
	if !time.Now().Before(sess.Deadline()) {
		return // no renewal answered for a lease: the session ends now
	}
	e.lastEpoch = en.rev
	t := &term{s: e.s, sess: sess, key: en.key, epoch: en.rev, nodeID: e.cfg.NodeID}
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(cluster.ErrReleased)
	done := make(chan struct{})
	// session_timeout and lease as the ZooKeeper elector logs them: the
	// term ends lease after the send of the last answered renewal, and no
	// successor can win before session_timeout after it (etcd expires the
	// lease a TTL after it received that renewal).
	ttl := sess.TTL()
	e.log.Info("elected", "epoch", en.rev, "key", en.key, "lease_id", fmt.Sprintf("%x", int64(sess.ID)), "lease_ttl", ttl.String(),
		"session_timeout", ttl.String(), "lease", (ttl - ttl/RateDiv - e.cfg.DemoteBudget).String(),
		"demote_budget", e.cfg.DemoteBudget.String(),
		"lease_left", time.Until(sess.Deadline()).Round(time.Millisecond).String())
	// The session's lease, and with it our election entry, is revoked
	// only after won returned (Session.Hold).
	release := sess.Hold()
	go func() {
		defer close(done)
		defer release()
		won(tctx, e.s.NewTerm(t))
	}()
	// The watch of our key runs beside the term; it ends after the term
	// (never delaying its end), before Campaign returns.
	wctx, stopWatch := context.WithCancel(ctx)
	gone, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		if e.watchEntry(wctx, en) {
			close(gone)
		}
	}()
	cause := e.watch(ctx, sess, en, done, gone, &t.finishing)
	t.end(cause)
	cancel(cause)
	stopWatch()
	<-done
	<-watched
	e.log.Info("leadership ended", "epoch", en.rev, "reason", cause.Error())
}

// waitLease waits, before a won term is handed over, until the session's
// deadline leaves the term the demote budget and MinTolerance beyond it,
// what LeaseFits keeps for a leader between two renewals. A win can come
// while renewals are late (etcd's leader changed, a slow answer): handed
// over then, the term would end at once (it ends its demote budget before
// the deadline) or the controller would refuse it (its Expiry cannot hold
// the budget), and giving it back costs the epoch and our place in the
// queue, where the Conn's next renewal, retried every retryInterval,
// would have given the lease back. The wait is bounded by the deadline as
// it stood at the win: then, or when the session or ctx ends, the caller
// judges the term as it stands.
func (e *Elector) waitLease(ctx context.Context, sess *Session) {
	need := e.cfg.DemoteBudget + MinTolerance
	until := sess.Deadline()
	left := time.Until(until)
	if left >= need || left <= 0 {
		return
	}
	e.log.Info("won while the lease leaves less than a term needs; waiting for a renewal",
		"lease_left", left.Round(time.Millisecond).String(), "need", need.String())
	start := time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for time.Now().Before(until) {
		select {
		case <-t.C:
		case <-sess.Done():
			return
		case <-ctx.Done():
			return
		}
		if time.Until(sess.Deadline()) >= need {
			e.log.Info("renewed; leading", "waited", time.Since(start).Round(time.Millisecond).String(),
				"lease_left", time.Until(sess.Deadline()).Round(time.Millisecond).String())
			return
		}
	}
}

// watch returns why the term ended: won returned, ctx ended, the session
// ended, our key was deleted (gone is closed), or the deadline less the
// demote budget passed without a renewal (checked by the clock, whatever
// any call is doing). The term ends a demote budget before Expiry, as ZooKeeper's
// lease does, so that the controller's demote, which starts when the term
// ends, is over by Expiry: ending it at Expiry would leave the service
// primary for up to the budget after a successor may have won.
func (e *Elector) watch(ctx context.Context, sess *Session, en entry, done, gone <-chan struct{}, finishing *atomic.Bool) error {
	actUntil := func() time.Time { return sess.Deadline().Add(-e.cfg.DemoteBudget) }
	timer := time.NewTimer(time.Until(actUntil()))
	defer timer.Stop()
	for {
		left := time.Until(actUntil())
		if left <= 0 {
			return fmt.Errorf("%w: no renewal of etcd lease %x answered in time (the deadline less the demote budget %v passed)",
				cluster.ErrLeaseExpired, int64(sess.ID), e.cfg.DemoteBudget)
		}
		timer.Reset(left)
		select {
		case <-done:
			return cluster.ErrReleased
		case <-ctx.Done():
			if c := context.Cause(ctx); c != nil && c != ctx.Err() {
				return c
			}
			return cluster.ErrStopped
		case <-sess.Done():
			return sess.Err()
		case <-gone:
			if finishing.Load() {
				// The term's own Finish deleted it: released.
				return cluster.ErrReleased
			}
			// Deleted, or gone with the lease (revoked). The term ends
			// now: a successor may already have won. Whether the lease
			// went too, a renewal tells the session afterwards (in the
			// background: under load that round trip took seconds, and
			// the old leader acted on meanwhile).
			go e.s.conn.check(sess)
			return fmt.Errorf("%w: %s (create revision %d)", cluster.ErrEntryDeleted, en.key, en.rev)
		case <-timer.C:
		}
	}
}

// watchEntry watches our key until it is deleted (true) or ctx ends
// (false). The watch requires a leader; when it fails (a member without
// a leader, compaction), the key is read again and watched anew.
func (e *Elector) watchEntry(ctx context.Context, en entry) bool {
	for ctx.Err() == nil {
		// The Get makes the transaction linearizable: etcd serves a
		// read-only transaction without a linearizable range from the
		// member's own copy, which may lag behind our win.
		resp, err := e.s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(en.key), "=", en.rev)).
			Then(clientv3.OpGet(en.key, clientv3.WithCountOnly())).Commit()
		if err != nil {
			cluster.Sleep(ctx, retryInterval)
			continue
		}
		if !resp.Succeeded {
			return true
		}
		if e.waitGone(ctx, nil, nil, en.key, en.rev, resp.Header.Revision+1) != nil {
			return false
		}
	}
	return false
}

// queue lists the candidates' node ids in election order (fair: by create
// revision; unfair: the lock holder), for status displays.
func (s *Store) queue(ctx context.Context) ([]string, error) {
	resp, err := s.cli.Get(ctx, dir(s.layout.ElectionDir()), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, k := range resp.Kvs {
		var c candidate
		if json.Unmarshal(k.Value, &c) != nil || c.NodeID == "" {
			c.NodeID = "?" + strings.TrimPrefix(string(k.Key), dir(s.layout.ElectionDir()))
		}
		ids = append(ids, c.NodeID)
	}
	return ids, nil
}
