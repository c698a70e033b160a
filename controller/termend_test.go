package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
	"github.com/failoverd/failoverd/internal/proc/proctest"
)

// How a term ends when its backend does not end it, or ends it while a
// hook runs: the controller's own timer at the term's Expiry less the
// demote budget, the forced demote's time counted from the loss, and the
// graceful stop's deadline, which releases the term only once its hook is
// gone.

// testBudget is the demote budget of the test nodes: kill graces 250ms +
// demote timeout 1s + 250ms.
const testBudget = 1500 * time.Millisecond

// A promoted leader at rest whose backend never ends its term (renewals
// stop, Expiry passes, the term's context stays live): the controller
// demotes by the Expiry less the demote budget, as for a lease lost, and
// its forced demote is over by the Expiry; the successor promotes after
// it, fencing (the breadcrumb stays).
func TestLeaderAtRestDemotesByItsExpiryWhenTheBackendDoesNot(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		a.hooks.On("demote", controllertest.Result{Take: time.Minute}) // overruns: killed by the forced path
		time.Sleep(3 * time.Second)
		synctest.Wait()
		w.StopRenewalsUnnoticed("a")
		exp, err := w.Term("a").Expiry()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(exp) + time.Second)
		synctest.Wait()
		if got := a.state(); got == controller.StateLeader {
			t.Fatalf("a is still %s %v after its term's Expiry (its context never ended)", got, time.Since(exp))
		}
		d := demoteFor(t, a, "lease_expired")
		if late := d.At.Sub(exp.Add(-testBudget)); late > 0 {
			t.Errorf("a's demote started %v after its Expiry less the demote budget", late)
		}
		if d.End.IsZero() || d.End.After(exp) {
			t.Errorf("a's demote ended at Expiry%+v (err %v), want it over by the Expiry", d.End.Sub(exp), d.Err)
		}
		if a.metrics.Count("lost:lease_expired") != 1 {
			t.Errorf("a's metrics %v, want one lost:lease_expired", a.metrics.Events())
		}
		time.Sleep(5 * time.Second)
		b.want(controller.StateLeader)
		if p := firstPromote(b); p.Before(d.End) {
			t.Errorf("b promoted at Expiry%+v, before a's demote ended at Expiry%+v", p.Sub(exp), d.End.Sub(exp))
		}
		if targets := b.fence.Targets(); len(targets) != 1 || targets[0].NodeID != "a" {
			t.Errorf("b fenced %v, want a", targets)
		}
	})
}

// The in-memory world itself ends a term whose renewals stopped by its
// Expiry less its demote budget (the contract's obligation): the leader
// demotes then, not later.
func TestWorldEndsATermWhoseRenewalsStopped(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		w.StopRenewals("a")
		exp, err := w.Term("a").Expiry()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(exp))
		synctest.Wait()
		d := demoteFor(t, a, "lease_expired")
		if d.At.After(exp.Add(-w.DemoteBudget())) {
			t.Errorf("a's lease_expired demote began at Expiry%+v; want by Expiry-%v", d.At.Sub(exp), w.DemoteBudget())
		}
	})
}

// A term lost while its promote runs, whose promote takes long to go
// after its kill: the demote after it has what is left of the forced
// path's time counted from the loss (the promote's kill grace, then the
// demote timeout), not a whole demote timeout from its own late start.
func TestTermLostDuringPromoteCountsTheDemoteFromTheLoss(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.want(controller.StateOut) // the startup demote ran
		a.hooks.On("promote", controllertest.Result{Take: time.Minute, KillTake: time.Second})
		a.hooks.On("demote", controllertest.Result{Take: time.Minute})
		a.healthy()
		a.want(controller.StatePromoting)
		time.Sleep(500 * time.Millisecond)
		lost := time.Now()
		w.Expire("a")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		d := demoteFor(t, a, "promote_failed")
		if !d.At.After(lost) {
			t.Fatalf("a's demote started at %v, not after the loss", d.At.Sub(lost))
		}
		if d.End.IsZero() {
			t.Errorf("a's demote (started %v after the loss, timeout %v) still runs %v after the loss", d.At.Sub(lost), d.Env.Timeout, time.Since(lost))
		} else if d.End.After(lost.Add(testBudget)) {
			t.Errorf("a's demote (started %v after the loss, timeout %v) ended %v after it (err %v), want by the demote budget %v",
				d.At.Sub(lost), d.Env.Timeout, d.End.Sub(lost), d.Err, testBudget)
		}
		if want := lost.Add(testBudget - 250*time.Millisecond).Sub(d.At); d.Env.Timeout <= 0 || d.Env.Timeout > want {
			t.Errorf("a's demote had timeout %v, want what the forced path has left (%v)", d.Env.Timeout, want)
		}
	})
}

