package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
	"github.com/failoverd/failoverd/healthcheck"
	"github.com/failoverd/failoverd/internal/proc"
)

// The state machine against the in-memory world (controllertest), in fake
// time (testing/synctest): every transition and every FAILOVERD_REASON.

type node struct {
	t       *testing.T
	id      string
	c       *controller.Controller
	be      *controllertest.Node
	hooks   *controllertest.Hooks
	fence   *controllertest.Fencer
	metrics *controllertest.Metrics
	cancel  context.CancelFunc
	done    chan error
	stopped bool
	err     error
}

// opt changes a node before its Run starts (config, deps, scripts).
type opt func(n *node, cfg *controller.Config, deps *controller.Deps)

func noFencer(_ *node, _ *controller.Config, d *controller.Deps) { d.Fencer = nil }

// script runs f before Run starts: hooks scripted there apply to the
// startup demote too.
func script(f func(n *node)) opt {
	return func(n *node, _ *controller.Config, _ *controller.Deps) { f(n) }
}

// start runs node id in w, healthy unless health says otherwise. Its hooks
// and fencer can be scripted before the first synctest.Wait.
func start(t *testing.T, w *controllertest.World, id string, opts ...opt) *node {
	t.Helper()
	n := &node{t: t, id: id, be: w.Node(id), hooks: controllertest.NewHooks(), fence: &controllertest.Fencer{}, metrics: &controllertest.Metrics{}}
	cfg := controller.Config{
		Cluster: "ct", NodeID: id, Host: "host-" + id, AdminURL: "http://" + id + ":9101", ElectionMode: "fair",
		Demote:     controller.Hook{Timeout: time.Second},
		BackoffMin: time.Second, BackoffMax: 8 * time.Second,
	}
	deps := controller.Deps{Elector: n.be, Records: n.be, Hooks: n.hooks, Fencer: n.fence, Metrics: n.metrics}
	for _, o := range opts {
		o(n, &cfg, &deps)
	}
	c, err := controller.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	n.c = c
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- c.Run(ctx) }()
	t.Cleanup(func() { n.stop() })
	return n
}

func (n *node) healthy()   { n.c.HealthChanged(healthcheck.Initializing, healthcheck.Healthy, nil) }
func (n *node) unhealthy() { n.c.HealthChanged(healthcheck.Healthy, healthcheck.Unhealthy, nil) }

// stop ends Run and returns its error.
func (n *node) stop() error {
	if !n.stopped {
		n.stopped = true
		n.cancel()
		n.err = <-n.done
	}
	return n.err
}

func (n *node) state() controller.State { return n.c.Status().State }

func (n *node) want(s controller.State) {
	n.t.Helper()
	synctest.Wait()
	if got := n.state(); got != s {
		n.t.Fatalf("%s is %s, want %s (hooks %v, metrics %v)", n.id, got, s, n.hooks.Reasons(), n.metrics.Events())
	}
}

func (n *node) wantHooks(want ...string) {
	n.t.Helper()
	synctest.Wait()
	if got := n.hooks.Reasons(); !slices.Equal(got, want) {
		n.t.Fatalf("%s ran hooks %v, want %v", n.id, got, want)
	}
}

// leader starts id and waits until it leads.
func leader(t *testing.T, w *controllertest.World, id string, opts ...opt) *node {
	t.Helper()
	n := start(t, w, id, opts...)
	n.healthy()
	n.want(controller.StateLeader)
	return n
}

func other(id string, epoch int64) *breadcrumb.Record {
	return &breadcrumb.Record{NodeID: id, Host: "host-" + id, AdminURL: "http://" + id + ":9101", Epoch: epoch, Since: time.Unix(1, 0).UTC()}
}

func test(t *testing.T, f func(t *testing.T, w *controllertest.World)) {
	synctest.Test(t, func(t *testing.T) { f(t, controllertest.New()) })
}

func TestStartupDemoteThenJoin(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.want(controller.StateOut) // not healthy yet
		a.wantHooks("demote:startup")
		a.healthy()
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected")
		if bc, _ := w.Breadcrumb(); bc == nil || bc.NodeID != "a" || bc.Epoch != a.c.Status().Epoch {
			t.Fatalf("breadcrumb %+v, want a's at epoch %d", bc, a.c.Status().Epoch)
		}
		time.Sleep(100 * time.Millisecond) // the member record's debounce
		if m, ok := w.Member("a"); !ok || m.State != "leader" {
			t.Errorf("member record %+v, want state leader", m)
		}
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		a.wantHooks("demote:startup", "promote:elected", "demote:shutdown")
		if bc, _ := w.Breadcrumb(); bc != nil || len(w.Finishes()) != 1 {
			t.Errorf("breadcrumb %+v after a graceful stop, finishes %v; want it deleted by one Finish", bc, w.Finishes())
		}
		if s := a.state(); s != controller.StateStopped {
			t.Errorf("state after Run returned: %s", s)
		}
	})
}

// A failed startup demote keeps the node out (its service may still be
// primary from before a crash) and is retried with a growing back-off.
func TestStartupDemoteFailsStaysOutAndRetries(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a", script(func(n *node) {
			n.hooks.On("demote", controllertest.Result{Err: errors.New("boom")}, controllertest.Result{Err: errors.New("boom")})
		}))
		a.healthy()
		a.want(controller.StateOut)
		if st := a.c.Status(); !strings.Contains(st.LastError, "startup demote failed") || len(w.Queue()) != 0 {
			t.Fatalf("last error %q, queue %v", st.LastError, w.Queue())
		}
		time.Sleep(999 * time.Millisecond) // first retry after 1s
		a.wantHooks("demote:startup")
		time.Sleep(time.Millisecond)
		a.wantHooks("demote:startup", "demote:startup")
		time.Sleep(2 * time.Second) // then 2s
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "demote:startup", "demote:startup", "promote:elected")
		if e := a.c.Status().LastError; e != "" {
			t.Errorf("last error not cleared: %q", e)
		}
	})
}

