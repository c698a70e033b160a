package zkcluster

import (
	"errors"
	"testing"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// The operator's clear deletes the breadcrumb only at the version it read:
// one a new leader rewrote between the read and the delete survives
// (ErrChanged), one that is gone is ErrAbsent, and the zero or a foreign
// revision deletes nothing (a ZooKeeper delete at version -1 would delete
// any version).
func TestClearBreadcrumbAtTheRevisionRead(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	s, c := newStore(t, zkc, "", "")
	sess := session(t, c)
	if err := sess.EnsurePath(ctx, testLayout.ElectionDir()); err != nil {
		t.Fatal(err)
	}
	path := testLayout.Breadcrumb()
	old, err := breadcrumb.Encode(bcRec("node-c", 42))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(ctx, path, old, zk.Persistent); err != nil {
		t.Fatal(err)
	}

	// The operator reads node-c's breadcrumb...
	data, rev, err := s.ReadBreadcrumbData(ctx)
	if err != nil || string(data) != string(old) || !rev.Exists() {
		t.Fatalf("ReadBreadcrumbData = %q at %v, %v", data, rev, err)
	}
	// ...a new leader fences node-c and writes its own, as a term does...
	tm, _ := guardTerm(t, zkc, "node-a", 43)
	_, v, err := tm.ReadBreadcrumb(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.WriteBreadcrumb(ctx, bcRec("node-a", 43), v); err != nil {
		t.Fatal(err)
	}
	// ...and the operator's clear, at what it read, leaves it in place.
	if err := s.ClearBreadcrumb(ctx, rev); !errors.Is(err, breadcrumb.ErrChanged) {
		t.Fatalf("ClearBreadcrumb at the revision read before a rewrite: %v; want ErrChanged", err)
	}
	if r, _, err := s.ReadBreadcrumb(ctx); err != nil || r.NodeID != "node-a" || r.Epoch != 43 {
		t.Fatalf("the new leader's breadcrumb after a stale clear: %+v, %v; want node-a's at epoch 43", r, err)
	}

	// The zero revision (nothing read) and one no znode version can be
	// delete nothing either.
	for _, bad := range []cluster.Revision{{}, cluster.RevisionOf(-1), cluster.RevisionOf(1 << 40)} {
		if err := s.ClearBreadcrumb(ctx, bad); err == nil {
			t.Errorf("ClearBreadcrumb at %v succeeded", bad)
		}
	}
	if _, _, err := s.ReadBreadcrumb(ctx); err != nil {
		t.Fatalf("the breadcrumb after clears at bad revisions: %v", err)
	}

	// Read again, it clears; a second clear finds it gone.
	_, rev, err = s.ReadBreadcrumbData(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ClearBreadcrumb(ctx, rev); err != nil {
		t.Fatalf("ClearBreadcrumb at the current revision: %v", err)
	}
	if _, _, err := s.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after clear: %v", err)
	}
	if err := s.ClearBreadcrumb(ctx, rev); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("clearing a gone breadcrumb: %v; want ErrAbsent", err)
	}
}
