package zkcluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// ZooKeeper's opcodes of the reads WatchLeader makes.
const (
	opExists       = 3
	opGetData      = 4
	opGetChildren  = 8
	opGetChildren2 = 12
)

// putBreadcrumb writes the breadcrumb naming id at epoch over whatever is
// there (the test plays every leader; no election guard).
func putBreadcrumb(t *testing.T, c *zk.Client, id string, epoch int64) {
	t.Helper()
	b, err := breadcrumb.Encode(breadcrumb.Record{NodeID: id, Host: "host-" + id, Epoch: epoch, Since: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, c, b)
}

func putRaw(t *testing.T, c *zk.Client, data []byte) {
	t.Helper()
	ctx := t.Context()
	sess := session(t, c)
	if err := sess.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Set(ctx, testLayout.Breadcrumb(), data, -1); errors.Is(err, zk.ErrNoNode) {
		_, _, err = sess.Create(ctx, testLayout.Breadcrumb(), data, zk.Persistent)
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

func deleteBreadcrumb(t *testing.T, c *zk.Client) {
	t.Helper()
	if err := session(t, c).Delete(t.Context(), testLayout.Breadcrumb(), -1); err != nil {
		t.Fatal(err)
	}
}

func leaderMember(id, instance string, epoch int64) cluster.Member {
	m := member(id, instance, cluster.StateLeader)
	m.Role, m.Epoch, m.ServiceAddress = "leader", epoch, "svc-"+id+":6379"
	return m
}

// leaderWatch runs WatchLeader on s and records what it delivers.
type leaderWatch struct {
	t    *testing.T
	mu   sync.Mutex
	got  []*cluster.Leader
	more chan struct{}
	done chan error
}

func watchLeader(t *testing.T, ctx context.Context, s *Store) *leaderWatch {
	w := &leaderWatch{t: t, more: make(chan struct{}, 1), done: make(chan error, 1)}
	go func() {
		w.done <- s.WatchLeader(ctx, func(l *cluster.Leader) {
			w.mu.Lock()
			w.got = append(w.got, l)
			w.mu.Unlock()
			select {
			case w.more <- struct{}{}:
			default:
			}
		})
	}()
	return w
}

func (w *leaderWatch) calls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got)
}

// next waits for the delivery after the first n ones and returns it; it
// fails unless that delivery is the last one so far (no stray calls).
func (w *leaderWatch) next(n int, what string) *cluster.Leader {
	w.t.Helper()
	deadline := time.After(20 * time.Second)
	for w.calls() <= n {
		select {
		case <-w.more:
		case <-deadline:
			w.t.Fatalf("WatchLeader did not deliver %s (%d deliveries so far)", what, n)
		}
	}
	time.Sleep(300 * time.Millisecond) // a stray second delivery shows up meanwhile
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.got) != n+1 {
		w.t.Fatalf("waiting for %s: %d deliveries after %d, want one: %+v", what, len(w.got)-n, n, w.got[n:])
	}
	return w.got[n]
}

// quiet fails if anything is delivered after the first n within d.
func (w *leaderWatch) quiet(n int, d time.Duration, why string) {
	w.t.Helper()
	time.Sleep(d)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.got) != n {
		w.t.Fatalf("%s: WatchLeader delivered %+v, want nothing", why, w.got[n:])
	}
}

func wantLeader(t *testing.T, got *cluster.Leader, id string, epoch int64) {
	t.Helper()
	if got == nil || got.NodeID != id || got.Epoch != epoch || got.Host != "host-"+id || got.ServiceAddress != "svc-"+id+":6379" {
		t.Fatalf("leader = %+v, want %s at epoch %d with its host and service address", got, id, epoch)
	}
}

func wantNone(t *testing.T, got *cluster.Leader, why string) {
	t.Helper()
	if got != nil {
		t.Fatalf("%s: leader = %+v, want none", why, got)
	}
}

