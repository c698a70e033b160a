package zkcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// campaign joins s's election for node id in the background; the first
// term won arrives on the channel. The campaign ends with the test.
func campaign(t *testing.T, s *Store, c *zk.Client, id string) <-chan *wonTerm {
	t.Helper()
	el, err := election.New(election.Config{Dir: s.Layout().ElectionDir(), NodeID: id, Mode: election.Fair}, election.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	won := make(chan *wonTerm, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Elector(el).Campaign(ctx, func(ctx context.Context, tm cluster.Term) {
			select {
			case won <- asWon(tm):
			default:
			}
			<-ctx.Done()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return won
}

// The records behind data freshness, on a real ZooKeeper: a term reads
// every member's position; the leader position is written under the
// term's guard, read back inside and outside a term, survives the
// leader's session expiry for its successor to read, is refused to a term
// that is over and to an older epoch than the record's, and an unreadable
// one is an error to readers and replaced by the next write.
func TestLeaderPositionRecord(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	admin, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	sa, ca := newStore(t, zkc, "a", "inst-a")
	sb, cb := newStore(t, zkc, "b", "inst-b")

	pa, pb := int64(1000), int64(1<<62)
	at := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
	ma := member("a", "inst-a", "standby")
	ma.Position, ma.PositionAt = &pa, at
	mb := member("b", "inst-b", "standby") // position unknown
	if err := sa.PublishMember(ctx, ma); err != nil {
		t.Fatal(err)
	}
	if err := sb.PublishMember(ctx, mb); err != nil {
		t.Fatal(err)
	}

	var ta *wonTerm
	select {
	case ta = <-campaign(t, sa, ca, "a"):
	case <-time.After(30 * time.Second):
		t.Fatal("a not elected")
	}
	wonB := campaign(t, sb, cb, "b") // queues behind a

	ms, err := ta.ReadMembers(ctx)
	if err != nil || len(ms) != 2 {
		t.Fatalf("ReadMembers = %+v, %v; want a and b", ms, err)
	}
	if ms[0].NodeID != "a" || ms[0].Position == nil || *ms[0].Position != pa || !ms[0].PositionAt.Equal(at) ||
		ms[1].NodeID != "b" || ms[1].Position != nil {
		t.Fatalf("ReadMembers = %+v; want a at %d, b unknown", ms, pa)
	}

	if p, err := ta.ReadLeaderPosition(ctx); p != nil || err != nil {
		t.Fatalf("ReadLeaderPosition before any write = %+v, %v; want nil, nil", p, err)
	}
	for _, pos := range []int64{pa, pa + 5} { // created, then replaced
		if err := ta.WriteLeaderPosition(ctx, cluster.LeaderPosition{NodeID: "a", Epoch: ta.Epoch(), Position: pos, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	want := cluster.LeaderPosition{NodeID: "a", Epoch: ta.Epoch(), Position: pa + 5, At: at}
	if p, err := ta.ReadLeaderPosition(ctx); err != nil || p == nil || *p != want {
		t.Fatalf("ReadLeaderPosition = %+v, %v; want %+v", p, err, want)
	}

	// a's session expires: its term is over, the record stays for b.
	expire(t, zkc, ca)
	var tb *wonTerm
	select {
	case tb = <-wonB:
	case <-time.After(30 * time.Second):
		t.Fatal("b not elected after a's session expired")
	}
	if p, err := tb.ReadLeaderPosition(ctx); err != nil || p == nil || *p != want {
		t.Fatalf("successor's ReadLeaderPosition = %+v, %v; want a's %+v", p, err, want)
	}
	if p, err := admin.ReadLeaderPosition(ctx); err != nil || p == nil || *p != want {
		t.Fatalf("Store.ReadLeaderPosition = %+v, %v; want %+v", p, err, want)
	}
	if err := ta.WriteLeaderPosition(ctx, cluster.LeaderPosition{NodeID: "a", Epoch: ta.Epoch(), Position: pa + 9}); err == nil {
		t.Fatal("a term whose session expired wrote the leader position")
	}

	// b leads; a term of an earlier epoch never replaces its record, even
	// one whose session still lives (its znode deleted by an operator).
	wantB := cluster.LeaderPosition{NodeID: "b", Epoch: tb.Epoch(), Position: pb, At: at}
	if err := tb.WriteLeaderPosition(ctx, wantB); err != nil {
		t.Fatal(err)
	}
	old := cluster.LeaderPosition{NodeID: "b", Epoch: tb.Epoch() - 1, Position: pb + 1}
	if err := tb.WriteLeaderPosition(ctx, old); !errors.Is(err, cluster.ErrStalePosition) {
		t.Fatalf("a write of an earlier epoch = %v, want ErrStalePosition", err)
	}
	// An unreadable record: an error to readers (not "none"), replaced by
	// the leader's next write.
	if _, err := adm.Set(ctx, testLayout.LeaderPosition(), []byte("garbage"), -1); err != nil {
		t.Fatal(err)
	}
	if p, err := admin.ReadLeaderPosition(ctx); err == nil {
		t.Fatalf("ReadLeaderPosition of garbage = %+v, nil; want an error", p)
	}
	if err := tb.WriteLeaderPosition(ctx, wantB); err != nil {
		t.Fatalf("replacing an unreadable record: %v", err)
	}

	if err := adm.Delete(ctx, tb.l.Path, -1); err != nil {
		t.Fatal(err)
	}
	if err := tb.WriteLeaderPosition(ctx, cluster.LeaderPosition{NodeID: "b", Epoch: tb.Epoch(), Position: pb + 2}); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("a write without the term's znode = %v, want ErrNoNode", err)
	}
	if p, err := admin.ReadLeaderPosition(ctx); err != nil || p == nil || *p != wantB {
		t.Fatalf("after the refused writes: %+v, %v; want %+v", p, err, wantB)
	}
}
