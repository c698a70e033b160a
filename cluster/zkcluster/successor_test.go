package zkcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/test/zktest"
	"github.com/failoverd/failoverd/zk"
)

// campaignFair starts id's elector in s (fair mode) and returns its terms as
// they are won; each is held until the test ends or stop is called.
func campaignFair(t *testing.T, s *Store, c *zk.Client, id string) (terms <-chan *term, stop func()) {
	t.Helper()
	el, err := election.New(election.Config{Dir: s.Layout().ElectionDir(), NodeID: id, Mode: election.Fair}, election.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	won := make(chan *term, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Elector(el).Campaign(ctx, func(ctx context.Context, tm cluster.Term) {
			won <- tm.(*term)
			<-ctx.Done()
		})
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return won, stop
}

// nextTerm returns the next term won on ch (campaignFair's).
func nextTerm(t *testing.T, ch <-chan *term) *term {
	t.Helper()
	select {
	case tm := <-ch:
		return tm
	case <-time.After(30 * time.Second):
		t.Fatal("not elected")
	}
	return nil
}

// waitQueueLen waits until the election queue holds n candidates, read on adm.
func waitQueueLen(t *testing.T, adm *zk.Session, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, "the election queue", func() bool {
		kids, err := adm.Children(t.Context(), testLayout.ElectionDir())
		return err == nil && len(kids) == n
	})
}

// Successor and Finish against real ZooKeeper: the leader predicts the
// next candidate (its epoch is its znode's czxid, its addresses come from
// its member record); Finish with it leaves that candidate's record as the
// breadcrumb in the same multi that deletes the leader's znode, and the
// candidate then wins at exactly that epoch. A candidate that left before
// Finish makes Finish delete the breadcrumb instead.
func TestFinishNamesTheSuccessor(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	_, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	exists := func(p string) bool {
		ok, _, err := adm.Exists(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	sa, ca := newStore(t, zkc, "a", "inst-a")
	sb, cb := newStore(t, zkc, "b", "inst-b")
	mb := member("b", "inst-b", "standby")
	mb.AdminURL, mb.ServiceAddress = "http://b:9101", "10.0.0.2:6379"
	if err := sb.PublishMember(ctx, mb); err != nil {
		t.Fatal(err)
	}
	ta, _ := campaignFair(t, sa, ca, "a")
	a := nextTerm(t, ta)
	if next, err := a.Successor(ctx); err != nil || next != nil {
		t.Fatalf("Successor with nobody waiting = %+v, %v; want nil, nil", next, err)
	}
	tb, stopB := campaignFair(t, sb, cb, "b")
	waitQueueLen(t, adm, 2)
	next, err := a.Successor(ctx)
	if err != nil || next == nil {
		t.Fatalf("Successor = %+v, %v", next, err)
	}
	_, st, err := adm.Get(ctx, next.Entry)
	if err != nil {
		t.Fatal(err)
	}
	if r := next.Record; r.NodeID != "b" || r.Host != mb.Host || r.AdminURL != mb.AdminURL || r.ServiceAddress != mb.ServiceAddress || r.Epoch != st.Czxid {
		t.Fatalf("Successor record %+v, want b's addresses and epoch %d (its znode's czxid)", r, st.Czxid)
	}

	// b leaves before a finishes: the breadcrumb goes, as without a successor.
	v, err := a.WriteBreadcrumb(ctx, breadcrumb.Record{NodeID: "a", Host: "host-a", Epoch: a.Epoch(), Since: time.Now().UTC()}, -1)
	if err != nil {
		t.Fatal(err)
	}
	stopB()
	waitQueueLen(t, adm, 1)
	if err := a.Finish(ctx, v, next); err != nil {
		t.Fatalf("Finish naming a successor that left = %v", err)
	}
	if exists(testLayout.Breadcrumb()) || exists(a.l.Path) {
		t.Fatal("Finish naming a successor that left kept the breadcrumb or our znode")
	}
	a = nextTerm(t, ta) // a campaigns again and wins

	// b waits: Finish names it, and b wins at the epoch named.
	tb, _ = campaignFair(t, sb, cb, "b")
	waitQueueLen(t, adm, 2)
	if next, err = a.Successor(ctx); err != nil || next == nil || next.Record.NodeID != "b" {
		t.Fatalf("Successor = %+v, %v; want b", next, err)
	}
	v, err = a.WriteBreadcrumb(ctx, breadcrumb.Record{NodeID: "a", Host: "host-a", Epoch: a.Epoch(), Since: time.Now().UTC()}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Finish(ctx, v+1, next); !errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("Finish at a wrong breadcrumb version = %v, want ErrBadVersion", err)
	}
	if err := a.Finish(ctx, v, next); err != nil {
		t.Fatal(err)
	}
	b := nextTerm(t, tb)
	if p, ok := b.l.Prefetched.(*prefetched); !ok || p == nil {
		t.Fatalf("b won without the reads started when a's znode went (%T)", b.l.Prefetched)
	}
	if b.Epoch() != next.Record.Epoch {
		t.Fatalf("b won at epoch %d, the record names %d", b.Epoch(), next.Record.Epoch)
	}
	got, gv, err := b.ReadBreadcrumb(ctx)
	if err != nil || got.NodeID != "b" || got.Epoch != b.Epoch() || got.AdminURL != mb.AdminURL || gv != v+1 {
		t.Fatalf("b reads %+v@%d, %v; want its own record at version %d", got, gv, err, v+1)
	}
	if exists(a.l.Path) {
		t.Fatal("Finish kept a's znode")
	}
	// The prefetched read is taken once: a second read sees a change.
	if _, err := adm.Set(ctx, testLayout.Breadcrumb(), []byte(`{not json`), -1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.ReadBreadcrumb(ctx); err == nil {
		t.Fatal("a second ReadBreadcrumb returned the prefetched record again")
	}
	enc, _ := breadcrumb.Encode(got)
	st, err = adm.Set(ctx, testLayout.Breadcrumb(), enc, -1)
	if err != nil {
		t.Fatal(err)
	}
	gv = st.Version
	// b's own Finish deletes it (a waits again, and is named).
	if err := b.Finish(ctx, gv, nil); err != nil {
		t.Fatal(err)
	}
	if exists(testLayout.Breadcrumb()) {
		t.Fatal("b's Finish kept the breadcrumb")
	}
}

// In unfair mode nobody is next: whoever creates the lock first leads.
func TestSuccessorUnfairIsNobody(t *testing.T) {
	zkc := zktest.Start(t, 1)
	s, c := newStore(t, zkc, "a", "inst-a")
	tm := electIn(t, s, c, "a", election.Unfair)
	if next, err := tm.Successor(t.Context()); err != nil || next != nil {
		t.Fatalf("unfair Successor = %+v, %v; want nil, nil", next, err)
	}
}

// A term's ReadMembers takes the list the member watches hold while none
// of them fired since it was read, and reads again once one did: after a
// record changes, it returns the new record (never the old one once the
// watch has delivered the change).
func TestReadMembersUsesTheWatchedList(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	s, c := newStore(t, zkc, "a", "inst-a")
	other, _ := newStore(t, zkc, "x", "inst-x")
	if err := other.PublishMember(ctx, member("x", "inst-x", "standby")); err != nil {
		t.Fatal(err)
	}
	seen := make(chan []cluster.Member, 100)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.WatchMembers(wctx, func(ms []cluster.Member) { seen <- ms })
	state := func(ms []cluster.Member) string {
		for _, m := range ms {
			if m.NodeID == "x" {
				return m.State
			}
		}
		return ""
	}
	waitSeen := func(want string) {
		t.Helper()
		for end := time.After(20 * time.Second); ; {
			select {
			case ms := <-seen:
				if state(ms) == want {
					return
				}
			case <-end:
				t.Fatalf("the member watch did not report x %s", want)
			}
		}
	}
	waitSeen("standby")
	tm := elect(t, s, c, "a")
	if _, ok := s.cachedMembers(tm.l.Session); !ok {
		t.Fatal("no watched member list on the term's session")
	}
	ms, err := tm.ReadMembers(ctx)
	if err != nil || state(ms) != "standby" {
		t.Fatalf("ReadMembers = %+v, %v; want x standby", ms, err)
	}
	if err := other.PublishMember(ctx, member("x", "inst-x", "leader")); err != nil {
		t.Fatal(err)
	}
	waitSeen("leader")
	ms, err = tm.ReadMembers(ctx)
	if err != nil || state(ms) != "leader" {
		t.Fatalf("ReadMembers after the change = %+v, %v; want x leader", ms, err)
	}
	// A change whose event has arrived invalidates the list at once, before
	// the watch's next read: ReadMembers then reads.
	gen := s.memberGen.Load()
	if err := other.PublishMember(ctx, member("x", "inst-x", "demoting")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the member watch's event", func() bool { return s.memberGen.Load() != gen })
	ms, err = tm.ReadMembers(ctx)
	if err != nil || state(ms) != "demoting" {
		t.Fatalf("ReadMembers right after the event = %+v, %v; want x demoting", ms, err)
	}
}