func TestElectedNothingToFencePromotes(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		c := a.hooks.Calls()[1]
		if c.Env.Reason != "elected" || c.Env.Epoch != 1 || c.Env.Previous != nil {
			t.Errorf("promote env %+v", c.Env)
		}
		if len(a.fence.Targets()) != 0 {
			t.Errorf("fenced %v with no breadcrumb", a.fence.Targets())
		}
		for _, m := range []string{"won", "promotion:success", "failover_duration", "leader:true"} {
			if a.metrics.Count(m) != 1 {
				t.Errorf("metric %s counted %d times: %v", m, a.metrics.Count(m), a.metrics.Events())
			}
		}
	})
}

func TestElectedFencesPreviousLeaderEnv(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := leader(t, w, "a")
		if got := a.fence.Targets(); len(got) != 1 || got[0].NodeID != "x" || got[0].Epoch != 7 || got[0].AdminURL != "http://x:9101" {
			t.Fatalf("fenced %+v, want x at epoch 7", got)
		}
		env := a.hooks.Calls()[1].Env
		if env.Previous == nil || env.Previous.NodeID != "x" || env.Previous.Epoch != 7 {
			t.Errorf("promote env %+v, want the previous leader x/7", env)
		}
	})
}

func TestElectedWithoutFencerPromotes(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		leader(t, w, "a", noFencer)
	})
}

// Our own previous term (same id, host and admin URL: a restart) is fenced
// by a local demote, not through our own admin API.
func TestOwnPreviousTermFencedByLocalDemote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("a", 3))
		a := leader(t, w, "a")
		a.wantHooks("demote:startup", "demote:fence_previous_term", "promote:elected")
		if env := a.hooks.Calls()[1].Env; env.Epoch != 3 {
			t.Errorf("local fence env %+v, want epoch 3", env)
		}
		if len(a.fence.Targets()) != 0 {
			t.Errorf("fenced %v", a.fence.Targets())
		}
	})
}

// Same id and host but another admin URL: a duplicate process, fenced.
func TestPreviousTermOnSameHostOtherProcessIsFenced(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		rec := other("a", 3)
		rec.AdminURL = "http://a:9102"
		w.SetBreadcrumb(rec)
		a := leader(t, w, "a")
		a.wantHooks("demote:startup", "promote:elected")
		if got := a.fence.Targets(); len(got) != 1 || got[0].AdminURL != "http://a:9102" {
			t.Errorf("fenced %+v, want the other process", got)
		}
	})
}

func TestOwnPreviousTermDemoteFailsDoesNotPromote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("a", 3))
		a := start(t, w, "a", script(func(n *node) {
			n.hooks.On("demote", controllertest.Result{}, controllertest.Result{Err: errors.New("boom")})
		}))
		a.healthy()
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "demote:fence_previous_term")
		if a.metrics.Count("fencing_failed") != 1 {
			t.Errorf("metrics %v", a.metrics.Events())
		}
		time.Sleep(2 * time.Second) // back-off ≤ 1.2s
		a.want(controller.StateLeader)
	})
}

func TestFenceFailsBacksOffDoesNotPromote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a")
		a.fence.Fail(1)
		a.healthy()
		a.want(controller.StateOut)
		a.wantHooks("demote:startup")
		if st := a.c.Status(); !strings.Contains(st.LastError, "fence failed") || len(w.Queue()) != 0 || len(w.Writes()) != 0 {
			t.Fatalf("last error %q, queue %v, writes %v", st.LastError, w.Queue(), w.Writes())
		}
		if a.metrics.Count("fencing_failed") != 1 {
			t.Errorf("metrics %v", a.metrics.Events())
		}
		time.Sleep(1300 * time.Millisecond)
		a.want(controller.StateLeader)
		if e := a.c.Status().LastError; e != "" {
			t.Errorf("leads, last error still %q", e)
		}
	})
}

func TestBreadcrumbUnreadableRefuses(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumbError(&breadcrumb.CorruptError{Data: []byte("{junk")})
		a := start(t, w, "a")
		a.healthy()
		time.Sleep(20 * time.Second)
		a.wantHooks("demote:startup")
		if a.metrics.Count("breadcrumb_unreadable") < 2 {
			t.Errorf("metrics %v: want every attempt refused and counted", a.metrics.Events())
		}
		w.SetBreadcrumbError(nil) // the operator cleared it
		time.Sleep(10 * time.Second)
		a.want(controller.StateLeader)
	})
}

func TestBreadcrumbWriteRefused(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		once := false
		w.BeforeWrite(func(int64) {
			if !once {
				once = true
				w.SetBreadcrumb(other("x", 99)) // another writer got there first
			}
		})
		a := start(t, w, "a")
		a.healthy()
		a.want(controller.StateOut)
		a.wantHooks("demote:startup")
		time.Sleep(1300 * time.Millisecond)
		a.want(controller.StateLeader)
		if got := a.fence.Targets(); len(got) != 1 || got[0].Epoch != 99 {
			t.Errorf("fenced %+v, want the writer that got there first", got)
		}
	})
}

