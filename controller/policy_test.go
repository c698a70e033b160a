package controller_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
	"github.com/failoverd/failoverd/internal/proc"
)

// The promotion policy: node.priority 0 and the pre_promote veto.

func priority(p int) opt {
	return func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.Priority = &p }
}

func prePromote() opt {
	return func(_ *node, cfg *controller.Config, _ *controller.Deps) {
		cfg.PrePromote = &controller.Hook{Timeout: 5 * time.Second}
	}
}

// A priority-0 node never campaigns, whatever happens to the others, yet
// it publishes its member record (with its priority), follows the leader,
// and ignores a failover request naming it.
func TestPriorityZeroNeverLeads(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		c := start(t, w, "c", priority(0), following(time.Second))
		c.healthy()
		c.want(controller.StateOut)
		if q := w.Queue(); len(q) != 0 {
			t.Fatalf("queue %v: a priority-0 node campaigned", q)
		}
		b := leader(t, w, "b")
		time.Sleep(100 * time.Millisecond)
		c.want(controller.StateOut)
		if f := c.follows(); len(f) == 0 || !strings.HasSuffix(f[len(f)-1], ":b@1") {
			t.Errorf("c follows %v, want it to follow b", f)
		}
		m, ok := w.Member("c")
		if !ok || m.Priority == nil || *m.Priority != 0 || m.MayLead() || m.Health != "healthy" {
			t.Fatalf("member record of c %+v, want priority 0, healthy", m)
		}
		if st := c.c.Status(); st.Priority != 0 {
			t.Errorf("status priority %d", st.Priority)
		}
		if bm, _ := w.Member("b"); bm.Priority == nil || *bm.Priority != 1 {
			t.Errorf("member record of b %+v, want the default priority 1", bm)
		}

		// A failover request naming c (the CLI refuses it) is refused by
		// c: it deletes the request at once, so the others do not stand
		// aside for a failover that cannot happen.
		w.SetFailover(&cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "1"})
		synctest.Wait()
		if c.be.Warmed() {
			t.Error("c warms up for a failover it must refuse")
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if f := w.Failover(); f != nil {
			t.Errorf("the request naming priority-0 c still stands: %+v", f)
		}
		b.want(controller.StateLeader)

		// The leader goes: nobody leads, c stays out.
		b.unhealthy()
		time.Sleep(10 * time.Second)
		b.want(controller.StateOut)
		c.want(controller.StateOut)
		if l := w.Leader(); l != "" || len(w.Queue()) != 0 {
			t.Fatalf("leader %q, queue %v with only the priority-0 node healthy", l, w.Queue())
		}
		c.wantHooks(append([]string{"demote:startup"}, c.followHooks()...)...)
		b.healthy()
		b.want(controller.StateLeader)
		c.want(controller.StateOut)
	})
}

// followHooks lists n's follow hook runs as "follow:reason".
func (n *node) followHooks() []string {
	var out []string
	for _, r := range n.hooks.Reasons() {
		if strings.HasPrefix(r, "follow:") {
			out = append(out, r)
		}
	}
	return out
}

func TestNegativePriorityRefused(t *testing.T) {
	p := -1
	_, err := controller.New(controller.Config{Cluster: "ct", NodeID: "a", Priority: &p},
		controller.Deps{Elector: controllertest.New().Node("a"), Records: controllertest.New().Node("a"), Hooks: controllertest.NewHooks(), Metrics: &controllertest.Metrics{}})
	if err == nil {
		t.Fatal("priority -1 accepted")
	}
}

// The pre_promote hook runs after fencing and before the breadcrumb write;
// success promotes as before.
func TestPrePromoteRunsBetweenFenceAndBreadcrumb(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 3))
		var writeAt time.Time
		w.BeforeWrite(func(int64) { writeAt = time.Now() })
		a := start(t, w, "a", prePromote())
		a.hooks.On("pre_promote", controllertest.Result{Take: time.Second})
		a.fence.Take(time.Second)
		a.healthy()
		a.want(controller.StateFencing)
		time.Sleep(1500 * time.Millisecond)
		if len(w.Writes()) != 0 {
			t.Fatalf("breadcrumb written while pre_promote runs: %v", w.Writes())
		}
		time.Sleep(time.Second)
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "pre_promote:elected", "promote:elected")
		calls := a.hooks.Calls()
		pre := calls[1]
		if pre.Env.Previous == nil || pre.Env.Previous.NodeID != "x" || pre.Env.Epoch != a.c.Status().Epoch {
			t.Errorf("pre_promote env %+v, want epoch %d and previous x", pre.Env, a.c.Status().Epoch)
		}
		if ft := a.fence.Times(); len(ft) != 1 || pre.At.Sub(ft[0]) < time.Second {
			t.Errorf("fenced at %v, pre_promote started at %v: want the fence first", ft, pre.At)
		}
		if writeAt.Before(pre.End) {
			t.Errorf("breadcrumb written at %v, before pre_promote ended at %v", writeAt, pre.End)
		}
	})
}

