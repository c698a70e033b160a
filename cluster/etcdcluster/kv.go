package etcdcluster

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
)

// The record store in etcd (cluster.Backend): a record is a key, its
// Revision the key's mod revision, a session record a key bound to the
// session's lease, a directory a key prefix ending in "/". A read of
// several queries is one transaction (one revision of the store); a
// commit is one transaction whose comparisons are the ops' revisions.

// kv is the Store's cluster.Backend.
type kv struct{ s *Store }

func (k kv) Connected() bool                 { return k.s.conn.Connected() }
func (k kv) SessionChanged() <-chan struct{} { return k.s.conn.SessionChanged() }
func (k kv) Fresh(ctx context.Context) error { return k.s.fresh(ctx) }
func (k kv) Queue(ctx context.Context) ([]string, error) {
	return k.s.queue(ctx)
}

func (k kv) Watch(ctx context.Context) cluster.Watcher { return &watcher{s: k.s} }

func (k kv) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	out, _, err := k.s.read(ctx, qs)
	return out, err
}

func (k kv) Commit(ctx context.Context, ops ...cluster.Op) (cluster.Committed, error) {
	cmps, txOps, err := k.s.txn(ctx, ops)
	if err != nil {
		return cluster.Committed{}, err
	}
	resp, err := k.s.cli.Txn(ctx).If(cmps...).Then(txOps...).Commit()
	if err != nil {
		return cluster.Committed{}, err
	}
	if !resp.Succeeded {
		return cluster.Committed{}, ErrConflict
	}
	return committed(ops, resp.Header.Revision), nil
}

// ErrConflict means a compare-and-set found the record changed since it
// was read.
var ErrConflict = fmt.Errorf("etcdcluster: %w", cluster.ErrConflict)

// committed is what a transaction at revision rev wrote: each put's new
// mod revision is the transaction's.
func committed(ops []cluster.Op, rev int64) cluster.Committed {
	c := cluster.Committed{Revs: make([]cluster.Revision, len(ops)), Stamp: rev}
	for i, o := range ops {
		if o.Kind == cluster.OpPut || o.Kind == cluster.OpPutSession {
			c.Revs[i] = cluster.RevisionOf(rev)
		}
	}
	return c
}

// dir is the key prefix of a directory of the layout (ending in "/").
func dir(p string) string { return p + "/" }

// read reads qs in one transaction and returns the store revision it read
// at.
func (s *Store) read(ctx context.Context, qs []cluster.Query) ([]cluster.Result, int64, error) {
	ops := make([]clientv3.Op, len(qs))
	for i, q := range qs {
		switch {
		case q.Dir && q.NamesOnly:
			ops[i] = clientv3.OpGet(dir(q.Key), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		case q.Dir:
			ops[i] = clientv3.OpGet(dir(q.Key), clientv3.WithPrefix())
		default:
			ops[i] = clientv3.OpGet(q.Key)
		}
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, err
	}
	var lease clientv3.LeaseID
	if sess := s.conn.Current(); sess != nil {
		lease = sess.ID
	}
	out := make([]cluster.Result, len(qs))
	for i, q := range qs {
		prefix := q.Key
		if q.Dir {
			prefix = dir(q.Key)
		}
		for _, k := range resp.Responses[i].GetResponseRange().Kvs {
			name := strings.TrimPrefix(string(k.Key), prefix)
			if q.Dir && (name == "" || strings.Contains(name, "/")) {
				continue // not directly below the directory
			}
			if !q.Dir {
				name = q.Key[strings.LastIndex(q.Key, "/")+1:]
			}
			owner := cluster.Persistent
			switch {
			case k.Lease == 0:
			case clientv3.LeaseID(k.Lease) == lease:
				owner = cluster.OwnSession
			default:
				owner = cluster.OtherSession
			}
			out[i].Items = append(out[i].Items, cluster.Item{Name: name, Data: k.Value, Rev: cluster.RevisionOf(k.ModRevision), Owner: owner})
		}
	}
	return out, resp.Header.Revision, nil
}

// casOn compares key against rev (zero: absent).
func casOn(key string, rev cluster.Revision) clientv3.Cmp {
	n, ok := rev.Backend()
	if !ok {
		return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", n)
}

// txn is ops as a transaction's comparisons and operations. A put at an
// existing revision keeps the key's lease (a session record stays with
// its session); a session put binds the key to the current session's
// lease.
func (s *Store) txn(ctx context.Context, ops []cluster.Op) ([]clientv3.Cmp, []clientv3.Op, error) {
	var cmps []clientv3.Cmp
	var out []clientv3.Op
	for _, o := range ops {
		if o.Kind == cluster.OpDelete && !o.Rev.Exists() && !o.Rev.IsAny() {
			return nil, nil, fmt.Errorf("etcdcluster: deleting %s needs a revision read", o.Key)
		}
		if !o.Rev.IsAny() {
			cmps = append(cmps, casOn(o.Key, o.Rev))
		}
		switch o.Kind {
		case cluster.OpAbsent:
			// The comparison alone: its create revision is 0.
		case cluster.OpPut:
			if o.Rev.Exists() {
				out = append(out, clientv3.OpPut(o.Key, string(o.Data), clientv3.WithIgnoreLease()))
			} else {
				out = append(out, clientv3.OpPut(o.Key, string(o.Data)))
			}
		case cluster.OpPutSession:
			sess, err := s.conn.Session(ctx)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, clientv3.OpPut(o.Key, string(o.Data), clientv3.WithLease(sess.ID)))
		case cluster.OpDelete:
			out = append(out, clientv3.OpDelete(o.Key))
		default:
			return nil, nil, fmt.Errorf("etcdcluster: unknown op %d", o.Kind)
		}
	}
	return cmps, out, nil
}

// watcher is a watch loop's reader (cluster.Watcher): it notes the keys
// each round read and the store revision of its first read, and waits
// for an event on any of them from the revision after it, so no change
// made after the reads is missed. The watch requires a leader: a member
// cut off from its quorum cancels it (after a few election timeouts)
// instead of staying silent, and a watch whose revision was compacted
// meanwhile is cancelled too; either way Wait returns the error and the
// loop reads again.
type watcher struct {
	s    *Store
	keys []watchKey
	rev  int64 // the first read's revision since the last Wait (0: none)
}

func (w *watcher) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	out, rev, err := w.s.read(ctx, qs)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		if q.Dir {
			w.keys = append(w.keys, watchKey{key: dir(q.Key), prefix: true})
		} else {
			w.keys = append(w.keys, watchKey{key: q.Key})
		}
	}
	if w.rev == 0 || rev < w.rev {
		w.rev = rev
	}
	return out, nil
}

func (w *watcher) Wait(ctx context.Context) error {
	keys, rev := w.keys, w.rev
	w.keys, w.rev = nil, 0
	if len(keys) == 0 {
		return errWatchClosed
	}
	if h := w.s.afterWatchRead; h != nil {
		h()
	}
	err := w.s.waitChange(ctx, keys, rev+1)
	if err != nil && ctx.Err() == nil {
		if h := w.s.watchInterrupted; h != nil {
			h(err)
		}
	}
	return err
}

func (w *watcher) Close() {}
