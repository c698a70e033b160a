package zkcluster

import (
	"context"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/zktest"
)

// The member list a watch held is used by ReadMembers only while that
// watch still reports changes. A watch that ended (the leader's member
// watch for preemption ends with its term; the leader view runs only
// with a follow hook) bumps nothing any more, so its last list used to
// stay "valid" on the session for good: a node that won again later took
// the decision at its win (priorities, positions under election.max_lag,
// who campaigns) on the records of its previous term. Found by an
// independent review.
func TestReadMembersAfterTheWatchEndedReads(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	s, c := newStore(t, zkc, "a", "inst-a")
	other, _ := newStore(t, zkc, "x", "inst-x")
	if err := other.PublishMember(ctx, member("x", "inst-x", "standby")); err != nil {
		t.Fatal(err)
	}
	seen := make(chan []cluster.Member, 100)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.WatchMembers(wctx, func(ms []cluster.Member) { seen <- ms })
	}()
	select {
	case <-seen:
	case <-time.After(20 * time.Second):
		t.Fatal("the member watch reported nothing")
	}
	stop()
	<-done

	if err := other.PublishMember(ctx, member("x", "inst-x", "out")); err != nil {
		t.Fatal(err)
	}
	tm := elect(t, s, c, "a")
	ms, err := tm.ReadMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.NodeID == "x" && m.State != "out" {
			t.Fatalf("ReadMembers after the member watch ended names x %s, want out (its record now)", m.State)
		}
	}
}
