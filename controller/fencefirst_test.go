package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
	"github.com/failoverd/failoverd/fencer"
)

// probe is a scripted controller.Prober: it answers err (nil: the target
// answers as a live, connected leader).
type probe struct{ err error }

func (p *probe) Probe(context.Context, fencer.Target) error { return p.err }

// withProver gives a node a proving chain and a probe.
func withProver(f *controllertest.Fencer, p *probe) opt {
	return func(_ *node, _ *controller.Config, d *controller.Deps) { d.Prover, d.Probe = f, p }
}

func suspectOf(id string) cluster.Suspect {
	return cluster.Suspect{Beat: cluster.Beat{NodeID: id}, Stood: time.Second}
}

// A leader that answers its probe is not fenced; one that does not is
// fenced with the proving methods, and the successor's term, whose
// breadcrumb names exactly the term proved out, promotes without a
// second fence.
func TestProveOutFencesOnceBeforeTheTakeover(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		prover, pr := &controllertest.Fencer{}, &probe{}
		b := start(t, w, "b", withProver(prover, pr))
		b.healthy()
		b.want(controller.StateStandby)
		ctx := t.Context()

		if err := b.c.ProveOut(ctx, suspectOf("a")); !errors.Is(err, controller.ErrLeaderAnswers) {
			t.Fatalf("ProveOut of a leader that answers its probe: %v, want ErrLeaderAnswers", err)
		}
		if got := prover.Targets(); len(got) != 0 {
			t.Fatalf("a leader that answers was fenced: %v", got)
		}
		pr.err = errors.New("connection refused")
		if err := b.c.ProveOut(ctx, suspectOf("b-not-a")); err == nil {
			t.Fatal("ProveOut of a node the breadcrumb does not name succeeded")
		}
		if err := b.c.ProveOut(ctx, suspectOf("a")); err != nil {
			t.Fatalf("ProveOut: %v", err)
		}
		epoch := a.c.Status().Epoch
		if got := prover.Targets(); len(got) != 1 || got[0].NodeID != "a" || got[0].Epoch != epoch {
			t.Fatalf("proving fence of %v, want a at epoch %d", got, epoch)
		}
		b.c.ProvedEnded(suspectOf("a").Beat)
		w.DeleteZnode("a") // what the elector's guarded removal does
		b.want(controller.StateLeader)
		if got := b.fence.Targets(); len(got) != 0 {
			t.Errorf("b fenced %v again after the proving fence", got)
		}
		h := w.History()
		if len(h) == 0 || h[len(h)-1].NewLeader != "b" || h[len(h)-1].FenceMethod != "test" {
			t.Errorf("history %+v, want b's term last, fenced by the proving method", h)
		}
	})
}

// A proving fence of one term does not stand for another: when the
// breadcrumb the successor reads names a later term of the suspect, it
// is fenced as always; with no proving method ProveOut refuses.
func TestProveOutCoversOnlyTheTermItFenced(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		prover, pr := &controllertest.Fencer{}, &probe{err: errors.New("timeout")}
		b := start(t, w, "b", withProver(prover, pr))
		b.healthy()
		b.want(controller.StateStandby)
		if err := b.c.ProveOut(t.Context(), suspectOf("a")); err != nil {
			t.Fatalf("ProveOut: %v", err)
		}
		b.c.ProvedEnded(suspectOf("a").Beat)
		later := other("a", a.c.Status().Epoch+1)
		w.SetBreadcrumb(later)
		w.DeleteZnode("a")
		b.want(controller.StateLeader)
		if got := b.fence.Targets(); len(got) != 1 || got[0].Epoch != later.Epoch {
			t.Errorf("b fenced %v, want a at the later epoch %d", got, later.Epoch)
		}

		c := start(t, w, "c", func(_ *node, _ *controller.Config, d *controller.Deps) { d.Probe = pr })
		c.healthy()
		c.want(controller.StateStandby)
		if err := c.c.ProveOut(t.Context(), suspectOf("b")); err == nil {
			t.Error("ProveOut without a proving method succeeded")
		}
	})
}

// A proof stands only for the term its own node ended right after it:
// when the elector did not report the removal (its guarded removal was
// refused: the heartbeat moved), the term won later fences the old
// leader as always, even though its breadcrumb names the term proved out.
func TestProveOutWithoutTheRemovalStandsForNothing(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		prover, pr := &controllertest.Fencer{}, &probe{err: errors.New("timeout")}
		b := start(t, w, "b", withProver(prover, pr))
		b.healthy()
		b.want(controller.StateStandby)
		if err := b.c.ProveOut(t.Context(), suspectOf("a")); err != nil {
			t.Fatalf("ProveOut: %v", err)
		}
		b.c.ProvedEnded(suspectOf("someone-else").Beat) // another term's removal
		time.Sleep(time.Minute)                         // the old leader lives on; its term ends later
		w.DeleteZnode("a")
		b.want(controller.StateLeader)
		epoch := a.c.Status().Epoch
		if got := b.fence.Targets(); len(got) != 1 || got[0].NodeID != "a" || got[0].Epoch != epoch {
			t.Errorf("b fenced %v, want a at epoch %d again: the proof was not followed by b's own removal", got, epoch)
		}
	})
}
