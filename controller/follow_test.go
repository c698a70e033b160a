package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
	"github.com/failoverd/failoverd/healthcheck"
)

// The follow hook (follow.go) against the in-memory world, in fake time.

// following configures the follow hook (noLeaderAfter 0: never run it
// without a leader).
func following(noLeaderAfter time.Duration) opt {
	return func(_ *node, cfg *controller.Config, _ *controller.Deps) {
		cfg.Follow = &controller.Follow{Hook: controller.Hook{Timeout: 30 * time.Second}, NoLeaderAfter: noLeaderAfter}
	}
}

// follows lists n's follow runs as "reason:leader@epoch" ("reason:-" with
// no leader).
func (n *node) follows() []string {
	var out []string
	for _, c := range n.hooks.Calls() {
		if c.Name != "follow" {
			continue
		}
		if ld := c.Env.Leader; ld != nil {
			out = append(out, fmt.Sprintf("%s:%s@%d", c.Env.Reason, ld.NodeID, ld.Epoch))
		} else {
			out = append(out, c.Env.Reason+":-")
		}
	}
	return out
}

// wantFollows checks n's follow runs after the member records' debounce
// (the leader is seen once its record says leader).
func (n *node) wantFollows(want ...string) {
	n.t.Helper()
	time.Sleep(100 * time.Millisecond)
	synctest.Wait()
	if got := n.follows(); !slices.Equal(got, want) {
		n.t.Fatalf("%s ran follows %v, want %v (all hooks %v)", n.id, got, want, n.hooks.Reasons())
	}
}

// call returns n's first hook run named name with reason, or fails.
func (n *node) call(name, reason string) controllertest.Call {
	n.t.Helper()
	for _, c := range n.hooks.Calls() {
		if c.Name == name && c.Env.Reason == reason {
			return c
		}
	}
	n.t.Fatalf("%s never ran %s:%s (hooks %v)", n.id, name, reason, n.hooks.Reasons())
	return controllertest.Call{}
}

// Start-up: a standby follows the leader once it is known; a crash of the
// leader makes every surviving standby follow the new leader, only after
// its promote ended, and never the new leader itself; the old leader
// follows it after its own demote.
func TestFollowStartupLeaderChangeAndDemote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", following(0))
		a.wantFollows() // never towards itself
		b := start(t, w, "b", following(0))
		c := start(t, w, "c", following(0)) // never healthy: out of the election
		b.healthy()
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1")
		c.wantFollows("startup:a@1") // out of the election: follows all the same
		if env := b.call("follow", "startup").Env; env.Leader.Host != "host-a" {
			t.Errorf("follow env %+v", env.Leader)
		}

		// a's session expires (a crash): b takes over, fences a, promotes.
		b.hooks.On("promote", controllertest.Result{Take: 3 * time.Second})
		w.ExpireSession("a")
		a.unhealthy() // a stays out once it demoted
		b.want(controller.StatePromoting)
		c.wantFollows("startup:a@1") // no leader while b promotes
		time.Sleep(4 * time.Second)
		b.want(controller.StateLeader)
		c.wantFollows("startup:a@1", "leader_changed:b@2")
		b.wantFollows("startup:a@1") // never towards itself
		a.wantFollows("demoted:b@2")
		promoted := b.call("promote", "elected").End
		for _, n := range []*node{a, c} {
			if f := n.hooks.Calls(); f[len(f)-1].At.Before(promoted) {
				t.Errorf("%s followed b at %v, before b's promote ended at %v", n.id, f[len(f)-1].At, promoted)
			}
		}
		for _, n := range []*node{a, b, c} {
			if n.hooks.Overlaps() != 0 {
				t.Errorf("%s: overlapping hooks %v", n.id, n.hooks.Reasons())
			}
		}
		st := c.c.Status()
		if st.Following != "b" || st.FollowingEpoch != 2 || st.FollowingSince.IsZero() {
			t.Errorf("c status following %q/%d since %v, want b/2", st.Following, st.FollowingEpoch, st.FollowingSince)
		}
		time.Sleep(100 * time.Millisecond) // the member record's debounce
		if m, _ := w.Member("c"); m.Following != "b" || m.FollowingEpoch != 2 || !m.FollowingSince.Equal(st.FollowingSince) {
			t.Errorf("c's member record follows %q/%d since %v", m.Following, m.FollowingEpoch, m.FollowingSince)
		}
		if c.metrics.Count("follow:success") != 2 || c.metrics.Count("following:2") != 1 {
			t.Errorf("c metrics %v", c.metrics.Events())
		}
	})
}