func TestLeaseExpiresDuringFencing(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a")
		a.fence.Take(5 * time.Second)
		a.healthy()
		a.want(controller.StateFencing)
		w.Expire("a")
		synctest.Wait()
		if len(w.Writes()) != 0 {
			t.Fatalf("breadcrumb written after the lease expired: %v", w.Writes())
		}
		a.wantHooks("demote:startup") // nothing promoted: nothing to demote
		if a.metrics.Count("fencing_failed") != 0 {
			t.Errorf("a fence cut short by the end of the term counted as failed: %v", a.metrics.Events())
		}
		a.fence.Take(0)
		time.Sleep(6 * time.Second) // the next term's fence was already under way
		a.want(controller.StateLeader)
	})
}

func TestLeaseExpiresBetweenBreadcrumbAndPromote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		once := false
		w.AfterWrite(func(int64) {
			if !once {
				once = true
				w.Expire("a")
			}
		})
		a := start(t, w, "a")
		a.healthy()
		a.want(controller.StateLeader) // the next term
		for _, c := range a.hooks.Calls() {
			if c.Name == "promote" && c.Env.Epoch == 1 {
				t.Fatalf("promoted in the term whose lease ran out after the breadcrumb write: %+v", a.hooks.Calls())
			}
		}
		a.wantHooks("demote:startup", "demote:fence_previous_term", "promote:elected")
	})
}

// A node whose elector wins while a manual failover to another node stands
// (its watch has not reported it yet) must not take over.
func TestFailoverToOtherSeenAtTakeover(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.HideFailover(true)
		w.SetFailover(&cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "r1"})
		if err := a.c.Cede(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		b.want(controller.StateOut)
		b.wantHooks("demote:startup")
		for _, r := range w.Writes() {
			if r.NodeID == "b" {
				t.Fatalf("b wrote the breadcrumb while the failover to c stood: %v", w.Writes())
			}
		}
		w.HideFailover(false)
	})
}

func TestPromoteFailsDemotesAndBacksOff(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.hooks.On("promote", controllertest.Result{Err: errors.New("boom")})
		a.healthy()
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:promote_failed")
		if st := a.c.Status(); !strings.Contains(st.LastError, "boom") || len(w.Queue()) != 0 {
			t.Fatalf("last error %q, queue %v", st.LastError, w.Queue())
		}
		if a.metrics.Count("promotion:failure") != 1 {
			t.Errorf("metrics %v", a.metrics.Events())
		}
		time.Sleep(1300 * time.Millisecond)
		a.want(controller.StateLeader)
	})
}

func TestLeaseExpiresDuringPromote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.hooks.On("promote", controllertest.Result{Take: 10 * time.Second})
		a.healthy()
		a.want(controller.StatePromoting)
		w.Expire("a")
		synctest.Wait()
		a.wantHooks("demote:startup", "promote:elected", "demote:promote_failed")
		if c := a.hooks.Calls()[1]; !errors.Is(c.Err, controllertest.ErrKilled) {
			t.Errorf("promote ended with %v, want killed with its term", c.Err)
		}
	})
}

func TestLeaderLeaseExpires(t *testing.T) {
	testLeaderEnds(t, "lease_expired", (*controllertest.World).Expire)
}
func TestLeaderSessionExpires(t *testing.T) {
	testLeaderEnds(t, "session_expired", (*controllertest.World).ExpireSession)
}
func TestLeaderZnodeDeleted(t *testing.T) {
	testLeaderEnds(t, "znode_deleted", (*controllertest.World).DeleteZnode)
}
func TestUnknownCauseReportsUnknown(t *testing.T) {
	testLeaderEnds(t, "unknown", func(w *controllertest.World, id string) { w.EndTerm(id, errors.New("something else")) })
}

// testLeaderEnds ends a leader's term from outside: it demotes with the
// reason, keeps the breadcrumb (the successor fences it), and campaigns on.
func testLeaderEnds(t *testing.T, reason string, end func(*controllertest.World, string)) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		a.hooks.On("demote", controllertest.Result{Take: time.Second})
		end(w, "a")
		a.want(controller.StateDemoting)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := a.hooks.Reasons(); len(got) < 3 || got[2] != "demote:"+reason {
			t.Fatalf("hooks %v, want demote:%s after the promote", got, reason)
		}
		if a.metrics.Count("lost:"+reason) != 1 {
			t.Errorf("metrics %v", a.metrics.Events())
		}
		if len(w.Finishes()) != 0 {
			t.Errorf("breadcrumb deleted after a %s end", reason)
		}
		a.want(controller.StateLeader) // next term: our previous one is fenced locally
	})
}

func TestUnhealthyLeaderDemotesKeepsBreadcrumb(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		a.unhealthy()
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:unhealthy")
		if bc, _ := w.Breadcrumb(); bc == nil || len(w.Queue()) != 0 {
			t.Fatalf("breadcrumb %+v, queue %v: want the breadcrumb kept and the node out", bc, w.Queue())
		}
		a.healthy()
		a.want(controller.StateLeader)
	})
}

func TestHealthFlapsDuringPromoteNoOverlap(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.hooks.Always("promote", &controllertest.Result{Take: time.Second})
		a.hooks.Always("demote", &controllertest.Result{Take: 700 * time.Millisecond})
		a.healthy()
		for range 20 {
			time.Sleep(300 * time.Millisecond)
			a.unhealthy()
			time.Sleep(200 * time.Millisecond)
			a.healthy()
		}
		time.Sleep(30 * time.Second) // back-offs of up to 8s
		a.want(controller.StateLeader)
		if n := a.hooks.Overlaps(); n != 0 {
			t.Fatalf("%d hooks overlapped: %v", n, a.hooks.Reasons())
		}
		// Every promote is followed by a demote before the next one.
		promoted := false
		for _, r := range a.hooks.Reasons() {
			if strings.HasPrefix(r, "promote") {
				if promoted {
					t.Fatalf("two promotes without a demote between: %v", a.hooks.Reasons())
				}
				promoted = true
			} else if promoted && (r == "demote:unhealthy" || r == "demote:promote_failed") {
				promoted = false
			}
		}
	})
}