// reapedHooks runs real hook processes and records when each run ended:
// proc.Run returns once the process was waited for (or given up on).
type reapedHooks struct {
	controller.Hooks
	mu   sync.Mutex
	ends map[string]time.Time // the last end of each hook
	runs map[string]int       // runs started
}

func (h *reapedHooks) Run(ctx context.Context, name string, env controller.HookEnv) (<-chan struct{}, error) {
	h.mu.Lock()
	h.runs[name]++
	h.mu.Unlock()
	reaped, err := h.Hooks.Run(ctx, name, env)
	h.mu.Lock()
	h.ends[name] = time.Now()
	h.mu.Unlock()
	return reaped, err
}

func (h *reapedHooks) last(name string) (int, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[name], h.ends[name]
}

// At the graceful stop's deadline the graceful demote is killed; a demote
// process that goes only a while after its SIGKILL (here: traced, so its
// parent cannot reap it until the tracer lets go) keeps the term, and its
// election entry, until it is gone: the won callback returns, and Run,
// only after the hook's run ended. Real processes, real time.
func TestGracefulStopDeadlineKeepsTheEntryUntilTheHookIsGone(t *testing.T) {
	snippet, release := proctest.Unkillable(t)
	stuck := filepath.Join(t.TempDir(), "stuck")
	demote := proctest.Script(t, fmt.Sprintf("if [ -e %q ]; then\n%s\nfi\n", stuck, snippet))
	const stopTimeout = 4 * time.Second
	const hold = 600 * time.Millisecond // how long after its SIGKILL the demote is held
	w := controllertest.New()
	var hooks *reapedHooks
	a := start(t, w, "a", func(n *node, cfg *controller.Config, deps *controller.Deps) {
		cfg.Demote = controller.Hook{Argv: []string{demote}, Timeout: time.Second}
		cfg.GracefulDemoteTimeout = 30 * time.Second
		cfg.ShutdownTimeout = stopTimeout
		hooks = &reapedHooks{Hooks: controller.ProcHooks{Demote: cfg.Demote, Cluster: "ct", NodeID: "a"},
			ends: map[string]time.Time{}, runs: map[string]int{}}
		deps.Hooks = hooks
	})
	a.healthy()
	waitUntilState(t, a, controller.StateLeader)
	if err := os.WriteFile(stuck, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	done := make(chan error, 1)
	go func() { done <- a.stop() }()
	deadline := stopped.Add(stopTimeout)
	time.Sleep(time.Until(deadline.Add(hold)))
	release() // the demote, killed at the deadline, can be reaped now
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of the graceful stop's deadline")
	}
	returned := time.Now()
	runs, end := hooks.last("demote")
	if runs != 2 {
		t.Fatalf("%d demote runs, want the startup one and the graceful one", runs)
	}
	if end.Before(deadline.Add(hold / 2)) {
		t.Fatalf("the graceful demote ended %v after the stop's deadline: the tracer did not hold it after its SIGKILL (ptrace not permitted?)",
			end.Sub(deadline))
	}
	if err == nil {
		t.Errorf("Run() = nil after a graceful stop that timed out")
	}
	spans := w.Spans()
	if len(spans) != 1 || spans[0].To.IsZero() {
		t.Fatalf("terms %+v, want a's one, released", spans)
	}
	t.Logf("demote ended %v after the deadline; a's term released %v after it; Run returned %v after it",
		end.Sub(deadline), spans[0].To.Sub(deadline), returned.Sub(deadline))
	if spans[0].To.Before(end) {
		t.Errorf("a's term was released (its election entry deleted) %v before its demote hook was gone", end.Sub(spans[0].To))
	}
	if returned.Before(end) {
		t.Errorf("Run returned %v before the demote hook was gone", end.Sub(returned))
	}
}

// demoteFor is n's first demote run for reason.
func demoteFor(t *testing.T, n *node, reason string) controllertest.Call {
	t.Helper()
	for _, c := range n.hooks.Calls() {
		if c.Name == "demote" && c.Env.Reason == reason {
			return c
		}
	}
	t.Fatalf("%s ran no demote for %s: %v", n.id, reason, n.hooks.Reasons())
	return controllertest.Call{}
}

// waitUntilState polls n's state outside a synctest bubble.
func waitUntilState(t *testing.T, n *node, s controller.State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n.state() != s {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s after 30s, want %s", n.id, n.state(), s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