// A node elected while its follow runs stops it, and its promote waits for
// the follow to exit (SIGTERM, kill grace), never next to it.
func TestFollowStoppedByElectionPromoteWaits(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b", following(0), script(func(n *node) {
			n.hooks.On("follow", controllertest.Result{Take: time.Hour, KillTake: 250 * time.Millisecond})
		}))
		b.healthy()
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1")
		w.HideLeader(true) // b's leader watch lags: b is elected before it hears a is gone
		stopAt := time.Now()
		a.stop() // graceful: b is elected at once
		time.Sleep(time.Second)
		b.want(controller.StateLeader)
		f, p := b.call("follow", "startup"), b.call("promote", "elected")
		if !errors.Is(f.Err, controllertest.ErrKilled) {
			t.Errorf("follow ended with %v, want killed", f.Err)
		}
		if !p.At.Equal(f.End) || f.End.Sub(stopAt) != 250*time.Millisecond {
			t.Errorf("a stopped at %v, b's follow ran %v..%v, its promote started at %v: want the follow stopped at once and the promote right after it exited",
				stopAt, f.At, f.End, p.At)
		}
		if b.hooks.Overlaps() != 0 || b.metrics.Count("follow:failure") != 0 {
			t.Errorf("overlaps %d; metrics %v (a stopped follow is no failure)", b.hooks.Overlaps(), b.metrics.Events())
		}
		w.HideLeader(false)
		b.wantFollows("startup:a@1") // not run again while leading
	})
}

// The lease is looked at again after the promote waited for a follow: a
// term whose lease ran out meanwhile promotes nothing, even before the
// elector noticed.
func TestFollowSlowToExitLeaseEndsNoPromote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b", following(0), script(func(n *node) {
			n.hooks.On("follow", controllertest.Result{Take: time.Hour, KillTake: 5 * time.Second})
		}))
		b.healthy()
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1")
		a.unhealthy()
		time.Sleep(time.Second)
		b.want(controller.StatePromoting) // waiting for the slot
		w.Lapse("b")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		w.Expire("b")
		synctest.Wait()
		for _, c := range b.hooks.Calls() {
			if c.Name == "promote" && c.Env.Epoch == 2 {
				t.Fatalf("promoted in a term whose lease ended while the follow exited: %v", b.hooks.Reasons())
			}
		}
		if b.hooks.Overlaps() != 0 {
			t.Errorf("overlaps: %v", b.hooks.Reasons())
		}
	})
}

// A follow that outlives SIGKILL when its node is elected blocks the
// promote like any stuck hook: the term is given up and nothing is
// promoted until it is reaped.
func TestUnkillableFollowBlocksPromote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b", following(0), script(func(n *node) {
			n.hooks.On("follow", controllertest.Result{Take: time.Hour, Unkillable: true})
		}))
		b.healthy()
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1")
		a.stop()
		time.Sleep(5 * time.Second)
		b.want(controller.StateOut)
		if slices.Contains(b.hooks.Reasons(), "promote:elected") {
			t.Fatalf("promoted next to a stuck follow: %v", b.hooks.Reasons())
		}
		if b.metrics.Count("unkillable:follow") != 1 {
			t.Errorf("metrics %v", b.metrics.Events())
		}
		b.hooks.Reap()
		time.Sleep(time.Second)
		b.want(controller.StateLeader)
		if b.hooks.Overlaps() != 0 {
			t.Errorf("overlaps: %v", b.hooks.Reasons())
		}
	})
}

// A failing follow is retried after 1s, 2s, 4s, ... with its reason; once
// the leader changes only the newest is followed (at once, back-off reset).
func TestFollowRetriesNewestOnly(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		b := start(t, w, "b", following(0)) // never healthy: out, follows
		b.hooks.Always("follow", &controllertest.Result{Err: errors.New("boom")})
		b.wantFollows("startup:a@1")
		time.Sleep(7*time.Second + 500*time.Millisecond)
		b.wantFollows("startup:a@1", "startup:a@1", "startup:a@1", "startup:a@1")
		var at []time.Duration
		calls := b.hooks.Calls()
		for _, k := range calls[2:] {
			at = append(at, k.At.Sub(calls[1].At))
		}
		if !slices.Equal(at, []time.Duration{time.Second, 3 * time.Second, 7 * time.Second}) {
			t.Errorf("follow runs at %v after the first, want 1s, 3s, 7s", at)
		}
		b.hooks.Always("follow", nil)
		a.stop() // c takes over gracefully
		c.want(controller.StateLeader)
		b.wantFollows("startup:a@1", "startup:a@1", "startup:a@1", "startup:a@1", "leader_changed:c@2")
		time.Sleep(time.Minute)
		b.wantFollows("startup:a@1", "startup:a@1", "startup:a@1", "startup:a@1", "leader_changed:c@2")
		if n := b.metrics.Count("follow:failure"); n != 4 {
			t.Errorf("counted %d failures: %v", n, b.metrics.Events())
		}
	})
}

