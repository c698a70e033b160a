package zkcluster

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// The record store in ZooKeeper (cluster.Backend): a record is a znode, its
// Revision the znode version, a session record an ephemeral znode of the
// client's current session, a directory a znode whose children are the
// records. Writes of more than one op, and every write of a term, are one
// multi.

// kv is the Store's cluster.Backend on the client's current session.
type kv struct{ s *Store }

func (k kv) Connected() bool                           { return k.s.Connected() }
func (k kv) SessionChanged() <-chan struct{}           { return k.s.SessionChanged() }
func (k kv) Fresh(ctx context.Context) error           { return k.s.fresh(ctx) }
func (k kv) Watch(ctx context.Context) cluster.Watcher { return &watcher{s: k.s} }

func (k kv) Queue(ctx context.Context) ([]string, error) {
	sess, err := k.s.session(ctx)
	if err != nil {
		return nil, err
	}
	return election.Queue(ctx, sess, k.s.layout.ElectionDir())
}

func (k kv) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	sess, err := k.s.session(ctx)
	if err != nil {
		return nil, err
	}
	return read(ctx, sess, nil, qs)
}

func (k kv) Commit(ctx context.Context, ops ...cluster.Op) (cluster.Committed, error) {
	sess, err := k.s.session(ctx)
	if err != nil {
		return cluster.Committed{}, err
	}
	return commit(ctx, sess, "", ops)
}

// revision is znode version v as a cluster.Revision (-1: absent).
func revision(v int32) cluster.Revision {
	if v < 0 {
		return cluster.Revision{}
	}
	return cluster.RevisionOf(int64(v))
}

// version is the znode version rev stands for (-1: absent or any). A
// revision that no znode version can be (another backend's) is -2, which
// every version check refuses.
func version(rev cluster.Revision) int32 {
	n, ok := rev.Backend()
	switch {
	case !ok:
		return -1
	case n < 0 || n > 1<<31-1:
		return -2
	}
	return int32(n)
}

// item is a znode read on sess as a cluster.Item.
func item(sess *zk.Session, p string, data []byte, st zk.Stat) cluster.Item {
	owner := cluster.Persistent
	switch {
	case st.EphemeralOwner == 0:
	case st.EphemeralOwner == sess.ID():
		owner = cluster.OwnSession
	default:
		owner = cluster.OtherSession
	}
	return cluster.Item{Name: path.Base(p), Data: data, Rev: revision(st.Version), Owner: owner}
}