// With nothing to fence, the read step must not write the breadcrumb at
// once: pre_promote comes first.
func TestPrePromoteBeforeWriteWithNothingToFence(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		var writeAt time.Time
		w.BeforeWrite(func(int64) { writeAt = time.Now() })
		a := start(t, w, "a", prePromote())
		a.hooks.On("pre_promote", controllertest.Result{Take: time.Second})
		a.healthy()
		time.Sleep(2 * time.Second)
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "pre_promote:elected", "promote:elected")
		if pre := a.hooks.Calls()[1]; writeAt.Before(pre.End) {
			t.Errorf("breadcrumb written at %v, before pre_promote ended at %v", writeAt, pre.End)
		}
	})
}

// A veto (non-zero exit, or a timeout, which the hook runner reports as an
// error) writes no breadcrumb and promotes nothing; the node gives the term
// back, backs off, says why, counts it; another node takes over.
func TestPrePromoteVetoBacksOffAndAnotherTakesOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  controllertest.Result
	}{
		{"exit", controllertest.Result{Err: errors.New("exit status 1")}},
		{"timeout", controllertest.Result{Err: context.DeadlineExceeded, Take: 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			test(t, func(t *testing.T, w *controllertest.World) {
				w.SetBreadcrumb(other("x", 3))
				a := start(t, w, "a", prePromote())
				a.hooks.Always("pre_promote", &tc.res)
				a.healthy()
				synctest.Wait()
				b := start(t, w, "b")
				b.healthy()
				time.Sleep(tc.res.Take)
				a.want(controller.StateOut)
				b.want(controller.StateLeader)
				a.wantHooks("demote:startup", "pre_promote:elected")
				for _, r := range w.Writes() {
					if r.NodeID == "a" {
						t.Fatalf("a wrote its breadcrumb after a veto: %v", w.Writes())
					}
				}
				if a.metrics.Count("pre_promote_veto") != 1 {
					t.Errorf("metrics %v, want one pre_promote_veto", a.metrics.Events())
				}
				if e := a.c.Status().LastError; !strings.Contains(e, "pre_promote hook vetoed") {
					t.Errorf("last error %q", e)
				}
				// The back-off (1s, jittered) ends; a stands by behind b.
				time.Sleep(3 * time.Second)
				a.want(controller.StateStandby)
			})
		})
	}
}

// Alone, a vetoing node backs off with a growing delay and tries again;
// once the hook passes, it promotes.
func TestPrePromoteVetoRetriesWithBackoff(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a", prePromote())
		a.hooks.On("pre_promote", controllertest.Result{Err: errors.New("exit status 1")}, controllertest.Result{Err: errors.New("exit status 1")})
		a.healthy()
		time.Sleep(10 * time.Second)
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "pre_promote:elected", "pre_promote:elected", "pre_promote:elected", "promote:elected")
		calls := a.hooks.Calls()
		if gap1, gap2 := calls[2].At.Sub(calls[1].At), calls[3].At.Sub(calls[2].At); gap1 < 800*time.Millisecond || gap2 < 1600*time.Millisecond {
			t.Errorf("retries after %v and %v, want a growing back-off (>= 0.8s, >= 1.6s)", gap1, gap2)
		}
		if e := a.c.Status().LastError; e != "" {
			t.Errorf("last error %q after promoting", e)
		}
	})
}

// A pre_promote that outlives SIGKILL: no breadcrumb, no promote; the node
// stays out until it is reaped, then takes over normally.
func TestPrePromoteUnkillable(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a", prePromote())
		a.hooks.On("pre_promote", controllertest.Result{Err: proc.ErrUnkillable, Unkillable: true})
		a.healthy()
		time.Sleep(5 * time.Second)
		a.want(controller.StateOut)
		if len(w.Writes()) != 0 || len(w.Queue()) != 0 {
			t.Fatalf("writes %v, queue %v while the pre_promote is stuck", w.Writes(), w.Queue())
		}
		a.hooks.Reap()
		time.Sleep(5 * time.Second)
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "pre_promote:elected", "pre_promote:elected", "promote:elected")
	})
}

// The term ends while pre_promote runs: the hook is killed, nothing is
// written, and it is not counted as a veto.
func TestLeaseExpiresDuringPrePromote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a", prePromote())
		a.hooks.On("pre_promote", controllertest.Result{Take: 5 * time.Second})
		a.healthy()
		a.want(controller.StateFencing)
		w.Expire("a")
		synctest.Wait()
		if slices.ContainsFunc(w.Writes(), func(r breadcrumb.Record) bool { return r.Epoch == 1 }) || a.metrics.Count("pre_promote_veto") != 0 {
			t.Fatalf("writes %v, metrics %v after the term ended during pre_promote", w.Writes(), a.metrics.Events())
		}
		a.want(controller.StateLeader) // the next term
		if !slices.ContainsFunc(w.Writes(), func(r breadcrumb.Record) bool { return r.NodeID == "a" && r.Epoch == a.c.Status().Epoch }) {
			t.Errorf("writes %v", w.Writes())
		}
	})
}
