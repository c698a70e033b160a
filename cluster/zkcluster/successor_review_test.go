package zkcluster

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/test/zktest"
	"github.com/failoverd/failoverd/zk"
)

// A successor whose member record cannot be decoded is predicted with no
// host, a record the breadcrumb cannot hold: Finish must then delete the
// breadcrumb as it does without a successor. It used to give up with the
// encoding error, leaving the breadcrumb naming the leaver (which had
// demoted), so the successor had to fence it: a needless fence that, with
// the leaver's host gone after its graceful stop, fails and leaves the
// cluster without a leader. Found by an independent review.
func TestFinishWithAnUnencodableSuccessorDeletesTheBreadcrumb(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	_, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	sa, ca := newStore(t, zkc, "a", "inst-a")
	sb, cb := newStore(t, zkc, "b", "inst-b")
	if err := adm.EnsurePath(ctx, testLayout.MembersDir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := session(t, cb).Create(ctx, testLayout.Member("b"), []byte("not json"), zk.Ephemeral); err != nil {
		t.Fatal(err)
	}
	ta, _ := campaignFair(t, sa, ca, "a")
	a := nextTerm(t, ta)
	campaignFair(t, sb, cb, "b")
	waitQueueLen(t, adm, 2)
	next, err := a.Successor(ctx)
	if err != nil || next == nil || next.Record.NodeID != "b" {
		t.Fatalf("Successor = %+v, %v; want b", next, err)
	}
	if _, err := breadcrumb.Encode(next.Record); err == nil {
		t.Fatalf("the predicted record %+v encodes: the test would not catch the fault", next.Record)
	}
	v, err := a.WriteBreadcrumb(ctx, breadcrumb.Record{NodeID: "a", Host: "host-a", Epoch: a.Epoch(), Since: time.Now().UTC()}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Finish(ctx, v, next); err != nil {
		t.Fatalf("Finish naming a successor whose record cannot be written = %v, want the breadcrumb deleted", err)
	}
	for _, p := range []string{testLayout.Breadcrumb(), a.l.Path} {
		if ok, _, err := adm.Exists(ctx, p); err != nil || ok {
			t.Fatalf("%s still there after Finish (%v)", p, err)
		}
	}
}