func TestCedeLeaderFinishesWithOneWrite(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		_, v := w.Breadcrumb()
		if err := a.c.Cede(context.Background(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:ceded")
		if f := w.Finishes(); len(f) != 1 || f[0] != v {
			t.Fatalf("finishes %v, want one at the version written (%d)", f, v)
		}
		time.Sleep(9 * time.Second)
		a.want(controller.StateOut)
		time.Sleep(1100 * time.Millisecond)
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected", "demote:ceded", "promote:elected") // nothing to fence
	})
}

func TestCedeRefusesNonPositive(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		if err := a.c.Cede(context.Background(), 0); err == nil {
			t.Fatal("Cede(0) accepted")
		}
	})
}

func TestDemoteRequestWhileLeader(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		o := a.c.Demote(context.Background(), "test")
		if !o.Demoted || o.Err != nil || o.Epoch != 1 {
			t.Fatalf("Demote() = %+v, want demoted at epoch 1", o)
		}
		a.wantHooks("demote:startup", "promote:elected", "demote:operator_demote")
		if bc, _ := w.Breadcrumb(); bc == nil {
			t.Error("breadcrumb deleted after an operator demote (the successor must fence)")
		}
		a.want(controller.StateOut)
		time.Sleep(9 * time.Second)
		a.want(controller.StateOut) // the holdoff (10s) holds
		time.Sleep(2 * time.Second)
		a.want(controller.StateLeader)
	})
}

func TestDemoteRequestIdleRunsHook(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a") // never healthy: out
		a.want(controller.StateOut)
		o := a.c.Demote(context.Background(), "test")
		if !o.Demoted || o.Err != nil {
			t.Fatalf("Demote() = %+v", o)
		}
		a.wantHooks("demote:startup", "demote:operator_demote")
	})
}

func TestDemoteRequestDuringFencing(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a")
		a.fence.Take(5 * time.Second)
		a.healthy()
		a.want(controller.StateFencing)
		o := a.c.Demote(context.Background(), "test")
		if !o.Demoted {
			t.Fatalf("Demote() = %+v", o)
		}
		a.wantHooks("demote:startup", "demote:operator_demote")
		if len(w.Writes()) != 0 {
			t.Errorf("breadcrumb written: %v", w.Writes())
		}
		a.want(controller.StateOut)
	})
}

// A demote request that arrives while a term runs, after the demote of an
// earlier term failed, is not answered "demoted" until a demote worked.
func TestDemoteAnswerAfterFailedDemote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		a.hooks.Always("demote", &controllertest.Result{Err: errors.New("boom"), Take: time.Second})
		a.unhealthy()
		time.Sleep(2 * time.Second)
		a.want(controller.StateOut)
		a.healthy()
		a.want(controller.StateFencing) // our own previous term: a (failing) local demote
		o := a.c.Demote(context.Background(), "test")
		if o.Demoted || o.Err == nil {
			t.Fatalf("Demote() = %+v while every demote failed since the promotion", o)
		}
		a.hooks.Always("demote", nil)
		if o := a.c.Demote(context.Background(), "test"); !o.Demoted {
			t.Fatalf("Demote() = %+v once the demote works", o)
		}
		if n := slices.Index(a.hooks.Reasons(), "promote:elected"); n != 1 || strings.Count(strings.Join(a.hooks.Reasons(), " "), "promote") != 1 {
			t.Errorf("hooks %v: want exactly one promotion", a.hooks.Reasons())
		}
	})
}

// A daemon restarted after a crash of its leader's host answers a fence of
// that leadership's epoch once a demote worked.
func TestDemoteAnswerEpochAdopted(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("a", 42))
		a := start(t, w, "a")
		a.want(controller.StateOut)
		if e := a.c.Status().Epoch; e != 42 {
			t.Errorf("epoch after the startup demote = %d, want the breadcrumb's 42", e)
		}
		if o := a.c.Demote(context.Background(), "rpc fence"); !o.Demoted || o.Epoch != 42 {
			t.Fatalf("Demote() = %+v, want demoted at epoch 42", o)
		}
	})
}

// A caller that gives up waiting does not cut the demote short: it runs
// within its own timeout (4s here) to its end.
func TestDemoteWaitBoundedByCallerContext(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.Demote.Timeout = 4 * time.Second })
		a.hooks.On("demote", controllertest.Result{Take: 3 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if o := a.c.Demote(ctx, "test"); o.Demoted || o.Err == nil || !strings.Contains(o.Err.Error(), "still running") {
			t.Fatalf("Demote() = %+v, want 'still running' after the caller gave up", o)
		}
		time.Sleep(3 * time.Second)
		a.wantHooks("demote:startup", "promote:elected", "demote:operator_demote") // not cut short
		if c := a.hooks.Calls()[2]; c.Err != nil {
			t.Errorf("demote ended with %v", c.Err)
		}
	})
}

func TestFailoverLeaderHandsOff(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
		b.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected", "demote:failover_handoff")
		if len(w.Finishes()) != 1 || len(b.fence.Targets()) != 0 {
			t.Errorf("finishes %v, b fenced %v: want a graceful handoff", w.Finishes(), b.fence.Targets())
		}
		if r := w.Failover(); r == nil || !r.Done || r.Epoch != b.c.Status().Epoch {
			t.Errorf("request %+v, want it marked done with b's epoch", r)
		}
		a.want(controller.StateStandby) // the target leads: a stands by at once
	})
}

