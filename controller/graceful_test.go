package controller_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// The graceful end (graceful.go): a leader that ends its term on purpose
// keeps it, renewed, while a demote that takes far longer than the lease
// runs, and gives it up only after; a term lost meanwhile turns the demote
// into a forced one.

// gracefulTimeout sets service.demote.graceful_timeout.
func gracefulTimeout(d time.Duration) opt {
	return func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.GracefulDemoteTimeout = d }
}

// longDemote is three times the world's session timeout (6s): a demote
// that no lease budget could hold.
const longDemote = 18 * time.Second

// lastDemote is the last demote hook run of n.
func lastDemote(t *testing.T, n *node) controllertest.Call {
	t.Helper()
	calls := n.hooks.Calls()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Name == "demote" {
			return calls[i]
		}
	}
	t.Fatalf("%s ran no demote: %v", n.id, n.hooks.Reasons())
	return controllertest.Call{}
}

// firstPromote is when n's first promote hook started (zero: none).
func firstPromote(n *node) time.Time {
	for _, c := range n.hooks.Calls() {
		if c.Name == "promote" {
			return c.At
		}
	}
	return time.Time{}
}

// A demote three times the session timeout, on every deliberate end: the
// leader holds its term, renewed, the breadcrumb and its entry in the
// election for the whole demote (nobody else can win), then hands over
// without a fence; the successor's promote starts after the demote ended.
// A graceful stop waits for the demote: Run returns after it, with no
// error.
func TestGracefulDemoteKeepsTheTermAndHandsOverWithoutFence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		end    func(t *testing.T, w *controllertest.World, a *node) <-chan error // a's Run error for a stop
	}{
		{"cede", "ceded", func(t *testing.T, w *controllertest.World, a *node) <-chan error {
			if err := a.c.Cede(context.Background(), time.Hour); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{"failover to b", "failover_handoff", func(t *testing.T, w *controllertest.World, a *node) <-chan error {
			w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
			return nil
		}},
		{"shutdown", "shutdown", func(t *testing.T, w *controllertest.World, a *node) <-chan error {
			done := make(chan error, 1)
			go func() { done <- a.stop() }()
			return done
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			test(t, func(t *testing.T, w *controllertest.World) {
				a := leader(t, w, "a", gracefulTimeout(30*time.Second))
				b := start(t, w, "b", gracefulTimeout(30*time.Second))
				b.healthy()
				b.want(controller.StateStandby)
				a.hooks.On("demote", controllertest.Result{Take: longDemote})
				epoch := a.c.Status().Epoch
				began := time.Now()
				stopped := tc.end(t, w, a)

				// Just before the demote ends: a still holds a renewed term.
				time.Sleep(longDemote - 100*time.Millisecond)
				synctest.Wait()
				if got := a.state(); got != controller.StateDemoting {
					t.Errorf("a is %s during its graceful demote, want %s", got, controller.StateDemoting)
				}
				if got := w.Leader(); got != "a" {
					t.Fatalf("%q holds the term during a's graceful demote, want a", got)
				}
				if exp, err := w.Term("a").Expiry(); err != nil || !exp.After(time.Now().Add(5*time.Second)) {
					t.Errorf("a's term during its graceful demote: Expiry %v, %v; want it renewed (5.7s ahead)", exp, err)
				}
				if bc, _ := w.Breadcrumb(); bc == nil || bc.NodeID != "a" || bc.Epoch != epoch {
					t.Errorf("breadcrumb %+v during a's graceful demote, want a's of epoch %d", bc, epoch)
				}
				if got := b.state(); got == controller.StateLeader || got == controller.StatePromoting || got == controller.StateFencing {
					t.Errorf("b is %s while a still demotes", got)
				}

				time.Sleep(time.Second) // the demote ends; b wins, promotes
				b.want(controller.StateLeader)
				d := lastDemote(t, a)
				if d.Env.Reason != tc.reason || d.Env.Timeout != 30*time.Second || d.Err != nil {
					t.Errorf("a's demote: reason %q, timeout %v, err %v; want %s, the graceful timeout 30s, success", d.Env.Reason, d.Env.Timeout, d.Err, tc.reason)
				}
				if took := d.End.Sub(began); took < longDemote {
					t.Errorf("a's demote ended after %v, want it to run its %v", took, longDemote)
				}
				if p := firstPromote(b); p.Before(d.End) {
					t.Errorf("b's promote started at %v, before a's demote ended at %v", p, d.End)
				}
				if f := w.Finishes(); len(f) != 1 {
					t.Errorf("finishes %v, want a's one (breadcrumb deleted with its entry)", f)
				}
				if targets := b.fence.Targets(); len(targets) != 0 {
					t.Errorf("b fenced %v after a graceful handover", targets)
				}
				if a.metrics.Count("lost:"+tc.reason) != 1 {
					t.Errorf("a's metrics %v, want one lost:%s", a.metrics.Events(), tc.reason)
				}
				if stopped != nil {
					if err := <-stopped; err != nil {
						t.Errorf("Run() = %v after a graceful stop whose demote took %v", err, longDemote)
					}
				}
			})
		})
	}
}

// The term lost during a graceful demote: the demote is cut short as a
// forced one, over before the term's Expiry; the breadcrumb stays, and
// the successor fences. Lost by the clock (renewals stop: the hook is
// killed at the Expiry less the kill graces, while the backend has not
// noticed) or by the backend (the term's context ends with a lease
// expiry: the demote has the demote timeout, 1s, left).
func TestTermLostDuringGracefulDemoteForcesIt(t *testing.T) {
	const budget = 1500 * time.Millisecond // DemoteBudget: 250ms + 1s + 250ms
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, w *controllertest.World) (deadline time.Time) // when the demote must be over
	}{
		{"renewals stop", func(t *testing.T, w *controllertest.World) time.Time {
			w.StopRenewalsUnnoticed("a")
			exp, err := w.Term("a").Expiry()
			if err != nil {
				t.Fatalf("a's term during its graceful demote: %v, want it renewed until now", err)
			}
			return exp
		}},
		{"lease expires", func(t *testing.T, w *controllertest.World) time.Time {
			w.Expire("a")
			return time.Now().Add(budget)
		}},
		// Expiry fails before the backend ends the term's context: the
		// loop finds it within a second (not at the next cut, seconds
		// later), and the forced demote has its timeout from then.
		{"expiry fails first", func(t *testing.T, w *controllertest.World) time.Time {
			w.Lapse("a")
			return time.Now().Add(time.Second + budget)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			test(t, func(t *testing.T, w *controllertest.World) {
				a := leader(t, w, "a", gracefulTimeout(30*time.Second))
				b := start(t, w, "b", gracefulTimeout(30*time.Second))
				b.healthy()
				b.want(controller.StateStandby)
				a.hooks.On("demote", controllertest.Result{Take: longDemote})
				if err := a.c.Cede(context.Background(), time.Hour); err != nil {
					t.Fatal(err)
				}
				time.Sleep(3 * time.Second)
				synctest.Wait()
				deadline := tc.lose(t, w)

				time.Sleep(10 * time.Second) // past the deadline; b wins and fences a
				b.want(controller.StateLeader)
				d := lastDemote(t, a)
				if !errors.Is(d.Err, controllertest.ErrKilled) {
					t.Errorf("a's demote ended with %v, want killed", d.Err)
				}
				if d.End.After(deadline) {
					t.Errorf("a's demote ended %v after the deadline of the forced path", d.End.Sub(deadline))
				}
				if d.End.Before(deadline.Add(-budget)) {
					t.Errorf("a's demote was killed %v before the deadline: before the term was lost", deadline.Add(-budget).Sub(d.End))
				}
				if f := w.Finishes(); len(f) != 0 {
					t.Errorf("finishes %v: the breadcrumb was deleted after a forced demote", f)
				}
				if targets := b.fence.Targets(); len(targets) != 1 || targets[0].NodeID != "a" {
					t.Errorf("b fenced %v, want a (its graceful demote was forced)", targets)
				}
				if p := firstPromote(b); p.Before(d.End) {
					t.Errorf("b promoted at %v, before a's demote ended at %v", p, d.End)
				}
			})
		})
	}
}

