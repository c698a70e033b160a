package backendtest

import (
	"errors"
	"path"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// primitives is n's record store, the backend's primitives under its
// records.
func primitives(t *testing.T, n *node) (cluster.Backend, cluster.Layout) {
	t.Helper()
	s, ok := n.rec.(interface {
		Backend() cluster.Backend
		Layout() cluster.Layout
	})
	if !ok {
		t.Fatalf("node %s's Records (%T) are no cluster.Store", n.id, n.rec)
	}
	return s.Backend(), s.Layout()
}

// readItem reads key on r (nil: absent).
func readItem(t *testing.T, r cluster.Reader, key string) *cluster.Item {
	t.Helper()
	res, err := r.Read(ctxT(t), cluster.One(key))
	if err != nil {
		t.Fatalf("Read %s: %v", key, err)
	}
	return res[0].Item()
}

// Primitives: the record store every record rule is written on.
// Compare-and-set: a put at the zero revision creates and fails on an
// existing record; a write at a stale revision fails and changes nothing;
// a commit of several ops applies all or none; AnyRevision does not
// compare. A directory lists the records directly below it, by name. A
// session record reads as the writer's own session and another's to
// others, and goes with its session, not before. A watcher's Wait returns
// after a change of what it read.
func testPrimitives(t *testing.T, b Backend) {
	ar := newArena(t, b)
	w := ar.add("w")
	kw, l := primitives(t, w)
	ctx := ctxT(t)
	dir := path.Join(l.Dir(), "kvtest")
	k, k2 := path.Join(dir, "k"), path.Join(dir, "k2")
	conflict := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, cluster.ErrConflict) {
			t.Fatalf("%s = %v; want ErrConflict", what, err)
		}
	}
	want := func(what, key, data string) *cluster.Item {
		t.Helper()
		it := readItem(t, kw, key)
		if data == "" {
			if it != nil {
				t.Fatalf("%s: %s holds %q; want it absent", what, key, it.Data)
			}
			return nil
		}
		if it == nil || string(it.Data) != data || !it.Rev.Exists() {
			t.Fatalf("%s: %s = %+v; want %q", what, key, it, data)
		}
		return it
	}

	c, err := kw.Commit(ctx, cluster.Put(k, []byte("1"), cluster.Revision{}))
	if err != nil || len(c.Revs) != 1 || !c.Revs[0].Exists() {
		t.Fatalf("create = %+v, %v", c, err)
	}
	rev1 := c.Revs[0]
	if it := want("created", k, "1"); it.Rev != rev1 || it.Owner != cluster.Persistent || it.Name != "k" {
		t.Fatalf("created record %+v; want revision %v, persistent, named k", it, rev1)
	}
	_, err = kw.Commit(ctx, cluster.Put(k, []byte("x"), cluster.Revision{}))
	conflict("create over an existing record", err)
	c, err = kw.Commit(ctx, cluster.Put(k, []byte("2"), rev1))
	if err != nil || c.Revs[0] == rev1 {
		t.Fatalf("put at the revision read = %+v, %v; want a new revision", c, err)
	}
	rev2 := c.Revs[0]
	_, err = kw.Commit(ctx, cluster.Put(k, []byte("x"), rev1))
	conflict("put at a stale revision", err)
	want("after a stale put", k, "2")

	// All or none.
	_, err = kw.Commit(ctx, cluster.Put(k2, []byte("y"), cluster.Revision{}), cluster.Put(k, []byte("x"), rev1))
	conflict("a commit with one stale op", err)
	want("after a failed commit", k2, "")
	want("after a failed commit", k, "2")

	// A directory lists what is directly below it, by name.
	if _, err := kw.Commit(ctx, cluster.Put(path.Join(dir, "a"), []byte("a"), cluster.Revision{})); err != nil {
		t.Fatalf("create %s/a: %v", dir, err)
	}
	res, err := kw.Read(ctx, cluster.Below(dir), cluster.Below(path.Join(dir, "none")))
	if err != nil {
		t.Fatalf("Read %s: %v", dir, err)
	}
	var names []string
	for _, it := range res[0].Items {
		names = append(names, it.Name)
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "k" || len(res[1].Items) != 0 || string(res[0].Items[0].Data) != "a" {
		t.Fatalf("Read below %s = %v and %d below a missing directory; want [a k] and none", dir, names, len(res[1].Items))
	}

	if res, err := kw.Read(ctx, cluster.Names(dir)); err != nil || len(res[0].Items) != 2 || res[0].Items[0].Name != "a" {
		t.Fatalf("Read of the names below %s = %+v, %v; want a and k", dir, res, err)
	}

	// Absent: a commit that requires a record's absence.
	_, err = kw.Commit(ctx, cluster.Absent(k), cluster.Put(k2, []byte("y"), cluster.Revision{}))
	conflict("a commit requiring an existing record's absence", err)
	want("after a failed Absent", k2, "")
	if _, err := kw.Commit(ctx, cluster.Absent(path.Join(dir, "none")), cluster.Put(path.Join(dir, "b"), []byte("b"), cluster.Revision{})); err != nil {
		t.Fatalf("a commit requiring an absent record's absence: %v", err)
	}

	// Deletes.
	if _, err := kw.Commit(ctx, cluster.Delete(k, cluster.Revision{})); err == nil {
		t.Fatal("a delete at the zero revision (nothing read) succeeded")
	}
	_, err = kw.Commit(ctx, cluster.Delete(k, rev1))
	conflict("delete at a stale revision", err)
	if _, err := kw.Commit(ctx, cluster.Delete(k, rev2)); err != nil {
		t.Fatalf("delete at the revision read: %v", err)
	}
	want("deleted", k, "")
	if _, err := kw.Commit(ctx, cluster.Delete(k, cluster.AnyRevision)); err != nil {
		t.Fatalf("delete of an absent record at any revision: %v", err)
	}

	// A watcher wakes at a change of what it read.
	wt := kw.Watch(ctx)
	defer wt.Close()
	if _, err := wt.Read(ctx, cluster.One(k2), cluster.Below(dir)); err != nil {
		t.Fatalf("watcher Read: %v", err)
	}
	woke := make(chan error, 1)
	go func() { woke <- wt.Wait(ctx) }()
	if _, err := kw.Commit(ctx, cluster.Put(k2, []byte("z"), cluster.Revision{})); err != nil {
		t.Fatalf("create %s: %v", k2, err)
	}
	select {
	case err := <-woke:
		if err != nil && ctx.Err() != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(watchTimeout):
		t.Fatalf("Wait did not return %v after a change of a record it read", watchTimeout)
	}
	if it := readItem(t, wt, k2); it == nil || string(it.Data) != "z" {
		t.Fatalf("watcher Read after the change = %+v; want z", it)
	}

	// Session records: the writer's own, another's to others; they go
	// with the session.
	na := ar.campaign("a")
	ha := ar.nextBy(t, "a")
	ka, _ := primitives(t, na)
	sk := path.Join(dir, "session")
	if _, err := ka.Commit(ctx, cluster.PutSession(sk, []byte("mine"), cluster.Revision{})); err != nil {
		t.Fatalf("PutSession: %v", err)
	}
	if it := readItem(t, ka, sk); it == nil || it.Owner != cluster.OwnSession {
		t.Fatalf("session record as its writer reads it: %+v; want its own session's", it)
	}
	if it := readItem(t, kw, sk); it == nil || it.Owner != cluster.OtherSession {
		t.Fatalf("session record as another node reads it: %+v; want another session's", it)
	}
	if it := readItem(t, kw, sk); it != nil {
		if _, err := ka.Commit(ctx, cluster.Put(sk, []byte("still mine"), it.Rev)); err != nil {
			t.Fatalf("put over a session record: %v", err)
		}
	}
	if it := readItem(t, ka, sk); it == nil || it.Owner != cluster.OwnSession {
		t.Fatalf("session record after a put at its revision: %+v; want it still its session's", it)
	}
	// A node's republished member record is written in place: it stays
	// its session's, and its revision moves on (a delete and create
	// would wake every watcher of the directory).
	publish(t, na, "standby", 0)
	first := readItem(t, ka, l.Member("a"))
	publish(t, na, "promoting", ha.Epoch())
	second := readItem(t, ka, l.Member("a"))
	if first == nil || second == nil || second.Rev == first.Rev || second.Owner != cluster.OwnSession {
		t.Fatalf("member record published twice: %+v then %+v; want it written in place, still its session's", first, second)
	}
	b.EndSession(t, ha.Node)
	waitFor(t, watchTimeout, "the session record gone with its session", func() bool {
		return readItem(t, kw, sk) == nil
	})
}