// A node fenced a moment ago (demote hold-off) is out of the election;
// a failover request naming it ends the hold-off, or nobody would lead
// until it ran out: the other nodes stand aside for the request (the bench
// measured 10 s switchovers). It says out, not standby, meanwhile.
func TestFailoverToHeldOffNodeEndsHoldOff(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		if o := b.c.Demote(context.Background(), "fence"); !o.Demoted || o.Err != nil {
			t.Fatalf("Demote() = %+v", o)
		}
		b.want(controller.StateOut)
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
		time.Sleep(time.Second) // far inside the 10 s hold-off
		b.want(controller.StateLeader)
		a.want(controller.StateStandby)
	})
}

func TestFailoverRequestWhileFencing(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a")
		a.fence.Take(5 * time.Second)
		a.healthy()
		a.want(controller.StateFencing)
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
		a.want(controller.StateOut)
		a.wantHooks("demote:startup")
		if len(w.Writes()) != 0 {
			t.Errorf("breadcrumb written: %v", w.Writes())
		}
	})
}

func TestFailoverDoneEndsStandAside(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		w.SetFailover(&cluster.FailoverRequest{To: "ghost", TimeoutMS: 60000, ID: "r1"})
		a.want(controller.StateOut)
		w.SetFailover(&cluster.FailoverRequest{To: "ghost", TimeoutMS: 60000, ID: "r1", Done: true, Epoch: 9})
		a.want(controller.StateLeader)
	})
}

func TestFailoverRequestExpires(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		w.SetFailover(&cluster.FailoverRequest{To: "ghost", TimeoutMS: 1500, ID: "r1"})
		a.want(controller.StateOut)
		time.Sleep(1400 * time.Millisecond)
		a.want(controller.StateOut)
		time.Sleep(200 * time.Millisecond)
		a.want(controller.StateLeader)
		if r := w.Failover(); r != nil {
			t.Errorf("expired request still there: %+v", r)
		}
	})
}

// failover --to b, then --to a: a ends its stand-aside at once.
func TestOverlappingFailoverRequestEndsStandAside(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 120000, ID: "r1"})
		a.want(controller.StateOut)
		w.SetFailover(&cluster.FailoverRequest{To: "a", TimeoutMS: 120000, ID: "r2"})
		a.want(controller.StateLeader)
	})
}

// The end of a stand-aside never cuts an operator's holdoff short (the
// race of TestEndStandAsideKeepsConcurrentCede cannot exist with one owner).
func TestStandAsideEndKeepsOperatorCede(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		w.SetFailover(&cluster.FailoverRequest{To: "ghost", TimeoutMS: 120000, ID: "r1"})
		a.want(controller.StateOut)
		if o := a.c.Demote(context.Background(), "test"); !o.Demoted {
			t.Fatalf("Demote() = %+v", o)
		}
		w.SetFailover(nil)
		time.Sleep(9 * time.Second)
		a.want(controller.StateOut)
		if q := w.Queue(); len(q) != 0 {
			t.Fatalf("rejoined within the holdoff: %v", q)
		}
		time.Sleep(2 * time.Second)
		a.want(controller.StateLeader)
	})
}

func TestFailoverToSelfWarms(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		w.SetFailover(&cluster.FailoverRequest{To: "a", TimeoutMS: 60000, ID: "r1"})
		synctest.Wait()
		if !a.be.Warmed() {
			t.Fatal("not warmed")
		}
		w.SetFailover(nil)
		synctest.Wait()
		if a.be.Warmed() {
			t.Fatal("still warm after the request went")
		}
	})
}

// A promote that cannot be killed ends the term (the successor fences this
// node), blocks every other hook until it is reaped, then a demote must
// work before the node joins again.
func TestUnkillablePromoteReleasesAndRetriesDemote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.hooks.On("promote", controllertest.Result{Unkillable: true})
		a.healthy()
		a.want(controller.StateOut)
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateLeader)
		if got := b.fence.Targets(); len(got) != 1 || got[0].NodeID != "a" {
			t.Fatalf("b fenced %+v, want a", got)
		}
		if st := a.c.Status(); !strings.Contains(st.LastError, "SIGKILL") {
			t.Errorf("last error %q", st.LastError)
		}
		if a.metrics.Count("unkillable:promote") != 1 || a.metrics.Count("lost:hook_unkillable") != 1 {
			t.Errorf("metrics %v", a.metrics.Events())
		}
		if o := a.c.Demote(context.Background(), "test"); o.Demoted || !errors.Is(o.Err, controller.ErrHookStuck) {
			t.Errorf("Demote() = %+v while the hook is stuck", o)
		}
		a.wantHooks("demote:startup", "promote:elected") // nothing ran next to it
		a.hooks.On("demote", controllertest.Result{Err: errors.New("boom")})
		a.hooks.Reap()
		synctest.Wait()
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:hook_unkillable")
		time.Sleep(1100 * time.Millisecond)
		a.wantHooks("demote:startup", "promote:elected", "demote:hook_unkillable", "demote:hook_unkillable")
		time.Sleep(10 * time.Second) // the demote request's holdoff
		a.want(controller.StateStandby)
		if e := a.c.Status().LastError; e != "" {
			t.Errorf("back in the election, last error %q", e)
		}
	})
}

func TestUnkillableDemoteBlocksHooks(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		a.hooks.On("demote", controllertest.Result{Unkillable: true})
		a.unhealthy()
		a.want(controller.StateOut)
		a.healthy()
		time.Sleep(5 * time.Second)
		a.want(controller.StateOut) // stuck: stays out
		a.hooks.Reap()
		synctest.Wait()
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected", "demote:unhealthy", "demote:hook_unkillable", "demote:fence_previous_term", "promote:elected")
	})
}

