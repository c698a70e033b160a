package controller_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// reloadCfg is the config start gives a node, changed by f.
func reloadCfg(id string, f func(c *controller.Config)) controller.Config {
	cfg := controller.Config{
		Cluster: "ct", NodeID: id, Host: "host-" + id, AdminURL: "http://" + id + ":9101", ElectionMode: "fair",
		Demote:     controller.Hook{Timeout: time.Second},
		BackoffMin: time.Second, BackoffMax: 8 * time.Second,
	}
	f(&cfg)
	return cfg
}

func (n *node) reload(f func(c *controller.Config)) error {
	n.t.Helper()
	return n.c.Reload(context.Background(), controller.Reload{Config: reloadCfg(n.id, f), Hooks: n.hooks, Fencer: n.fence})
}

// A reload that changes no leadership setting keeps the leader's term: no
// hook runs, the epoch stays, and the new hash shows in the status and the
// member record.
func TestReloadKeepsLeadership(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		epoch := a.c.Status().Epoch
		at := time.Now()
		if err := a.reload(func(c *controller.Config) {
			c.Promote.Timeout = 7 * time.Second
			c.ConfigHash, c.ConfigLoadedAt = "abc123", at
		}); err != nil {
			t.Fatal(err)
		}
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected")
		s := a.c.Status()
		if s.Epoch != epoch || s.ConfigHash != "abc123" || !s.ConfigLoadedAt.Equal(at) {
			t.Errorf("after reload: epoch %d (want %d), hash %q, loaded %v", s.Epoch, epoch, s.ConfigHash, s.ConfigLoadedAt)
		}
		time.Sleep(time.Second)
		if m, ok := w.Member("a"); !ok || m.ConfigHash != "abc123" {
			t.Errorf("member record %+v, want config_hash abc123", m)
		}
	})
}

// Priority 0 on the leader: it may not lead any more, so it hands over
// gracefully (demote, then the breadcrumb goes with one Finish) and stays
// out; set back to 1 it campaigns again.
func TestReloadPriorityZeroLeaderStepsDown(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		notes, err := a.c.ReloadNotes(context.Background(), controller.Reload{Config: reloadCfg("a", func(c *controller.Config) { zero := 0; c.Priority = &zero }), Hooks: a.hooks, Fencer: a.fence})
		if err != nil {
			t.Fatal(err)
		}
		if len(notes) != 1 || !strings.Contains(notes[0], "hands its leadership over") {
			t.Errorf("reload notes %q, want the handover", notes)
		}
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:priority_zero")
		if f := w.Finishes(); len(f) != 1 {
			t.Errorf("finishes %v, want one: a graceful end deletes the breadcrumb", f)
		}
		time.Sleep(5 * time.Second)
		a.want(controller.StateOut)
		if s := a.c.Status(); s.Priority != 0 {
			t.Errorf("status priority %d, want 0", s.Priority)
		}
		notes, err = a.c.ReloadNotes(context.Background(), controller.Reload{Config: reloadCfg("a", func(c *controller.Config) { one := 1; c.Priority = &one }), Hooks: a.hooks, Fencer: a.fence})
		if err != nil || len(notes) != 0 {
			t.Fatalf("reload: notes %q, err %v; want none", notes, err)
		}
		a.want(controller.StateLeader)
	})
}

// A standby's new priority reaches its member record.
func TestReloadPriorityStandby(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		if err := b.reload(func(c *controller.Config) { p := 5; c.Priority = &p }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if m, ok := w.Member("b"); !ok || m.Priority == nil || *m.Priority != 5 {
			t.Errorf("member record of b %+v, want priority 5", m)
		}
		b.want(controller.StateStandby)
	})
}

// The demote budget sized the lease: a reload may not raise it, and a
// refused reload changes nothing.
func TestReloadRefusesLargerDemoteBudget(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		err := a.reload(func(c *controller.Config) {
			c.Demote.Timeout = 2 * time.Second
			p := 3
			c.Priority = &p
		})
		if err == nil || !strings.Contains(err.Error(), "demote budget") {
			t.Fatalf("reload raising the demote timeout: %v, want a refusal naming the demote budget", err)
		}
		if s := a.c.Status(); s.Priority != 1 || s.State != controller.StateLeader {
			t.Errorf("after a refused reload: %+v, want priority 1, leader", s)
		}
		if err := a.reload(func(c *controller.Config) { c.Demote.Timeout = 500 * time.Millisecond }); err != nil {
			t.Errorf("lowering the demote timeout: %v", err)
		}
	})
}

// New hooks apply from their next run.
func TestReloadNewHooksNextRun(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		h2 := controllertest.NewHooks()
		if err := a.c.Reload(context.Background(), controller.Reload{Config: reloadCfg("a", func(*controller.Config) {}), Hooks: h2, Fencer: a.fence}); err != nil {
			t.Fatal(err)
		}
		if err := a.c.Cede(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected")
		if got := h2.Reasons(); len(got) != 1 || got[0] != "demote:ceded" {
			t.Errorf("the new hooks ran %v, want the cede's demote", got)
		}
	})
}

