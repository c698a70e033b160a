package etcdcluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// Every read the daemon's safety rests on is linearizable: through a
// member cut off from its quorum (its client still connected) each one
// fails instead of answering from the member's own copy, as ZooKeeper's
// reads after a sync do. The leader's term reads (breadcrumb, failover
// request, members, leader position), the leader view (Leader, Fresh),
// and the records a standby acts on (pause, history, queue) are each
// tried; a serializable read through the same member answers, so the
// member does serve what it can alone and the failures are the reads'.
func TestReadsNeedTheQuorum(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	x := (c.Leader() + 1) % len(c.Members) // a follower
	l := newLayout()
	a := newNode(t, []string{c.Members[x].Endpoint()}, l, "a")
	ch, _ := a.campaign(t, Fair)
	w := next(t, ch)
	tm := w.t
	ctx := ctxT(t)
	if _, err := tm.WriteBreadcrumb(ctx, crumb("a", tm.Epoch()), cluster.Revision{}); err != nil {
		t.Fatal(err)
	}
	if err := a.s.PublishMember(ctx, member("a", cluster.StateLeader, tm.Epoch())); err != nil {
		t.Fatal(err)
	}

	reads := []struct {
		name string
		read func(context.Context) error
	}{
		{"Term.ReadBreadcrumb", func(ctx context.Context) error { _, _, err := tm.ReadBreadcrumb(ctx); return err }},
		{"Term.ReadFailover", func(ctx context.Context) error { _, err := tm.ReadFailover(ctx); return err }},
		{"Term.ReadMembers", func(ctx context.Context) error { _, err := tm.ReadMembers(ctx); return err }},
		{"Term.ReadLeaderPosition", func(ctx context.Context) error { _, err := tm.ReadLeaderPosition(ctx); return err }},
		{"Store.Leader", func(ctx context.Context) error { _, err := a.s.Leader(ctx); return err }},
		{"Store.Fresh", a.s.Fresh},
		{"Store.ReadPause", func(ctx context.Context) error { _, err := a.s.ReadPause(ctx); return err }},
		{"Store.History", func(ctx context.Context) error { _, err := a.s.History(ctx); return err }},
		{"Store.Queue", func(ctx context.Context) error { _, err := a.s.Queue(ctx); return err }},
	}
	try := func(r func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		return r(ctx)
	}
	for _, r := range reads {
		if err := try(r.read); err != nil {
			t.Fatalf("%s through a member of a whole cluster: %v", r.name, err)
		}
	}

	c.Isolate(x)
	defer c.Heal(x)
	serializable := func(ctx context.Context) error {
		_, err := a.cli.Get(ctx, l.Breadcrumb(), clientv3.WithSerializable())
		return err
	}
	if err := try(serializable); err != nil {
		t.Fatalf("a serializable read through the isolated member: %v; want its own copy (the test shows nothing otherwise)", err)
	}
	for _, r := range reads {
		if err := try(r.read); err == nil {
			t.Errorf("%s through a member cut off from its quorum = nil; want an error (a read from the member's own copy)", r.name)
		}
	}
}

// The leader view reads; it never assumes it saw every change. A view
// through member X shows a's leadership; X is cut off while a hands over
// to b and b to c, and the revisions of all of it are compacted, so no
// watch can replay what X's clients missed. Once X is back the view shows
// c, as a linearizable read does, and every leader it ever showed was one
// a read found (a, then c: never a leader that was not).
func TestLeaderViewReadsAfterGaps(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	adm := admin(t, c)
	x := (c.Leader() + 1) % len(c.Members)
	var others []string
	for i, m := range c.Members {
		if i != x {
			others = append(others, m.Endpoint())
		}
	}
	l := newLayout()
	v := newNode(t, []string{c.Members[x].Endpoint()}, l, "v")
	var mu sync.Mutex
	var interruptions int
	v.s.watchInterrupted = func(error) {
		mu.Lock()
		interruptions++
		mu.Unlock()
	}
	view := watch(t, "WatchLeader", v.s.WatchLeader, showLeader)
	view.became(t, "none")

	// lead makes id the promoted leader (breadcrumb and member record)
	// and returns its term, through the members other than X.
	var prev *won
	var prevRev cluster.Revision
	var prevStop func()
	lead := func(id string) string {
		t.Helper()
		n := newNode(t, others, l, id)
		ch, stop := n.campaign(t, Fair)
		if prev != nil {
			waitFor(t, 20*time.Second, id+" queued behind "+prev.node, func() bool {
				q, err := n.s.Queue(ctxT(t))
				return err == nil && len(q) == 2
			})
			if err := prev.t.Finish(ctxT(t), prevRev); err != nil {
				t.Fatalf("Finish of %s: %v", prev.node, err)
			}
			prevStop() // for good
		}
		w := next(t, ch)
		rev, err := w.t.WriteBreadcrumb(ctxT(t), crumb(id, w.t.Epoch()), cluster.Revision{})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.s.PublishMember(ctxT(t), member(id, cluster.StateLeader, w.t.Epoch())); err != nil {
			t.Fatal(err)
		}
		prev, prevRev, prevStop = w, rev, stop
		return fmt.Sprintf("%s@%d", id, w.t.Epoch())
	}
	first := lead("a")
	view.became(t, first)

	c.Isolate(x)
	waitFor(t, 30*time.Second, "the view's watch interrupted on the isolated member", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return interruptions > 0
	})
	middle := lead("b")
	last := lead("c")
	r, err := adm.Get(ctxT(t), l.Breadcrumb())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Compact(ctxT(t), r.Header.Revision); err != nil {
		t.Fatal(err)
	}
	c.Heal(x)
	// The view shows what a read shows: c, unless c's own lease lapsed
	// meanwhile (a loaded machine), and then "none" for both.
	var read string
	deadline := time.Now().Add(60 * time.Second)
	for {
		ld, err := v.s.Leader(ctxT(t))
		got := view.all()
		if err == nil {
			read = showLeader(ld)
			if got[len(got)-1] == read {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view delivered %q; a read of the leader says %s (%v)", got, read, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if read != last && read != "none" {
		t.Errorf("a read of the leader after the handovers: %s; want %s", read, last)
	}
	for _, got := range view.all() {
		if got != "none" && got != first && got != last && got != middle {
			t.Errorf("the view showed %s, a leader no read found (views: %q)", got, view.all())
		}
	}
	t.Logf("views delivered: %q (b's %s happened while the member was cut off)", view.all(), middle)
}
