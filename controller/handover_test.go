package controller_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// A graceful leaver names its successor in the breadcrumb (Finish with
// Term.Successor): the successor finds its own record, writes nothing,
// promotes with no previous leader in its hooks' environment, and fences
// nobody.
func TestGracefulLeaverNamesItsSuccessor(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		b.want(controller.StateLeader)
		// The daemon keeps its session a moment after a handover.
		if a.c.LastHandover().IsZero() {
			t.Error("a's LastHandover is zero after it handed over")
		}
		if !b.c.LastHandover().IsZero() {
			t.Errorf("b's LastHandover is %v: it never handed over", b.c.LastHandover())
		}
		handed := w.HandedTo()
		if len(handed) != 1 || handed[0].NodeID != "b" || handed[0].Host != "host-b" || handed[0].AdminURL != "http://b:9101" {
			t.Fatalf("handed over %+v, want one record naming b with its addresses", handed)
		}
		epoch := b.c.Status().Epoch
		if handed[0].Epoch != epoch {
			t.Fatalf("the record names epoch %d, b leads at %d", handed[0].Epoch, epoch)
		}
		for _, r := range w.Writes() {
			if r.NodeID == "b" {
				t.Fatalf("b wrote its breadcrumb although a named it: %v", w.Writes())
			}
		}
		if bc, _ := w.Breadcrumb(); bc == nil || bc.NodeID != "b" || bc.Epoch != epoch {
			t.Fatalf("breadcrumb %+v, want b's of epoch %d", bc, epoch)
		}
		if len(b.fence.Targets()) != 0 {
			t.Errorf("b fenced %v after a graceful handover", b.fence.Targets())
		}
		for _, c := range b.hooks.Calls() {
			if c.Name == "promote" && c.Env.Previous != nil {
				t.Errorf("b's promote hook was told of a previous leader %+v: its own record", c.Env.Previous)
			}
		}
		// b leads with that record: when it stops, its own Finish deletes
		// it (nobody waits).
		if err := b.stop(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if bc, _ := w.Breadcrumb(); bc != nil {
			t.Fatalf("breadcrumb %+v left after b's graceful stop", bc)
		}
		if b.c.LastHandover().IsZero() {
			t.Error("b's LastHandover is zero after its graceful stop deleted the breadcrumb")
		}
	})
}

// A successor that gives its term back without promoting (here its
// pre_promote hook vetoes) deletes the record its predecessor wrote for it
// with its election entry, so that the next leader has nobody to fence.
func TestNamedSuccessorThatDeclinesDeletesTheRecord(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b", prePromote())
		b.hooks.Always("pre_promote", &controllertest.Result{Err: errors.New("exit status 1")})
		b.healthy()
		b.want(controller.StateStandby)
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		c.want(controller.StateLeader)
		if h := w.HandedTo(); len(h) != 1 || h[0].NodeID != "b" {
			t.Fatalf("handed over %+v, want b named", h)
		}
		if len(c.fence.Targets()) != 0 {
			t.Errorf("c fenced %v: b's record was not deleted when b declined", c.fence.Targets())
		}
		if bc, _ := w.Breadcrumb(); bc == nil || bc.NodeID != "c" {
			t.Fatalf("breadcrumb %+v, want c's", bc)
		}
	})
}

// A named successor that dies before it promotes is fenced by whoever
// leads next: the record names it, so nobody may assume it never acted.
func TestNamedSuccessorThatDiesIsFenced(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.hooks.Always("promote", &controllertest.Result{Take: 10 * time.Second})
		b.healthy()
		b.want(controller.StateStandby)
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		b.want(controller.StatePromoting)
		w.ExpireSession("b")
		c.want(controller.StateLeader)
		if got := c.fence.Targets(); len(got) != 1 || got[0].NodeID != "b" {
			t.Fatalf("c fenced %v, want b", got)
		}
	})
}

// While a failover request to another node stands, the leaver names only
// that node, and only when it is next: here b is next (its failover watch
// is late, so it still waits in the queue), so the breadcrumb is deleted;
// b wins, reads the request, gives the term back, and c (the target)
// promotes without a fence.
func TestLeaverNamesOnlyTheFailoverTarget(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.be.SetFailoverBlind(true)
		b.healthy()
		b.want(controller.StateStandby)
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		w.SetFailover(&cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "r1"})
		c.want(controller.StateLeader)
		a.want(controller.StateStandby)
		for _, r := range w.HandedTo() {
			if r.NodeID != "c" {
				t.Fatalf("handed over %+v: a named a node other than the request's target", w.HandedTo())
			}
		}
		if len(c.fence.Targets()) != 0 {
			t.Errorf("c fenced %v", c.fence.Targets())
		}
		if b.state() == controller.StateLeader {
			t.Error("b leads although the request names c")
		}
	})
}

// The successor is predicted once a term promoted: a handoff whose reads
// at the end are slow (here 1s, against a 50ms wait) still names it.
func TestHandoverUsesTheSuccessorPredictedAtPromotion(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		b.want(controller.StateLeader)
		synctest.Wait() // b predicted c
		w.SetSuccessorDelay(time.Second)
		if err := b.stop(); err != nil {
			t.Fatal(err)
		}
		c.want(controller.StateLeader)
		h := w.HandedTo()
		if len(h) != 2 || h[1].NodeID != "c" {
			t.Fatalf("handed over %+v, want b then c named", h)
		}
		if len(c.fence.Targets()) != 0 {
			t.Errorf("c fenced %v", c.fence.Targets())
		}
		w.SetSuccessorDelay(0)
		time.Sleep(2 * time.Second) // the slow reads end (the bubble must be left empty)
	})
}