func TestDuplicateIDWhileLeading(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		a.be.SetPublishError(&cluster.DuplicateIDError{NodeID: "a", Host: "elsewhere"})
		// The member publisher notices within its 30s refresh.
		time.Sleep(31 * time.Second)
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:join_refused")
		if st := a.c.Status(); !strings.Contains(st.LastError, "elsewhere") {
			t.Errorf("last error %q", st.LastError)
		}
		a.be.SetPublishError(nil)
		time.Sleep(31 * time.Second)
		a.want(controller.StateLeader)
		if e := a.c.Status().LastError; e != "" {
			t.Errorf("last error %q", e)
		}
	})
}

func TestModeMismatchKeepsOut(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.Node("a").SetJoinError(&cluster.ModeMismatchError{Mode: "fair", Why: "the cluster record says unfair"})
		a := start(t, w, "a")
		a.healthy()
		time.Sleep(5 * time.Second)
		a.want(controller.StateOut)
		if st := a.c.Status(); !strings.Contains(st.LastError, "unfair") || len(w.Queue()) != 0 {
			t.Fatalf("last error %q, queue %v", st.LastError, w.Queue())
		}
	})
}

// A failure to check (not a verdict) is shown, keeps a node that never
// passed the checks out, and does not throw a leader out.
func TestJoinCheckFailureShown(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.Node("a").SetPublishError(errors.New("no auth"))
		a := start(t, w, "a")
		a.healthy()
		time.Sleep(3 * time.Second)
		a.want(controller.StateOut)
		if st := a.c.Status(); !strings.Contains(st.LastError, "member record") {
			t.Fatalf("last error %q", st.LastError)
		}
		a.be.SetPublishError(nil)
		time.Sleep(2 * time.Second)
		a.want(controller.StateLeader)
		if e := a.c.Status().LastError; e != "" {
			t.Errorf("last error %q", e)
		}
		a.be.SetPublishError(errors.New("connection loss"))
		time.Sleep(31 * time.Second)
		a.want(controller.StateLeader)
	})
}

func TestShutdownAt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pre   func(n *node)
		setup func(t *testing.T, w *controllertest.World, a *node)
		want  string // the last hook run
		bc    bool   // breadcrumb left
	}{
		{"startup", func(n *node) { n.hooks.On("demote", controllertest.Result{Take: time.Second}) },
			// Wait until the startup demote runs (it waits for the pause
			// watch's first report).
			func(t *testing.T, w *controllertest.World, a *node) { synctest.Wait() }, "demote:startup", false},
		{"out", nil, func(t *testing.T, w *controllertest.World, a *node) { a.want(controller.StateOut) }, "demote:startup", false},
		{"standby", nil, func(t *testing.T, w *controllertest.World, a *node) {
			leader(t, w, "x")
			a.healthy()
			a.want(controller.StateStandby)
		}, "demote:startup", false},
		{"fencing", nil, func(t *testing.T, w *controllertest.World, a *node) {
			w.SetBreadcrumb(other("x", 7))
			a.fence.Take(time.Minute)
			a.healthy()
			a.want(controller.StateFencing)
		}, "demote:startup", false},
		{"promoting", nil, func(t *testing.T, w *controllertest.World, a *node) {
			a.hooks.On("promote", controllertest.Result{Take: time.Minute})
			a.healthy()
			a.want(controller.StatePromoting)
		}, "demote:promote_failed", true},
		{"leader", nil, func(t *testing.T, w *controllertest.World, a *node) {
			a.healthy()
			a.want(controller.StateLeader)
		}, "demote:shutdown", false},
		{"demoting", nil, func(t *testing.T, w *controllertest.World, a *node) {
			a.healthy()
			a.want(controller.StateLeader)
			a.hooks.On("demote", controllertest.Result{Take: 2 * time.Second})
			a.unhealthy()
			a.want(controller.StateDemoting)
		}, "demote:unhealthy", true},
		{"stuck", nil, func(t *testing.T, w *controllertest.World, a *node) {
			a.hooks.On("promote", controllertest.Result{Unkillable: true})
			a.healthy()
			a.want(controller.StateOut)
		}, "promote:elected", true}, // its demote is refused: the promote is alive
	} {
		t.Run(tc.name, func(t *testing.T) {
			test(t, func(t *testing.T, w *controllertest.World) {
				var opts []opt
				if tc.pre != nil {
					opts = append(opts, script(tc.pre))
				}
				a := start(t, w, "a", opts...)
				tc.setup(t, w, a)
				if err := a.stop(); err != nil {
					t.Fatalf("Run() = %v", err)
				}
				if got := a.hooks.Reasons(); got[len(got)-1] != tc.want {
					t.Errorf("hooks %v, want the last one %s", got, tc.want)
				}
				if bc, _ := w.Breadcrumb(); (bc != nil && bc.NodeID == "a") != tc.bc {
					t.Errorf("breadcrumb %+v; want one of a's: %v", bc, tc.bc)
				}
				if a.state() != controller.StateStopped || slices.Contains(w.Queue(), "a") {
					t.Errorf("state %s, queue %v after Run returned", a.state(), w.Queue())
				}
				a.hooks.Reap()
			})
		})
	}
}

