package backendtest

import (
	"context"
	"errors"
	"testing"

	"github.com/failoverd/failoverd/cluster"
)

// entryRemover is what the suite asks of a node's Records for RemoveEntry
// (the Store's).
type entryRemover interface {
	RemoveEntry(ctx context.Context, e cluster.Entry) error
}

// RemoveEntry (cluster.EntryRemover): a term names its election entry
// (cluster.EntryOf); another process (a node of its own session) removes
// that entry only while it is the one named: with another owner or
// another creation it removes nothing and fails with ErrEntryChanged,
// and the term stays valid and nobody else wins. Removed, the term ends
// at once (its node is alive and renewing: only the removal can end it),
// the next candidate wins with a greater epoch, the old term's guarded
// writes fail, and a second removal of the same entry fails with
// ErrEntryChanged.
func testRemoveEntry(t *testing.T, b Backend) {
	a := newArena(t, b)
	a.campaign("a")
	ha := a.nextBy(t, "a")
	a.campaign("b")
	e, ok := cluster.EntryOf(ha.Term)
	if !ok || e.IsZero() {
		t.Fatalf("the term of a names no election entry (%v, %v)", e, ok)
	}
	if e.Created != ha.Epoch() {
		t.Errorf("the entry %v was created at %d; want the term's epoch %d", e, e.Created, ha.Epoch())
	}
	r := a.add("a-restarted")
	rm, ok := r.rec.(entryRemover)
	if !ok {
		t.Fatalf("the Records of %s (%T) have no RemoveEntry", r.id, r.rec)
	}
	ctx := ctxT(t)
	for _, wrong := range []cluster.Entry{
		{Key: e.Key, Owner: e.Owner + 1, Created: e.Created},
		{Key: e.Key, Owner: e.Owner, Created: e.Created + 1},
		{Key: e.Key + "x", Owner: e.Owner, Created: e.Created},
	} {
		if err := rm.RemoveEntry(ctx, wrong); !errors.Is(err, cluster.ErrEntryChanged) {
			t.Errorf("RemoveEntry(%v) of a live term's entry %v: %v; want ErrEntryChanged", wrong, e, err)
		}
	}
	if _, err := ha.Term.Expiry(); err != nil || ha.Ctx.Err() != nil {
		t.Fatalf("a refused removal ended the term: Expiry %v, context %v", err, context.Cause(ha.Ctx))
	}
	a.quiet(t, pollInterval*5, "after a refused removal")
	if err := rm.RemoveEntry(ctx, e); err != nil {
		t.Fatalf("RemoveEntry(%v): %v", e, err)
	}
	cause := ha.waitEnded(t)
	if !errors.Is(cause, cluster.ErrEntryDeleted) && !errors.Is(cause, cluster.ErrSessionExpired) {
		t.Errorf("the removed term ended with %v; want a cause wrapping ErrEntryDeleted or ErrSessionExpired", cause)
	}
	hb := a.nextBy(t, "b")
	if hb.Epoch() <= ha.Epoch() {
		t.Errorf("b won with epoch %d, not above the removed term's %d", hb.Epoch(), ha.Epoch())
	}
	if _, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", ha.Epoch()), cluster.Revision{}); err == nil {
		t.Errorf("the removed term's guarded write succeeded")
	}
	if err := rm.RemoveEntry(ctx, e); !errors.Is(err, cluster.ErrEntryChanged) {
		t.Errorf("a second RemoveEntry(%v): %v; want ErrEntryChanged", e, err)
	}
	if _, err := hb.Term.Expiry(); err != nil {
		t.Errorf("the successor's term is over after the second removal: %v", err)
	}
}
