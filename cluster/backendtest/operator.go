package backendtest

import (
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// operator is n's records as the operator's tools use them.
func operator(t *testing.T, n *node) cluster.Operator {
	t.Helper()
	op, ok := n.rec.(cluster.Operator)
	if !ok {
		t.Fatalf("node %s's Records (%T) are no cluster.Operator: a backend's records are a cluster.Store", n.id, n.rec)
	}
	return op
}

// Operator: the operations of the CLI and the admin API (pause and
// resume, failover --to and its withdrawal, breadcrumb clear, history,
// the cluster record a move rewrites, status's lists) keep their rules on
// every backend: a second pause keeps the first, a proposal never
// replaces an operator's request, a withdrawal takes only the session's
// own request, a clear deletes only the breadcrumb read, and a cluster
// record is written only at the revision read.
func testOperator(t *testing.T, b Backend) {
	ar := newArena(t, b)
	w := ar.add("w")
	op := operator(t, w)
	ctx := ctxT(t)

	// Pause and resume.
	first := cluster.Pause{By: "alice", Reason: "upgrade", At: since}
	if got, created, err := op.SetPause(ctx, first); err != nil || !created || !cluster.SamePause(&got, &first) {
		t.Fatalf("SetPause = %+v, %v, %v; want it created", got, created, err)
	}
	second := cluster.Pause{By: "bob", At: since.Add(time.Minute)}
	if got, created, err := op.SetPause(ctx, second); err != nil || created || !cluster.SamePause(&got, &first) {
		t.Fatalf("SetPause again = %+v, %v, %v; want the first pause kept", got, created, err)
	}
	if p, err := op.ReadPause(ctx); err != nil || !cluster.SamePause(p, &first) {
		t.Fatalf("ReadPause = %+v, %v; want %+v", p, err, first)
	}
	if was, err := op.ClearPause(ctx); err != nil || !was {
		t.Fatalf("ClearPause = %v, %v; want it cleared", was, err)
	}
	if was, err := op.ClearPause(ctx); err != nil || was {
		t.Fatalf("ClearPause of no pause = %v, %v; want nothing to clear", was, err)
	}

	// A request of the operator's session: a node's proposal does not
	// replace it, another session cannot withdraw it, its own can.
	na := ar.campaign("a")
	ha := ar.nextBy(t, "a")
	req := request("op-1", "a", "alice")
	if err := op.RequestFailover(ctx, req); err != nil {
		t.Fatalf("RequestFailover: %v", err)
	}
	if err := na.rec.ProposeFailover(ctx, request("a-1", "w", "a")); !errors.Is(err, cluster.ErrFailoverStands) {
		t.Fatalf("ProposeFailover over an operator's request = %v; want ErrFailoverStands", err)
	}
	if err := operator(t, na).WithdrawFailover(ctx, req.Key()); err != nil {
		t.Fatalf("WithdrawFailover by another session: %v", err)
	}
	if r, err := w.rec.ReadFailover(ctx); err != nil || r == nil || r.Key() != req.Key() {
		t.Fatalf("ReadFailover after another session's withdrawal = %+v, %v; want the request standing", r, err)
	}
	if err := op.WithdrawFailover(ctx, req.Key()); err != nil {
		t.Fatalf("WithdrawFailover: %v", err)
	}
	if r, err := w.rec.ReadFailover(ctx); err != nil || r != nil {
		t.Fatalf("ReadFailover after the withdrawal = %+v, %v; want none", r, err)
	}

	// Breadcrumb clear: only at the revision read.
	if err := op.ClearBreadcrumb(ctx, cluster.Revision{}); err == nil {
		t.Fatal("ClearBreadcrumb without a revision read succeeded")
	}
	rev1, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", ha.Epoch()), cluster.Revision{})
	if err != nil {
		t.Fatalf("WriteBreadcrumb: %v", err)
	}
	data, rev, err := op.ReadBreadcrumbData(ctx)
	if err != nil || rev != rev1 || len(data) == 0 {
		t.Fatalf("ReadBreadcrumbData = %q, %v, %v; want the breadcrumb at %v", data, rev, err, rev1)
	}
	rev2, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", ha.Epoch()), rev1)
	if err != nil {
		t.Fatalf("WriteBreadcrumb again: %v", err)
	}
	if err := op.ClearBreadcrumb(ctx, rev1); !errors.Is(err, breadcrumb.ErrChanged) {
		t.Fatalf("ClearBreadcrumb at a stale revision = %v; want ErrChanged", err)
	}
	if err := op.ClearBreadcrumb(ctx, rev2); err != nil {
		t.Fatalf("ClearBreadcrumb: %v", err)
	}
	if err := op.ClearBreadcrumb(ctx, rev2); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("ClearBreadcrumb of no breadcrumb = %v; want ErrAbsent", err)
	}

	// History as the operator reads it; status's lists.
	if _, err := ha.Term.AppendHistory(ctx, historyEntry("a", ha.Epoch())); err != nil {
		t.Fatalf("AppendHistory: %v", err)
	}
	if h, err := op.History(ctx); err != nil || len(h) != 1 || h[0].NewLeader != "a" || h[0].NewEpoch != ha.Epoch() {
		t.Fatalf("History = %+v, %v; want a's entry", h, err)
	}
	publish(t, na, "standby", 0)
	if ms, err := op.Members(ctx); err != nil || len(ms) != 1 || ms[0].NodeID != "a" {
		t.Fatalf("Members = %+v, %v; want a's record", ms, err)
	}
	if q, err := op.Queue(ctx); err != nil || len(q) == 0 || q[0] != "a" {
		t.Fatalf("Queue = %v, %v; want a first", q, err)
	}
	if err := op.Fresh(ctx); err != nil {
		t.Fatalf("Fresh: %v", err)
	}

	// The cluster record, as a move rewrites it: at the revision read.
	rec, err := na.rec.CheckJoin(ctx, "fair", "")
	if err != nil {
		t.Fatalf("CheckJoin: %v", err)
	}
	got, rev, err := op.ClusterRecord(ctx)
	if err != nil || got == nil || got.ID != rec.ID || !rev.Exists() {
		t.Fatalf("ClusterRecord = %+v, %v, %v; want %+v", got, rev, err, rec)
	}
	moved := *got
	moved.MovedTo = "elsewhere"
	newRev, stamp, err := op.WriteClusterRecord(ctx, moved, rev)
	if err != nil || newRev == rev || stamp < ha.Epoch() {
		t.Fatalf("WriteClusterRecord = %v, %d, %v; want a new revision and a stamp above epoch %d", newRev, stamp, err, ha.Epoch())
	}
	if _, _, err := op.WriteClusterRecord(ctx, *got, rev); err == nil {
		t.Fatal("WriteClusterRecord at a stale revision succeeded")
	}
	if c, err := op.ReadCarried(ctx); err != nil || c.History == nil || c.Breadcrumb != nil {
		t.Fatalf("ReadCarried = %+v, %v; want the history and no breadcrumb", c, err)
	}
}
