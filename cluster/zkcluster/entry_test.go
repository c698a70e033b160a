package zkcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/test/zktest"
)

// The unfair lock is never removed: its path is shared, so a delete that
// timed out and is resent after a reconnect could take the next leader's
// lock (at version 0, as ours). RemoveEntry refuses it with ErrNoRemove,
// even while it is the very lock named, and leaves it.
func TestRemoveEntryRefusesTheUnfairLock(t *testing.T) {
	zkc := zktest.Start(t, 1)
	s, c := newStore(t, zkc, "a", "inst-a")
	tm := electIn(t, s, c, "a", election.Unfair)
	e, ok := cluster.EntryOf(tm.Term)
	if !ok || !election.IsUnfairLock(e.Key) {
		t.Fatalf("the unfair term names %v (%v); want its lock", e, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.RemoveEntry(ctx, e); !errors.Is(err, cluster.ErrNoRemove) {
		t.Fatalf("RemoveEntry(%v) of the unfair lock: %v; want ErrNoRemove", e, err)
	}
	_, st, err := session(t, c).Get(ctx, e.Key)
	if err != nil || st.Czxid != e.Created || st.EphemeralOwner != e.Owner {
		t.Fatalf("the lock after a refused removal: %+v, %v; want it kept", st, err)
	}
}