// election.preempt_after set by a reload on a leader starts preemption: a
// waiting standby of a higher priority takes over once it has waited that
// long.
func TestReloadPreemptAfterStartsPreemption(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b")
		a := start(t, w, "a", priority(2))
		a.healthy()
		a.want(controller.StateStandby)
		time.Sleep(time.Minute)
		b.want(controller.StateLeader) // preemption off
		if err := b.reload(func(c *controller.Config) { c.PreemptAfter = 5 * time.Second }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		a.want(controller.StateLeader)
		b.wantHooks("demote:startup", "promote:elected", "demote:failover_handoff")
	})
}

// election.max_lag set by a reload applies at the next win: a lagging
// standby that would have promoted declines.
func TestReloadMaxLagAppliesAtTheNextWin(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		z := leader(t, w, "z", position(1000))
		w.SetLeaderPosition(&cluster.LeaderPosition{NodeID: "z", Epoch: 1, Position: 1000})
		c := start(t, w, "c", position(500))
		c.healthy()
		c.want(controller.StateStandby)
		n := int64(100)
		if err := c.reload(func(cfg *controller.Config) { cfg.MaxLag = &n }); err != nil {
			t.Fatal(err)
		}
		z.unhealthy()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if c.promoted() {
			t.Fatalf("c, 500 behind with max_lag 100 reloaded, promoted: hooks %v", c.hooks.Reasons())
		}
		if c.metrics.Count("declined:lagging") == 0 {
			t.Errorf("c never declined as lagging: %v", c.metrics.Events())
		}
	})
}

// election.failover_cooldown set by a reload applies from the next
// automatic promotion: the new leader keeps its term while unhealthy
// within it.
func TestReloadFailoverCooldownAppliesAtTheNextPromotion(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		if err := b.reload(func(c *controller.Config) { c.FailoverCooldown = time.Minute }); err != nil {
			t.Fatal(err)
		}
		a.unhealthy()
		b.want(controller.StateLeader)
		b.unhealthy()
		time.Sleep(10 * time.Second)
		b.want(controller.StateLeader)
		if b.metrics.Count("cooldown_hold") != 1 {
			t.Errorf("cooldown holds %d, want 1: %v", b.metrics.Count("cooldown_hold"), b.metrics.Events())
		}
	})
}

// A term keeps the demote budget the lease was sized for, whatever the
// demote timeout was when it was won: a reload that raises the timeout
// back to its value at start while the term runs cannot make the guards
// let a step start with less than the budget left before Expiry.
func TestReloadCannotRaiseTheBudgetOfATermWon(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		demote4s := func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.Demote.Timeout = 4 * time.Second }
		a := start(t, w, "a", demote4s) // budget 4.5s, within the world's 5.7s
		a.want(controller.StateOut)
		if err := a.reload(func(c *controller.Config) { c.Demote.Timeout = time.Second }); err != nil {
			t.Fatal(err)
		}
		w.SetBreadcrumb(other("b", 1))
		a.fence.Take(3500 * time.Millisecond)
		a.healthy()
		synctest.Wait()
		if w.Term("a") == nil {
			t.Fatal("a holds no term")
		}
		w.StopRenewalsUnnoticed("a") // the elector is late: only the guards stop acting
		exp, _ := w.Term("a").Expiry()
		epoch := w.Term("a").Epoch()
		if err := a.reload(func(c *controller.Config) { c.Demote.Timeout = 4 * time.Second }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for _, c := range a.hooks.Calls() {
			if c.Name == "promote" && c.Env.Epoch == epoch && exp.Sub(c.At) < 4500*time.Millisecond {
				t.Errorf("a's promote at epoch %d started %v before Expiry, less than the demote budget 4.5s", epoch, exp.Sub(c.At))
			}
		}
	})
}

// node.priority set to 0 on the leader of a paused cluster: no automatic
// demotion while paused, and nobody else may take over, so it keeps
// leading; once resumed it hands over gracefully.
func TestPriorityZeroReloadWhilePausedKeepsLeadingUntilResume(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.SetPause(maintenance)
		b.want(controller.StateOut)
		if err := a.reload(func(c *controller.Config) { zero := 0; c.Priority = &zero }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected")
		w.SetPause(nil)
		b.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected", "demote:priority_zero")
		if len(b.fence.Targets()) != 0 {
			t.Errorf("b fenced %v after a's graceful hand-over", b.fence.Targets())
		}
	})
}

// Reload's answer is the truth: with the caller gone before the loop took
// it, nothing is applied, and once taken it is applied and says so.
func TestReloadAnswerMatchesWhatTheLoopDid(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		for i := range 20 {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			p := 2 + i
			err := a.c.Reload(ctx, controller.Reload{Config: reloadCfg("a", func(c *controller.Config) { c.Priority = &p }), Hooks: a.hooks, Fencer: a.fence})
			synctest.Wait()
			if got := a.c.Status().Priority; (err == nil) != (got == p) {
				t.Fatalf("Reload() = %v, and the priority is %d (asked %d)", err, got, p)
			}
		}
	})
}
