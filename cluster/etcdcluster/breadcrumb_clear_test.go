package etcdcluster

import (
	"errors"
	"testing"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// The operator's clear deletes the breadcrumb only at the mod revision it
// read: one a new leader rewrote between the read and the delete survives
// (ErrChanged), one that is gone is ErrAbsent, and the zero or a made-up
// revision deletes nothing.
func TestClearBreadcrumbAtTheRevisionRead(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	adm := admin(t, c)
	l := newLayout()
	op := newNode(t, c.Endpoints(), l, "op")
	ctx := ctxT(t)
	old, err := breadcrumb.Encode(crumb("c", 42))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Put(ctx, l.Breadcrumb(), string(old)); err != nil {
		t.Fatal(err)
	}

	// The operator reads node c's breadcrumb...
	data, rev, err := op.s.ReadBreadcrumbData(ctx)
	if err != nil || string(data) != string(old) || !rev.Exists() {
		t.Fatalf("ReadBreadcrumbData = %q at %v, %v", data, rev, err)
	}
	// ...a new leader wins, fences c and writes its own breadcrumb...
	a := newNode(t, c.Endpoints(), l, "a")
	ch, _ := a.campaign(t, Fair)
	w := next(t, ch)
	_, at, err := w.t.ReadBreadcrumb(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.t.WriteBreadcrumb(ctx, crumb("a", w.t.Epoch()), at); err != nil {
		t.Fatal(err)
	}
	// ...and the operator's clear, at what it read, leaves it in place.
	if err := op.s.ClearBreadcrumb(ctx, rev); !errors.Is(err, breadcrumb.ErrChanged) {
		t.Fatalf("ClearBreadcrumb at the revision read before a rewrite: %v; want ErrChanged", err)
	}
	if r, _, err := op.s.ReadBreadcrumb(ctx); err != nil || r.NodeID != "a" || r.Epoch != w.t.Epoch() {
		t.Fatalf("the new leader's breadcrumb after a stale clear: %+v, %v; want a's at epoch %d", r, err, w.t.Epoch())
	}

	// The zero revision (nothing read) and made-up ones delete nothing.
	for _, bad := range []cluster.Revision{{}, cluster.RevisionOf(0), cluster.RevisionOf(1)} {
		if err := op.s.ClearBreadcrumb(ctx, bad); err == nil {
			t.Errorf("ClearBreadcrumb at %v succeeded", bad)
		}
	}
	if _, _, err := op.s.ReadBreadcrumb(ctx); err != nil {
		t.Fatalf("the breadcrumb after clears at bad revisions: %v", err)
	}

	// Read again, it clears; a second clear finds it gone.
	_, rev, err = op.s.ReadBreadcrumbData(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.s.ClearBreadcrumb(ctx, rev); err != nil {
		t.Fatalf("ClearBreadcrumb at the current revision: %v", err)
	}
	if _, _, err := op.s.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after clear: %v", err)
	}
	if err := op.s.ClearBreadcrumb(ctx, rev); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("clearing a gone breadcrumb: %v; want ErrAbsent", err)
	}
}
