package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
)

// term is one leadership as a cluster.TermKV. Every write it makes is one
// transaction whose first comparison is that the term's election key
// still exists at its create revision, the epoch: a term whose key is
// gone (its lease expired or was revoked, or someone deleted it) writes
// nothing. A record written at a revision adds the comparison of the
// record's mod revision (zero: it must not exist). The transaction's
// else branch reads our key, so that a failure tells "the term is over"
// (wrapping cluster.ErrEntryDeleted) from "the record changed"
// (ErrConflict).
type term struct {
	s      *Store
	sess   *Session
	key    string
	epoch  int64
	nodeID string

	over atomic.Pointer[error] // why the term ended, once known
	// finishing is set while Finish's transaction, which deletes the
	// term's own key, is in flight or done: the elector then reports the
	// key's deletion as the term released, not as deleted by someone else.
	finishing atomic.Bool
}

var _ cluster.TermKV = (*term)(nil)

func (t *term) Epoch() int64   { return t.epoch }
func (t *term) NodeID() string { return t.nodeID }

// end records why the term ended, for Expiry, when that means the term
// is over for etcd too (its key or lease is gone, or the lease can no
// longer be counted on). A term the controller ended or released keeps
// its key until the elector leaves.
func (t *term) end(cause error) {
	if errors.Is(cause, cluster.ErrEntryDeleted) || errors.Is(cause, cluster.ErrSessionExpired) || errors.Is(cause, cluster.ErrLeaseExpired) {
		t.over.CompareAndSwap(nil, &cause)
	}
}

// Expiry is the session's deadline (Session.Deadline: the send time of
// the newest renewal etcd answered plus the granted TTL, less the
// margin), or an error once the term is known to be over.
func (t *term) Expiry() (time.Time, error) {
	if err := t.over.Load(); err != nil {
		return time.Time{}, *err
	}
	if err := t.sess.Err(); err != nil {
		return time.Time{}, err
	}
	d := t.sess.Deadline()
	if !time.Now().Before(d) {
		return time.Time{}, fmt.Errorf("%w: no renewal of etcd lease %x answered in time", cluster.ErrLeaseExpired, int64(t.sess.ID))
	}
	return d, nil
}

// SessionTimeout is the lease TTL etcd granted: how long after a node
// stopped renewing its keys may remain.
func (t *term) SessionTimeout() time.Duration { return t.sess.TTL() }

// guard is the comparison every write of the term carries.
func (t *term) guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.epoch)
}

// commit runs the term's guarded transaction: the guard and cmps, then
// ops. It returns the answer when it succeeded, an error wrapping
// cluster.ErrEntryDeleted when the guard failed, ErrConflict when only
// cmps failed.
func (t *term) commit(ctx context.Context, what string, cmps []clientv3.Cmp, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	resp, err := t.s.cli.Txn(ctx).If(append([]clientv3.Cmp{t.guard()}, cmps...)...).Then(ops...).
		Else(clientv3.OpGet(t.key)).Commit()
	if err != nil {
		return nil, fmt.Errorf("%s (guarded by %s): %w", what, t.key, err)
	}
	if resp.Succeeded {
		return resp, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != t.epoch {
		return nil, fmt.Errorf("%s: %w: %s (create revision %d) is gone", what, cluster.ErrEntryDeleted, t.key, t.epoch)
	}
	return nil, fmt.Errorf("%s: %w", what, ErrConflict)
}

// Read reads linearizably, as every read here: a winner sees every
// write its predecessor made before its key went.
func (t *term) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	out, _, err := t.s.read(ctx, qs)
	return out, err
}

// Commit applies ops in the term's guarded transaction.
func (t *term) Commit(ctx context.Context, ops ...cluster.Op) (cluster.Committed, error) {
	cmps, txOps, err := t.s.txn(ctx, ops)
	if err != nil {
		return cluster.Committed{}, err
	}
	resp, err := t.commit(ctx, "writing", cmps, txOps...)
	if err != nil {
		return cluster.Committed{}, err
	}
	return committed(ops, resp.Header.Revision), nil
}

// Finish applies ops and deletes the term's election key in one
// transaction guarded by the key: if the term is over or a record changed,
// nothing changes (the breadcrumb stays, and the successor fences this
// node).
func (t *term) Finish(ctx context.Context, ops ...cluster.Op) error {
	cmps, txOps, err := t.s.txn(ctx, ops)
	if err != nil {
		return err
	}
	t.finishing.Store(true)
	_, err = t.commit(ctx, "finishing term "+fmt.Sprint(t.epoch), cmps, append(txOps, clientv3.OpDelete(t.key))...)
	if err != nil {
		t.finishing.Store(false)
		return err
	}
	t.end(fmt.Errorf("%w: %s deleted by Finish", cluster.ErrEntryDeleted, t.key))
	return nil
}
