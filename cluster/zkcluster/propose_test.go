package zkcluster

import (
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// ProposeFailover (a node's own handover request) writes only when no
// request stands: it refuses to replace an operator's, replaces one that
// is done or unreadable, and writes an ephemeral of its session.
func TestProposeFailoverNeverReplacesAStandingRequest(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	op, _ := newStore(t, zkc, "", "")
	node, nc := newStore(t, zkc, "a", "inst-a")
	sess := session(t, nc)
	if err := sess.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	read := func() *cluster.FailoverRequest {
		t.Helper()
		data, _, err := sess.Get(ctx, testLayout.Failover())
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		r := cluster.DecodeFailover(data)
		// Store.ReadFailover (the controller's check of a "none" its
		// watch reported) reads the same on the client's session.
		if r2, err := node.ReadFailover(ctx); err != nil || (r == nil) != (r2 == nil) || r != nil && r.Key() != r2.Key() {
			t.Fatalf("ReadFailover = %+v, %v; the session reads %+v", r2, err, r)
		}
		return r
	}
	mine := cluster.FailoverRequest{To: "b", TimeoutMS: 30000, ID: "node", By: "a", Reason: cluster.ReasonPreferredPriority}

	operators := cluster.FailoverRequest{To: "c", TimeoutMS: 30000, ID: "op", Deadline: time.Now().Add(30 * time.Second), By: "failoverd failover"}
	if err := op.RequestFailover(ctx, operators); err != nil {
		t.Fatal(err)
	}
	if err := node.ProposeFailover(ctx, mine); !errors.Is(err, cluster.ErrFailoverStands) {
		t.Fatalf("ProposeFailover over an operator's request: %v, want ErrFailoverStands", err)
	}
	if r := read(); r == nil || r.ID != "op" {
		t.Fatalf("request %+v, want the operator's kept", r)
	}

	// Done: replaced.
	done := operators
	done.Done, done.Epoch = true, 7
	if err := op.RequestFailover(ctx, done); err != nil {
		t.Fatal(err)
	}
	if err := node.ProposeFailover(ctx, mine); err != nil {
		t.Fatalf("ProposeFailover over a done request: %v", err)
	}
	_, st, err := sess.Get(ctx, testLayout.Failover())
	if r := read(); err != nil || r == nil || r.ID != "node" || st.EphemeralOwner != sess.ID() {
		t.Fatalf("request %+v owned by %x (%v), want ours, an ephemeral of our session", r, st.EphemeralOwner, err)
	}

	// Ours stands now: a second proposal is refused too.
	if err := node.ProposeFailover(ctx, cluster.FailoverRequest{To: "d", ID: "again"}); !errors.Is(err, cluster.ErrFailoverStands) {
		t.Fatalf("second ProposeFailover: %v, want ErrFailoverStands", err)
	}

	// Unreadable: replaced.
	if err := sess.Delete(ctx, testLayout.Failover(), -1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(ctx, testLayout.Failover(), []byte("{garbage"), zk.Persistent); err != nil {
		t.Fatal(err)
	}
	if err := node.ProposeFailover(ctx, mine); err != nil {
		t.Fatalf("ProposeFailover over an unreadable request: %v", err)
	}
	if r := read(); r == nil || r.ID != "node" {
		t.Fatalf("request %+v, want ours", r)
	}
}
