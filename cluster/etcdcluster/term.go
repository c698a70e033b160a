package etcdcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// term is one leadership as a cluster.Term. Every write it makes is one
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

var _ cluster.Term = (*term)(nil)

func (t *term) Epoch() int64 { return t.epoch }

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

// casOn compares key against rev (zero: absent) and returns the
// comparison; false when rev is not an etcd revision of a record.
func casOn(key string, rev cluster.Revision) clientv3.Cmp {
	n, ok := rev.Backend()
	if !ok {
		return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", n)
}

// ReadBreadcrumb reads the breadcrumb (linearizable, as every read here).
func (t *term) ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, cluster.Revision, error) {
	return t.s.readBreadcrumb(ctx)
}

// WriteBreadcrumb stores r if the breadcrumb is still at rev (zero: it
// must not exist), guarded by the term; the new revision is the
// transaction's, which is the key's new mod revision.
func (t *term) WriteBreadcrumb(ctx context.Context, r breadcrumb.Record, rev cluster.Revision) (cluster.Revision, error) {
	b, err := breadcrumb.Encode(r)
	if err != nil {
		return cluster.Revision{}, err
	}
	key := t.s.layout.Breadcrumb()
	resp, err := t.commit(ctx, "writing breadcrumb "+key, []clientv3.Cmp{casOn(key, rev)}, clientv3.OpPut(key, string(b)))
	if err != nil {
		return cluster.Revision{}, err
	}
	return cluster.RevisionOf(resp.Header.Revision), nil
}

// ReadFailover reads the standing request: etcd's linearizable read sees
// every request its predecessor saw before its key went.
func (t *term) ReadFailover(ctx context.Context) (*cluster.FailoverRequest, error) {
	return t.s.ReadFailover(ctx)
}

// CompleteFailover marks a request to this node done with epoch, guarded by the term and compared against the request read (a
// request replaced meanwhile is left alone). The request keeps its lease
// (the requester's): it goes when the requester does.
func (t *term) CompleteFailover(ctx context.Context, epoch int64) error {
	key := t.s.layout.Failover()
	cur, _, err := t.s.get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the failover request %s: %w", key, err)
	}
	req := decodeFailover(cur)
	if req == nil || req.To != t.nodeID || req.Done {
		return nil
	}
	req.Done, req.Epoch = true, epoch
	b, _ := json.Marshal(req)
	_, err = t.commit(ctx, "marking the failover request "+key+" done", []clientv3.Cmp{unchanged(key, cur)},
		clientv3.OpPut(key, string(b), clientv3.WithIgnoreLease()))
	return err
}

// ReadMembers reads every member record.
func (t *term) ReadMembers(ctx context.Context) ([]cluster.Member, error) {
	return t.s.Members(ctx)
}

// ReadLeaderPosition reads the last position a leader published.
func (t *term) ReadLeaderPosition(ctx context.Context) (*cluster.LeaderPosition, error) {
	return t.s.ReadLeaderPosition(ctx)
}

// WriteLeaderPosition stores p (a key without a lease: it outlives the
// leader), guarded by the term and compared against the record read; it
// refuses to replace a record of a later epoch (cluster.ErrStalePosition).
// A record that cannot be decoded is replaced.
func (t *term) WriteLeaderPosition(ctx context.Context, p cluster.LeaderPosition) error {
	key := t.s.layout.LeaderPosition()
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		old, cur, err := t.s.getLeaderPosition(ctx)
		switch {
		case err != nil && !errors.Is(err, errUnreadablePosition):
			return fmt.Errorf("writing the leader position of epoch %d: %w", p.Epoch, err)
		case old != nil && old.Epoch > p.Epoch:
			return fmt.Errorf("writing the leader position %s of epoch %d: %w (epoch %d)", key, p.Epoch, cluster.ErrStalePosition, old.Epoch)
		}
		_, err = t.commit(ctx, "writing the leader position "+key, []clientv3.Cmp{unchanged(key, cur)}, clientv3.OpPut(key, string(data)))
		if errors.Is(err, ErrConflict) && attempt < 3 {
			continue // changed since we read it: judge again
		}
		return err
	}
}

// historyAttempts bounds AppendHistory's rounds on a concurrent change of
// the history.
const historyAttempts = 10

// AppendHistory appends e to the history record: read, append
// (cluster.AppendHistory), and write back compared against what was read,
// guarded by the term. A concurrent change reads again and retries; an
// unreadable record is logged and replaced by a fresh list.
func (t *term) AppendHistory(ctx context.Context, e cluster.HistoryEntry) (cluster.HistoryEntry, error) {
	key := t.s.layout.History()
	for attempt := 1; ; attempt++ {
		cur, _, err := t.s.get(ctx, key)
		if err != nil {
			return e, fmt.Errorf("reading the history %s: %w", key, err)
		}
		var h []cluster.HistoryEntry
		if cur != nil {
			if h, err = cluster.DecodeHistory(cur.value); err != nil {
				t.s.log.Error("history unreadable: starting a fresh list", "key", key, "err", err)
			}
		}
		out, stored, added := cluster.AppendHistory(h, e)
		if !added {
			return stored, nil // an earlier attempt of ours went through
		}
		b, err := json.Marshal(out)
		if err != nil {
			return e, fmt.Errorf("encoding the history: %w", err)
		}
		if f := t.s.beforeHistoryWrite; f != nil {
			f()
		}
		_, err = t.commit(ctx, "appending to the history "+key, []clientv3.Cmp{unchanged(key, cur)}, clientv3.OpPut(key, string(b)))
		if errors.Is(err, ErrConflict) && attempt < historyAttempts {
			continue
		}
		return stored, err
	}
}

// Finish deletes the breadcrumb (if still at rev) and the term's election
// key in one transaction guarded by the key: if the term is over or the
// breadcrumb changed, nothing changes and the successor fences this node.
func (t *term) Finish(ctx context.Context, rev cluster.Revision) error {
	if !rev.Exists() {
		return fmt.Errorf("finishing term %d: no breadcrumb revision (%s): nothing of ours to delete", t.epoch, rev)
	}
	bc := t.s.layout.Breadcrumb()
	t.finishing.Store(true)
	_, err := t.commit(ctx, fmt.Sprintf("finishing term %d (deleting the breadcrumb and %s)", t.epoch, t.key),
		[]clientv3.Cmp{casOn(bc, rev)}, clientv3.OpDelete(bc), clientv3.OpDelete(t.key))
	if err != nil {
		t.finishing.Store(false)
		return err
	}
	t.end(fmt.Errorf("%w: %s deleted by Finish", cluster.ErrEntryDeleted, t.key))
	return nil
}