// A timed-out follow counts as a timeout and is retried; the back-off caps
// at 30s.
func TestFollowTimeoutCountedAndCapped(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b", following(0))
		b.hooks.Always("follow", &controllertest.Result{Err: fmt.Errorf("running follow: timed out after 30s: %w", context.DeadlineExceeded)})
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		calls := b.hooks.Calls()
		last, prev := calls[len(calls)-1].At, calls[len(calls)-2].At
		if d := last.Sub(prev); d != 30*time.Second {
			t.Errorf("retry gap %v, want capped at 30s", d)
		}
		if b.metrics.Count("follow:timeout") != len(calls)-1 || b.metrics.Count("follow:failure") != 0 {
			t.Errorf("metrics %v", b.metrics.Events())
		}
	})
}

// A follow towards a leader that stops being the leader is stopped, and
// the new leader is followed.
func TestFollowStoppedWhenLeaderChanges(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		b := start(t, w, "b", following(0), script(func(n *node) {
			n.hooks.On("follow", controllertest.Result{Take: time.Hour})
		}))
		b.wantFollows("startup:a@1")
		a.stop()
		c.want(controller.StateLeader)
		b.wantFollows("startup:a@1", "leader_changed:c@2")
		if f := b.hooks.Calls()[1]; !errors.Is(f.Err, controllertest.ErrKilled) {
			t.Errorf("the follow towards a ended with %v, want stopped", f.Err)
		}
	})
}

// With no leader for no_leader_after the hook runs once without one, and
// again only after a leader was seen in between; 0 never runs it.
func TestFollowNoLeader(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := start(t, w, "b", following(5*time.Second))
		never := start(t, w, "n", following(0))
		time.Sleep(4 * time.Second)
		b.wantFollows()
		time.Sleep(time.Second)
		b.wantFollows("no_leader:-")
		if env := b.hooks.Calls()[1].Env; env.Leader != nil || env.Reason != "no_leader" {
			t.Errorf("env %+v", env)
		}
		time.Sleep(time.Minute)
		b.wantFollows("no_leader:-")
		if st := b.c.Status(); st.Following != "" || st.FollowingEpoch != 0 {
			t.Errorf("status follows %q/%d while parked", st.Following, st.FollowingEpoch)
		}
		a := leader(t, w, "a")
		b.wantFollows("no_leader:-", "startup:a@1")
		a.stop()
		time.Sleep(4 * time.Second)
		b.wantFollows("no_leader:-", "startup:a@1")
		time.Sleep(time.Second)
		b.wantFollows("no_leader:-", "startup:a@1", "no_leader:-")
		time.Sleep(time.Minute)
		b.wantFollows("no_leader:-", "startup:a@1", "no_leader:-")
		never.wantFollows("startup:a@1")
	})
}

// A failed no-leader run is retried with back-off like any other.
func TestFollowNoLeaderRetried(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := start(t, w, "b", following(5*time.Second), script(func(n *node) {
			n.hooks.On("follow", controllertest.Result{Err: errors.New("boom")})
		}))
		time.Sleep(10 * time.Second)
		b.wantFollows("no_leader:-", "no_leader:-")
	})
}

// A demote request (or an rpc fence) does not wait for a running follow:
// the follow is stopped and the demote runs; the follow runs again after
// it with reason demoted.
func TestDemoteRequestStopsFollow(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b", following(0), script(func(n *node) {
			n.hooks.On("follow", controllertest.Result{Take: time.Hour})
		}))
		b.wantFollows("startup:a@1")
		start := time.Now()
		if o := b.c.Demote(context.Background(), "test"); !o.Demoted {
			t.Fatalf("Demote() = %+v", o)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("demote answered after %v, want at once", d)
		}
		b.wantFollows("startup:a@1", "demoted:a@1")
		b.wantHooks("demote:startup", "follow:startup", "demote:operator_demote", "follow:demoted")
	})
}