// read reads qs on sess in order; with w, it arms w's watches that are not
// armed yet (on a record's data or, when absent, its creation; on a
// directory's children or, when absent, its creation; on every record
// listed).
func read(ctx context.Context, sess *zk.Session, w *watchSet, qs []cluster.Query) ([]cluster.Result, error) {
	out := make([]cluster.Result, len(qs))
	for i, q := range qs {
		var err error
		switch {
		case q.Dir && q.NamesOnly:
			out[i].Items, err = readNames(ctx, sess, q.Key)
		case q.Dir:
			out[i].Items, err = readDir(ctx, sess, w, q.Key)
		default:
			var it *cluster.Item
			if it, err = readOne(ctx, sess, w, q.Key); it != nil {
				out[i].Items = []cluster.Item{*it}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readNames lists the names below dir (no watch: the join checks'
// listing of the election).
func readNames(ctx context.Context, sess *zk.Session, dir string) ([]cluster.Item, error) {
	names, err := sess.Children(ctx, dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	slices.Sort(names)
	out := make([]cluster.Item, len(names))
	for i, n := range names {
		out[i].Name = n
	}
	return out, nil
}

// readOne reads the znode p (nil: absent).
func readOne(ctx context.Context, sess *zk.Session, w *watchSet, p string) (*cluster.Item, error) {
	key := "data:" + p
	if w == nil || w.armed[key] {
		data, st, err := sess.Get(ctx, p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		it := item(sess, p, data, st)
		return &it, nil
	}
	data, st, ch, err := sess.GetW(ctx, p)
	if err == nil {
		w.arm(key, ch)
		it := item(sess, p, data, st)
		return &it, nil
	}
	if !errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	ok, _, ch, err := sess.ExistsW(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", p, err)
	}
	w.arm(key, ch)
	if ok {
		return readOne(ctx, sess, w, p) // created meanwhile: the exists watch sees its changes
	}
	return nil, nil
}

// readDir reads the znodes below dir, ordered by name. Without w, all
// reads are in flight at once: a winner reads the member records on its
// takeover's critical path, where one round trip per member would add up.
// A znode gone meanwhile is left out; any other error fails the read.
func readDir(ctx context.Context, sess *zk.Session, w *watchSet, dir string) ([]cluster.Item, error) {
	var names []string
	var err error
	key := "children:" + dir
	if w == nil || w.armed[key] {
		names, err = sess.Children(ctx, dir)
	} else {
		var ch <-chan zk.Event
		names, ch, err = sess.ChildrenW(ctx, dir)
		if err == nil {
			w.arm(key, ch)
		}
	}
	if errors.Is(err, zk.ErrNoNode) {
		err = nil
		if w != nil && !w.armed["exists:"+dir] {
			// No directory yet: watch for its creation.
			var ok bool
			var ch <-chan zk.Event
			ok, _, ch, err = sess.ExistsW(ctx, dir)
			if err == nil {
				w.arm("exists:"+dir, ch)
			}
			if err == nil && ok {
				return readDir(ctx, sess, w, dir) // created meanwhile
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	slices.Sort(names)
	if w != nil {
		var out []cluster.Item
		for _, n := range names {
			it, err := readOne(ctx, sess, w, path.Join(dir, n))
			if err != nil {
				return nil, err
			}
			if it != nil {
				out = append(out, *it)
			}
		}
		return out, nil
	}
	type got struct {
		data []byte
		st   zk.Stat
		err  error
	}
	res := make([]got, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i].data, res[i].st, res[i].err = sess.Get(ctx, path.Join(dir, n))
		}()
	}
	wg.Wait()
	var out []cluster.Item
	for i, n := range names {
		switch err := res[i].err; {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading %s: %w", path.Join(dir, n), err)
		}
		out = append(out, item(sess, path.Join(dir, n), res[i].data, res[i].st))
	}
	return out, nil
}

// conflict wraps a znode's compare-and-set refusal as cluster.ErrConflict.
func conflict(err error) error {
	if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: %w", cluster.ErrConflict, err)
	}
	return err
}

// create creates p with data (mode), creating its missing parents.
func create(ctx context.Context, sess *zk.Session, p string, data []byte, mode zk.CreateMode) (zk.Stat, error) {
	_, st, err := sess.Create(ctx, p, data, mode)
	if errors.Is(err, zk.ErrNoNode) {
		if err := sess.EnsurePath(ctx, path.Dir(p)); err != nil {
			return zk.Stat{}, err
		}
		_, st, err = sess.Create(ctx, p, data, mode)
	}
	return st, err
}

// commit applies ops on sess. guard, when set, is a term's election znode:
// the ops run in one multi with the check that it exists, so that a term
// that is over writes nothing (an error wrapping zk.ErrNoNode or
// zk.ErrSessionExpired). Else a single op runs alone (its Stat gives the
// write's zxid, the stamp), several in one multi (no stamp).
func commit(ctx context.Context, sess *zk.Session, guard string, ops []cluster.Op) (cluster.Committed, error) {
	var rest []cluster.Op
	for _, o := range ops {
		switch {
		case o.Kind == cluster.OpAbsent:
			// ZooKeeper cannot make a write depend on a znode's absence:
			// checked right before the write (cluster.Absent).
			ok, _, err := sess.Exists(ctx, o.Key)
			if err != nil {
				return cluster.Committed{}, err
			}
			if ok {
				return cluster.Committed{}, fmt.Errorf("%w: %s exists", cluster.ErrConflict, o.Key)
			}
			continue
		case o.Kind == cluster.OpDelete && !o.Rev.Exists() && !o.Rev.IsAny():
			return cluster.Committed{}, fmt.Errorf("zkcluster: deleting %s needs a revision read", o.Key)
		case o.Rev.IsAny() && (guard != "" || len(ops) > 1):
			return cluster.Committed{}, fmt.Errorf("zkcluster: %s: AnyRevision only in a commit of one op outside a term", o.Key)
		}
		rest = append(rest, o)
	}
	revs := make([]cluster.Revision, len(ops))
	if len(rest) < len(ops) {
		c, err := commit(ctx, sess, guard, rest)
		// Place the revisions of the ops written among ops'.
		j := 0
		for i, o := range ops {
			if o.Kind != cluster.OpAbsent && j < len(c.Revs) {
				revs[i] = c.Revs[j]
				j++
			}
		}
		return cluster.Committed{Revs: revs, Stamp: c.Stamp}, err
	}
	if guard == "" && len(ops) == 1 {
		return commitOne(ctx, sess, ops[0])
	}
	var zops []zk.Op
	if guard != "" {
		zops = append(zops, zk.CheckOp{Path: guard, Version: -1})
	}
	for i, o := range ops {
		v := version(o.Rev)
		switch o.Kind {
		case cluster.OpPut: // (no AnyRevision here: refused above)
			if o.Rev.Exists() {
				zops = append(zops, zk.SetOp{Path: o.Key, Data: o.Data, Version: v})
				revs[i] = revision(v + 1)
			} else {
				zops = append(zops, zk.CreateOp{Path: o.Key, Data: o.Data, Mode: zk.Persistent})
				revs[i] = revision(0)
			}
		case cluster.OpPutSession:
			if o.Rev.Exists() {
				zops = append(zops, zk.DeleteOp{Path: o.Key, Version: v})
			}
			zops = append(zops, zk.CreateOp{Path: o.Key, Data: o.Data, Mode: zk.Ephemeral})
			revs[i] = revision(0)
		case cluster.OpDelete:
			zops = append(zops, zk.DeleteOp{Path: o.Key, Version: v})
		}
	}
	err := sess.Multi(ctx, zops...)
	var me *zk.MultiError
	if errors.As(err, &me) && errors.Is(err, zk.ErrNoNode) {
		if c, ok := zops[me.Index].(zk.CreateOp); ok {
			// A create's parent is missing: make it, and try once more.
			if err := sess.EnsurePath(ctx, path.Dir(c.Path)); err != nil {
				return cluster.Committed{}, err
			}
			err = sess.Multi(ctx, zops...)
		}
	}
	if err == nil {
		return cluster.Committed{Revs: revs}, nil
	}
	if guard != "" && errors.As(err, &me) && me.Index == 0 {
		return cluster.Committed{}, fmt.Errorf("%w: %s (the term's election znode)", err, guard)
	}
	return cluster.Committed{}, conflict(err)
}

// commitOne applies one op on its own.
func commitOne(ctx context.Context, sess *zk.Session, o cluster.Op) (cluster.Committed, error) {
	v := version(o.Rev)
	one := func(rev cluster.Revision, stamp int64, err error) (cluster.Committed, error) {
		if err != nil {
			return cluster.Committed{}, conflict(err)
		}
		return cluster.Committed{Revs: []cluster.Revision{rev}, Stamp: stamp}, nil
	}
	switch o.Kind {
	case cluster.OpPut:
		if o.Rev.Exists() || o.Rev.IsAny() {
			st, err := sess.Set(ctx, o.Key, o.Data, v)
			if errors.Is(err, zk.ErrNoNode) && o.Rev.IsAny() {
				st, err = create(ctx, sess, o.Key, o.Data, zk.Persistent)
				return one(revision(st.Version), st.Czxid, err)
			}
			return one(revision(st.Version), st.Mzxid, err)
		}
		st, err := create(ctx, sess, o.Key, o.Data, zk.Persistent)
		return one(revision(st.Version), st.Czxid, err)
	case cluster.OpPutSession:
		switch {
		case o.Rev.IsAny():
			// Replace whatever is there: another writer in between is
			// replaced in turn.
			for attempt := 0; ; attempt++ {
				if err := sess.Delete(ctx, o.Key, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
					return cluster.Committed{}, err
				}
				st, err := create(ctx, sess, o.Key, o.Data, zk.Ephemeral)
				if errors.Is(err, zk.ErrNodeExists) && attempt < 3 {
					continue
				}
				return one(revision(st.Version), st.Czxid, err)
			}
		case o.Rev.Exists():
			err := sess.Multi(ctx, zk.DeleteOp{Path: o.Key, Version: v},
				zk.CreateOp{Path: o.Key, Data: o.Data, Mode: zk.Ephemeral})
			return one(revision(0), 0, err)
		}
		st, err := create(ctx, sess, o.Key, o.Data, zk.Ephemeral)
		return one(revision(st.Version), st.Czxid, err)
	case cluster.OpDelete:
		err := sess.Delete(ctx, o.Key, v)
		if errors.Is(err, zk.ErrNoNode) && o.Rev.IsAny() {
			err = nil
		}
		return one(cluster.Revision{}, 0, err)
	}
	return cluster.Committed{}, fmt.Errorf("zkcluster: unknown op %d", o.Kind)
}

// watcher is a watch loop's reader (cluster.Watcher): the one-shot
// watches armed on one session, one per znode and kind, re-armed only
// after it fired, so that a long watch does not pile up watches on records
// that do not change. Every round reads every record afresh (with a watch
// where none is armed, without one where it is): a value is as fresh as
// the read that returned it. A new session starts a new set (the old
// one's watches went with it).
type watcher struct {
	s    *Store
	sess *zk.Session
	set  *watchSet
	stop context.CancelFunc
}

// Read reads on the client's current session, with a new watch set when
// the session is new; a read cut short by the end of its session is read
// again at once on the next one.
func (w *watcher) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	for attempt := 0; ; attempt++ {
		sess, err := w.s.session(ctx)
		if err != nil {
			return nil, err
		}
		if sess != w.sess {
			w.Close()
			var sctx context.Context
			sctx, w.stop = context.WithCancel(context.Background())
			w.sess, w.set = sess, newWatchSet(sctx)
		}
		res, err := read(ctx, sess, w.set, qs)
		select {
		case <-sess.Done():
			if err != nil && attempt == 0 {
				continue
			}
		default:
		}
		return res, err
	}
}

// Wait returns at the first watch that fired, or nil when the session
// ended (the next Read starts a new set on the next session).
func (w *watcher) Wait(ctx context.Context) error {
	if w.set == nil {
		return nil
	}
	select {
	case key := <-w.set.fired:
		w.set.forget(key)
		w.set.drain()
		return nil
	case <-w.sess.Done():
		w.Close()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *watcher) Close() {
	if w.stop != nil {
		w.stop()
	}
	w.sess, w.set, w.stop = nil, nil, nil
}