// A demote request (an operator's, or an rpc fence) during a graceful
// demote neither cuts it short nor ends the term: it is answered once the
// graceful demote succeeded, and the handover stays graceful.
func TestDemoteRequestDuringGracefulDemoteWaitsForIt(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", gracefulTimeout(30*time.Second))
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		a.hooks.On("demote", controllertest.Result{Take: longDemote})
		if err := a.c.Cede(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		asked := time.Now()
		o := a.c.Demote(context.Background(), "test")
		if !o.Demoted || o.Err != nil {
			t.Fatalf("Demote() = %+v, want demoted", o)
		}
		d := lastDemote(t, a)
		if d.Err != nil || d.Env.Reason != "ceded" || time.Since(asked) < longDemote-3*time.Second {
			t.Errorf("answered after %v; the demote %s ended with %v: want the graceful one, run to its end", time.Since(asked), d.Env.Reason, d.Err)
		}
		b.want(controller.StateLeader)
		if f := w.Finishes(); len(f) != 1 || len(b.fence.Targets()) != 0 {
			t.Errorf("finishes %v, b fenced %v: want a graceful handover", f, b.fence.Targets())
		}
	})
}

// shutdownTimeout sets node.shutdown_timeout.
func shutdownTimeout(d time.Duration) opt {
	return func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.ShutdownTimeout = d }
}

