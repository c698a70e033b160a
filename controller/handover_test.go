package controller_test

import (
	"testing"
	"testing/synctest"

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