// A demote that outlives its kill by far (the graceful stop kills it a
// kill grace before its deadline) makes the stop time out; past the
// deadline the loop waits for the killed hook only as long as a real one
// can take to go (its kill grace, proc.ReapWait, a second of slack).
func TestShutdownTimeoutReturnsError(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		a.hooks.On("demote", controllertest.Result{Take: 45 * time.Second, KillTake: 20 * time.Second})
		start := time.Now()
		err := a.stop()
		if err == nil || !strings.Contains(err.Error(), "graceful stop took longer") {
			t.Fatalf("Run() = %v", err)
		}
		if d, want := time.Since(start), 30*time.Second+250*time.Millisecond+proc.ReapWait+time.Second; d != want {
			t.Errorf("gave up after %v, want the 30s default and %v for the killed hook to go", d, want-30*time.Second)
		}
		time.Sleep(20 * time.Second) // let the hook end inside the bubble
	})
}

func TestDemoteBudgetRefusesTerm(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetGuarantee(1200 * time.Millisecond) // < the 1.5s demote budget
		a := start(t, w, "a")
		a.healthy()
		time.Sleep(10 * time.Second)
		a.wantHooks("demote:startup")
		if st := a.c.Status(); !strings.Contains(st.LastError, "demote budget") {
			t.Errorf("last error %q", st.LastError)
		}
	})
}

// The back-off after a failed takeover doubles (with ±20% jitter) and a
// takeover that works resets it.
func TestBackoffDoublesAndResets(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a")
		a.fence.Fail(3)
		a.healthy()
		time.Sleep(20 * time.Second)
		a.want(controller.StateLeader)
		checkPauses := func(times []time.Time, want ...time.Duration) {
			t.Helper()
			if len(times) != len(want)+1 {
				t.Fatalf("fences at %v, want %d", times, len(want)+1)
			}
			for i, d := range want {
				if got := times[i+1].Sub(times[i]); got < d*8/10 || got > d*12/10 {
					t.Errorf("pause %d: %v, want %v ±20%%", i+1, got, d)
				}
			}
		}
		checkPauses(a.fence.Times(), time.Second, 2*time.Second, 4*time.Second)
		// Reset: after a takeover that worked, the next failure pauses 1s.
		a.unhealthy()
		synctest.Wait()
		w.SetBreadcrumb(other("x", 8))
		a.fence.Fail(1)
		a.healthy()
		time.Sleep(10 * time.Second)
		a.want(controller.StateLeader)
		checkPauses(a.fence.Times()[4:], time.Second)
	})
}

func TestStatusDoesNotBlockDuringHook(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.hooks.On("promote", controllertest.Result{Take: time.Hour})
		a.healthy()
		synctest.Wait() // the loop is idle, the promote runs
		if st := a.c.Status(); st.State != controller.StatePromoting || st.Epoch != 1 || st.LeaseRemaining <= 0 {
			t.Fatalf("status %+v", st)
		}
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMemberNotWrittenWhileBusy(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.hooks.On("promote", controllertest.Result{Take: 10 * time.Second})
		a.healthy()
		a.want(controller.StatePromoting)
		time.Sleep(time.Second)
		if m, _ := w.Member("a"); m.State == "fencing" || m.State == "promoting" {
			t.Errorf("member state %q while promoting, want the last state written before the takeover", m.State)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if m, _ := w.Member("a"); m.State != "leader" {
			t.Errorf("member state %q, want leader", m.State)
		}
	})
}

func TestTwoNodesExactlyOneLeads(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		b.want(controller.StateLeader)
		if len(b.fence.Targets()) != 0 {
			t.Errorf("b fenced %v after a graceful stop", b.fence.Targets())
		}
		w.ExpireSession("b")
		c := start(t, w, "c")
		c.healthy()
		synctest.Wait()
		if (b.state() == controller.StateLeader) == (c.state() == controller.StateLeader) {
			t.Fatalf("b is %s, c is %s: want exactly one leader", b.state(), c.state())
		}
		if c.state() == controller.StateLeader && len(c.fence.Targets()) != 1 {
			t.Errorf("c leads after b's session expired without fencing b: %v", c.fence.Targets())
		}
	})
}

// FuzzLoop drives two nodes with random events (health, cede, demote
// requests, term ends, failover requests, failing hooks and fences, failing
// and slow follow hooks) and a third that only follows, and checks after
// each step: no two hooks of a node overlap (follow included), every
// promote follows a breadcrumb write of its own epoch by that node, at most
// one node reports itself leader with a valid term, and every follow run
// starts outside its node's terms, never towards its own node, and only
// towards a leader whose promote of that epoch had succeeded.
func FuzzLoop(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{3, 3, 7, 7, 1, 0, 9, 2, 5, 5, 11, 4, 6, 8, 10})
	f.Add([]byte{26, 27, 24, 8, 9, 25, 0, 26, 3, 27, 10, 11, 2, 24})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		test(t, func(t *testing.T, w *controllertest.World) {
			w.SetBreadcrumb(other("x", 1))
			nodes := []*node{start(t, w, "a", following(2*time.Second), prePromote()), start(t, w, "b", following(2*time.Second)), start(t, w, "c", following(0))}
			for _, n := range nodes {
				n.healthy()
			}
			for i, op := range ops {
				n := nodes[int(op)%2]
				if k := op / 2 % 15; k == 12 || k == 13 {
					n = nodes[int(op)%3] // c, never healthy, only follows
				}
				switch op / 2 % 15 {
				case 0:
					n.unhealthy()
				case 1:
					n.healthy()
				case 2:
					go n.c.Cede(context.Background(), time.Duration(op%5+1)*time.Second)
				case 3:
					go n.c.Demote(context.Background(), "fuzz")
				case 4:
					if w.Term(n.id) != nil {
						w.Expire(n.id)
					}
				case 5:
					if w.Term(n.id) != nil {
						w.ExpireSession(n.id)
					}
				case 6:
					w.SetFailover(&cluster.FailoverRequest{To: n.id, TimeoutMS: 3000, ID: fmt.Sprint(i)})
				case 7:
					w.SetFailover(nil)
				case 8:
					n.hooks.On("promote", controllertest.Result{Err: errors.New("fuzz"), Take: 300 * time.Millisecond})
				case 9:
					n.hooks.On("demote", controllertest.Result{Err: errors.New("fuzz"), Take: 200 * time.Millisecond})
				case 10:
					n.fence.Fail(1)
				case 11:
					n.hooks.On("promote", controllertest.Result{Take: 2 * time.Second})
				case 12:
					n.hooks.On("follow", controllertest.Result{Err: errors.New("fuzz"), Take: 500 * time.Millisecond})
				case 13:
					n.hooks.On("follow", controllertest.Result{Take: 3 * time.Second, KillTake: 250 * time.Millisecond})
				case 14:
					// a vetoes (b has no pre_promote hook: the script stays unused).
					n.hooks.On("pre_promote", controllertest.Result{Err: errors.New("fuzz veto"), Take: time.Duration(op%3) * 200 * time.Millisecond})
				}
				time.Sleep(time.Duration(op%7) * 150 * time.Millisecond)
				synctest.Wait()
				checkInvariants(t, w, nodes)
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			checkInvariants(t, w, nodes)
		})
	})
}