// A graceful stop does not wait for a running follow.
func TestStopDuringFollow(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b", following(0), script(func(n *node) {
			n.hooks.On("follow", controllertest.Result{Take: time.Hour})
		}))
		b.wantFollows("startup:a@1")
		start := time.Now()
		if err := b.stop(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("stopped after %v, want at once", d)
		}
	})
}

// Without a follow hook nothing is followed and no status fields appear.
func TestNoFollowHookNoFollow(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		time.Sleep(time.Minute)
		b.wantHooks("demote:startup")
		if st := b.c.Status(); st.Following != "" || !st.FollowingSince.IsZero() {
			t.Errorf("status %+v", st)
		}
	})
}

// The breadcrumb carries node.service_address when configured (and only
// then); the fencer and the promote hook of the successor get it.
func TestServiceAddressTravels(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		addr := func(s string) opt {
			return func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.ServiceAddress = s }
		}
		a := leader(t, w, "a", addr("host-a:6379"))
		if bc, _ := w.Breadcrumb(); bc.ServiceAddress != "host-a:6379" {
			t.Fatalf("breadcrumb %+v", bc)
		}
		if st := a.c.Status(); st.ServiceAddress != "host-a:6379" {
			t.Errorf("status service address %q", st.ServiceAddress)
		}
		b := start(t, w, "b", following(0))
		b.healthy()
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1")
		if ld := b.call("follow", "startup").Env.Leader; ld.ServiceAddress != "host-a:6379" {
			t.Errorf("follow leader %+v", ld)
		}
		w.ExpireSession("a")
		a.unhealthy()
		b.want(controller.StateLeader)
		if got := b.fence.Targets(); len(got) != 1 || got[0].ServiceAddress != "host-a:6379" {
			t.Errorf("fenced %+v", got)
		}
		if p := b.call("promote", "elected").Env.Previous; p == nil || p.ServiceAddress != "host-a:6379" {
			t.Errorf("promote previous %+v", p)
		}
		if bc, _ := w.Breadcrumb(); bc.ServiceAddress != "" {
			t.Errorf("b wrote a service address it does not have: %+v", bc)
		}
	})
}

// A leader whose member record carries what cannot go into an environment
// variable (a newline in the host) is not followed; the next good one is.
func TestFollowRefusesBadLeaderRecord(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		if err := w.Node("x").PublishMember(context.Background(), cluster.Member{NodeID: "x", Host: "db\nx", State: "leader", Epoch: 7}); err != nil {
			t.Fatal(err)
		}
		b := start(t, w, "b", following(0))
		time.Sleep(time.Minute)
		b.wantFollows()
		if err := w.Node("x").PublishMember(context.Background(), cluster.Member{NodeID: "x", Host: "host-x", State: "leader", Epoch: 7}); err != nil {
			t.Fatal(err)
		}
		b.wantFollows("startup:x@7") // the first leader that can be followed
		w.SetBreadcrumb(other("x", 8))
		if err := w.Node("x").PublishMember(context.Background(), cluster.Member{NodeID: "x", Host: "host-x", ServiceAddress: "host-x:bad", State: "leader", Epoch: 8}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		b.wantFollows("startup:x@7")
		if st := b.c.Status(); st.Following != "x" || st.FollowingEpoch != 7 {
			t.Errorf("status follows %s@%d, want still x@7", st.Following, st.FollowingEpoch)
		}
	})
}

// A standby whose service turns healthy again after a failed check follows
// the leader again (reason recovered): a service restarted under a running
// failoverd (a Redis whose REPLICAOF is not persisted) comes back pointed
// at nobody. Found by the Redis end-to-end test: the replica stayed parked.
func TestFollowAgainWhenServiceRecovers(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b", following(0))
		b.healthy()
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1")
		b.unhealthy()
		b.want(controller.StateOut)
		b.wantFollows("startup:a@1") // not while its service is down
		b.c.HealthChanged(healthcheck.Unhealthy, healthcheck.Healthy, nil)
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1", "recovered:a@1")
		if b.hooks.Overlaps() != 0 {
			t.Errorf("overlapping hooks %v", b.hooks.Reasons())
		}
	})
}