// A graceful stop whose timeout comes before the graceful demote's end
// kills the demote a kill grace before it, and only then closes the
// session: the term is never released while its demote may still run,
// so the successor (which fences: the demote failed) promotes after it.
func TestGracefulStopTimeoutEndsTheDemoteBeforeTheTerm(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", gracefulTimeout(30*time.Second), shutdownTimeout(10*time.Second))
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		a.hooks.On("demote", controllertest.Result{Take: longDemote})
		stopped := time.Now()
		done := make(chan error, 1)
		go func() { done <- a.stop() }()
		time.Sleep(longDemote + 5*time.Second)
		b.want(controller.StateLeader)
		<-done
		d := lastDemote(t, a)
		if !errors.Is(d.Err, controllertest.ErrKilled) || d.End.After(stopped.Add(10*time.Second)) {
			t.Errorf("a's demote ended at +%v with %v, want killed by the stop's 10s deadline", d.End.Sub(stopped), d.Err)
		}
		if p := firstPromote(b); p.Before(d.End) {
			t.Errorf("b promoted at +%v, before a's demote ended at +%v", p.Sub(stopped), d.End.Sub(stopped))
		}
		if targets := b.fence.Targets(); len(targets) != 1 || targets[0].NodeID != "a" {
			t.Errorf("b fenced %v, want a (its demote was cut short)", targets)
		}
	})
}

// The elector may notice a lapsed lease late (its timer starved): the
// forced demote it then causes is still over by the last cut the loop saw
// while the term was valid, not a demote timeout after the late notice.
func TestLateTermEndDuringGracefulDemoteKeepsTheCut(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", gracefulTimeout(30*time.Second))
		b := start(t, w, "b", gracefulTimeout(30*time.Second))
		b.healthy()
		b.want(controller.StateStandby)
		a.hooks.On("demote", controllertest.Result{Take: longDemote})
		if err := a.c.Cede(context.Background(), time.Hour); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		w.StopRenewalsUnnoticed("a")
		exp, err := w.Term("a").Expiry()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(exp.Add(-700 * time.Millisecond)))
		synctest.Wait()
		w.Expire("a") // the backend notices now, 0.8s after Expiry less the budget
		time.Sleep(10 * time.Second)
		synctest.Wait()
		d := lastDemote(t, a)
		if !errors.Is(d.Err, controllertest.ErrKilled) {
			t.Fatalf("a's demote ended with %v, want killed", d.Err)
		}
		if cut := exp.Add(-500 * time.Millisecond); d.End.After(cut) {
			t.Errorf("a's graceful demote was killed at Expiry%+v, after the cut at Expiry-500ms", d.End.Sub(exp))
		}
	})
}