func checkInvariants(t *testing.T, w *controllertest.World, nodes []*node) {
	t.Helper()
	leaders := 0
	for _, n := range nodes {
		if k := n.hooks.Overlaps(); k != 0 {
			t.Fatalf("%s: %d overlapping hooks: %v", n.id, k, n.hooks.Reasons())
		}
		for _, c := range n.hooks.Calls() {
			if c.Name != "promote" {
				continue
			}
			// Its own write.
			stored := w.Writes()
			if !slices.ContainsFunc(stored, func(r breadcrumb.Record) bool { return r.NodeID == n.id && r.Epoch == c.Env.Epoch }) {
				t.Fatalf("%s promoted at epoch %d without a breadcrumb naming it (writes %v)", n.id, c.Env.Epoch, stored)
			}
		}
		checkPrePromote(t, w, n)
		checkFollows(t, w, n, nodes)
		if n.state() == controller.StateLeader {
			if tm := w.Term(n.id); tm != nil {
				if _, err := tm.Expiry(); err != nil {
					continue
				}
				leaders++
			}
		}
	}
	if leaders > 1 {
		t.Fatalf("%d nodes lead with a valid term", leaders)
	}
}

// checkPrePromote: a pre_promote that failed (a veto, or killed with its
// term) is never followed by a breadcrumb write or a promote in that term,
// and when n has the hook, every promote follows a pre_promote that
// succeeded in its term.
func checkPrePromote(t *testing.T, w *controllertest.World, n *node) {
	t.Helper()
	calls := n.hooks.Calls()
	has := slices.ContainsFunc(calls, func(c controllertest.Call) bool { return c.Name == "pre_promote" })
	for _, c := range calls {
		switch {
		case c.Name == "pre_promote" && c.Err != nil:
			if slices.ContainsFunc(calls, func(p controllertest.Call) bool { return p.Name == "promote" && p.Env.Epoch == c.Env.Epoch }) {
				t.Fatalf("%s promoted at epoch %d after its pre_promote failed (%v): %v", n.id, c.Env.Epoch, c.Err, n.hooks.Reasons())
			}
			if slices.ContainsFunc(w.Writes(), func(r breadcrumb.Record) bool { return r.NodeID == n.id && r.Epoch == c.Env.Epoch }) {
				t.Fatalf("%s wrote its breadcrumb at epoch %d after its pre_promote failed (%v)", n.id, c.Env.Epoch, c.Err)
			}
		case c.Name == "promote" && has:
			if !slices.ContainsFunc(calls, func(p controllertest.Call) bool {
				return p.Name == "pre_promote" && p.Env.Epoch == c.Env.Epoch && p.Err == nil && !p.End.IsZero() && !p.End.After(c.At)
			}) {
				t.Fatalf("%s promoted at epoch %d without a pre_promote that passed: %v", n.id, c.Env.Epoch, n.hooks.Reasons())
			}
		}
	}
}

// checkFollows: n's follow runs never start in one of n's terms, never
// target n, and target only a leader whose promote of that epoch had
// ended successfully before the run started.
func checkFollows(t *testing.T, w *controllertest.World, n *node, nodes []*node) {
	t.Helper()
	spans := w.Spans()
	for _, c := range n.hooks.Calls() {
		if c.Name != "follow" {
			continue
		}
		for _, s := range spans {
			// A follow may start at the very instant the elector calls won,
			// before the loop heard of the term (it stops it then); after
			// that instant, none may start until the term was released.
			if s.Node == n.id && c.At.After(s.From) && (s.To.IsZero() || c.At.Before(s.To)) {
				t.Fatalf("%s started a follow at %v inside its term %d (%v..%v): %v", n.id, c.At, s.Epoch, s.From, s.To, n.hooks.Reasons())
			}
		}
		ld := c.Env.Leader
		if ld == nil {
			continue
		}
		if ld.NodeID == n.id {
			t.Fatalf("%s followed itself: %+v", n.id, ld)
		}
		i := slices.IndexFunc(nodes, func(m *node) bool { return m.id == ld.NodeID })
		if i < 0 || !slices.ContainsFunc(nodes[i].hooks.Calls(), func(p controllertest.Call) bool {
			return p.Name == "promote" && p.Env.Epoch == ld.Epoch && p.Err == nil && !p.End.IsZero() && !p.End.After(c.At)
		}) {
			t.Fatalf("%s followed %s at epoch %d at %v, which had not been promoted", n.id, ld.NodeID, ld.Epoch, c.At)
		}
	}
}
