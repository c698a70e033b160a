package controller_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// A graceful leaver deletes its breadcrumb with its election entry in one
// step (Finish) after its demote succeeded: the successor finds no
// breadcrumb, fences nobody, tells its hooks of no previous leader, and
// writes its own record before it promotes.
func TestGracefulLeaverDeletesItsBreadcrumb(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		b.want(controller.StateLeader)
		if f := w.Finishes(); len(f) != 1 {
			t.Fatalf("finishes %v, want a's one", f)
		}
		epoch := b.c.Status().Epoch
		if bc, _ := w.Breadcrumb(); bc == nil || bc.NodeID != "b" || bc.Epoch != epoch {
			t.Fatalf("breadcrumb %+v, want b's own of epoch %d", bc, epoch)
		}
		if len(b.fence.Targets()) != 0 {
			t.Errorf("b fenced %v after a graceful handover", b.fence.Targets())
		}
		for _, c := range b.hooks.Calls() {
			if c.Name == "promote" && c.Env.Previous != nil {
				t.Errorf("b's promote hook was told of a previous leader %+v after a graceful handover", c.Env.Previous)
			}
		}
		if err := b.stop(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if bc, _ := w.Breadcrumb(); bc != nil {
			t.Fatalf("breadcrumb %+v left after b's graceful stop", bc)
		}
	})
}

// A successor whose term ends after a graceful handover but before it
// wrote its breadcrumb (here: its session expires while its pre_promote
// hook runs) leaves nothing that names it, so whoever leads next fences
// nobody. A breadcrumb the leaver wrote for its successor would name an
// epoch that node's daemon never held; an rpc fence would then be
// answered with its previous epoch and refused, and no node promoted.
func TestSuccessorLostBeforeItsWriteIsNotFenced(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		withPrePromote := func(_ *node, cfg *controller.Config, _ *controller.Deps) {
			cfg.PrePromote = &controller.Hook{Timeout: 5 * time.Second}
		}
		b := start(t, w, "b", withPrePromote, script(func(n *node) {
			n.hooks.On("pre_promote", controllertest.Result{Take: 2 * time.Second})
		}))
		b.healthy()
		b.want(controller.StateStandby)
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if got := w.Leader(); got != "b" {
			t.Fatalf("elected %q after a's graceful stop, want b (first in line)", got)
		}
		w.ExpireSession("b")
		c.want(controller.StateLeader)
		if targets := c.fence.Targets(); len(targets) != 0 {
			t.Fatalf("c fenced %v: a breadcrumb named b although b never wrote one", targets)
		}
		if bc, _ := w.Breadcrumb(); bc == nil || bc.NodeID != "c" {
			t.Fatalf("breadcrumb %+v, want c's", bc)
		}
	})
}