// WatchLeader follows the promoted leader through every way it changes:
// member records (leader state, other fields, gone), the breadcrumb
// (written, deleted, a new epoch, unreadable), a disconnect (nothing
// delivered for it; what changed meanwhile is delivered after it) and an
// expiry of the watcher's session; Leader reads the same.
func TestWatchLeader(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// The watcher reaches ZooKeeper through a proxy that can cut it off.
	// A frame proxy in front of it counts the watcher's reads.
	proxy := netproxy.New(t, func() string { return zkc.Servers[0].Addr() })
	var reads atomic.Int64
	counter := zktest.NewFrameProxy(t, proxy.Addr(), func(f *zktest.Frame) zktest.Action {
		switch f.Op() {
		case opExists, opGetData, opGetChildren, opGetChildren2:
			reads.Add(1)
		}
		return zktest.Forward
	})
	wc, err := zk.NewClient(zk.Config{Servers: []string{counter.Addr()}, SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wc.Close)
	ws, err := New(Config{Layout: testLayout}, Deps{Client: wc})
	if err != nil {
		t.Fatal(err)
	}
	a, ac := newStore(t, zkc, "a", "inst-a")
	b, _ := newStore(t, zkc, "b", "inst-b")

	w := watchLeader(t, ctx, ws)
	n := 0
	wantNone(t, w.next(n, "the first value"), "empty cluster")
	n++

	// a campaigns: its breadcrumb comes before its promotion.
	if err := a.PublishMember(ctx, member("a", "inst-a", "fencing")); err != nil {
		t.Fatal(err)
	}
	putBreadcrumb(t, ac, "a", 1)
	w.quiet(n, time.Second, "a is still fencing")
	if err := a.PublishMember(ctx, leaderMember("a", "inst-a", 1)); err != nil {
		t.Fatal(err)
	}
	wantLeader(t, w.next(n, "a promoted"), "a", 1)
	n++
	if l, err := ws.Leader(ctx); err != nil {
		t.Fatal(err)
	} else {
		wantLeader(t, l, "a", 1)
	}

	// A field of the same leadership changes; a record of another node
	// comes and changes without touching the leader.
	m := leaderMember("a", "inst-a", 1)
	m.Host = "host-a2"
	if err := a.PublishMember(ctx, m); err != nil {
		t.Fatal(err)
	}
	if l := w.next(n, "a's new host"); l == nil || l.Host != "host-a2" {
		t.Fatalf("after a's host changed: %+v", l)
	}
	n++
	if err := a.PublishMember(ctx, leaderMember("a", "inst-a", 1)); err != nil {
		t.Fatal(err)
	}
	wantLeader(t, w.next(n, "a's host back"), "a", 1)
	n++
	if err := b.PublishMember(ctx, member("b", "inst-b", "standby")); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishMember(ctx, member("b", "inst-b", "follower")); err != nil {
		t.Fatal(err)
	}
	w.quiet(n, time.Second, "only b's record changed")

	// a demotes (still named by the breadcrumb): no leader; promoted again.
	if err := a.PublishMember(ctx, member("a", "inst-a", "standby")); err != nil {
		t.Fatal(err)
	}
	wantNone(t, w.next(n, "a in standby"), "a in standby")
	n++
	if err := a.PublishMember(ctx, leaderMember("a", "inst-a", 1)); err != nil {
		t.Fatal(err)
	}
	wantLeader(t, w.next(n, "a promoted again"), "a", 1)
	n++

	// A graceful handoff deletes the breadcrumb: no leader from then on.
	deleteBreadcrumb(t, ac)
	wantNone(t, w.next(n, "no leader without a breadcrumb"), "breadcrumb deleted")
	n++
	if l, err := ws.Leader(ctx); err != nil || l != nil {
		t.Fatalf("Leader without a breadcrumb = %+v, %v; want none", l, err)
	}

	// b takes over at epoch 2: while it fences, a's stale leader record
	// does not count; then b is promoted.
	putBreadcrumb(t, ac, "b", 2)
	w.quiet(n, time.Second, "b fencing")
	if err := b.PublishMember(ctx, leaderMember("b", "inst-b", 2)); err != nil {
		t.Fatal(err)
	}
	wantLeader(t, w.next(n, "b promoted at epoch 2"), "b", 2)
	n++

	// An unreadable breadcrumb names nobody.
	putRaw(t, ac, []byte("garbage"))
	wantNone(t, w.next(n, "no leader with an unreadable breadcrumb"), "unreadable breadcrumb")
	n++
	if l, err := ws.Leader(ctx); err != nil || l != nil {
		t.Fatalf("Leader with an unreadable breadcrumb = %+v, %v; want none", l, err)
	}
	putBreadcrumb(t, ac, "b", 2)
	wantLeader(t, w.next(n, "b again"), "b", 2)
	n++

	// Nothing changes: nothing is read (the watches wait, no polling).
	before := reads.Load()
	w.quiet(n, 2*time.Second, "nothing changed")
	if r := reads.Load() - before; r != 0 {
		t.Fatalf("%d reads in 2s without a change", r)
	}

	// A disconnect shorter than the session: nothing is delivered for it,
	// neither during it nor after the reconnect.
	sess := session(t, wc)
	proxy.Blackhole(true)
	proxy.Reset()
	waitFor(t, 10*time.Second, "the watcher to notice the disconnect", func() bool { return !ws.Connected() })
	w.quiet(n, time.Second, "disconnected, nothing changed")
	proxy.Blackhole(false)
	waitFor(t, 10*time.Second, "the watcher to reconnect", ws.Connected)
	w.quiet(n, time.Second, "reconnected, nothing changed")
	if session(t, wc) != sess {
		t.Fatal("the watcher's session did not survive the short disconnect")
	}
	// What changes during a disconnect is delivered after it.
	proxy.Blackhole(true)
	proxy.Reset()
	waitFor(t, 10*time.Second, "the watcher to notice the disconnect", func() bool { return !ws.Connected() })
	deleteBreadcrumb(t, ac)
	w.quiet(n, 500*time.Millisecond, "disconnected")
	proxy.Blackhole(false)
	wantNone(t, w.next(n, "the breadcrumb deleted during the disconnect"), "after the reconnect")
	n++
	if session(t, wc) != sess {
		t.Fatal("the watcher's session did not survive the short disconnect")
	}

	// The watcher's session expires: the new one reads everything again,
	// including what changed in between (held back from the server).
	expire(t, zkc, wc)
	proxy.Blackhole(true)
	proxy.Reset()
	c, _ := newStore(t, zkc, "c", "inst-c")
	putBreadcrumb(t, ac, "c", 3)
	if err := c.PublishMember(ctx, leaderMember("c", "inst-c", 3)); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(false)
	wantLeader(t, w.next(n, "c, promoted while the watcher's session was expiring"), "c", 3)
	n++
	// ... and its watches are armed again on the new session.
	if err := c.PublishMember(ctx, member("c", "inst-c", "standby")); err != nil {
		t.Fatal(err)
	}
	wantNone(t, w.next(n, "c in standby, on the new session"), "c in standby")
	n++

	cancel()
	select {
	case err := <-w.done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WatchLeader returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchLeader did not return when its context ended")
	}
}
