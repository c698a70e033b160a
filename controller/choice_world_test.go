package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// Who should lead: the decision at a win (handover to a better
// candidate, lag refusal) and the preemption of a running leader, in the
// in-memory world.

func maxLag(n int64) opt {
	return func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.MaxLag = &n }
}

func preemptAfter(d time.Duration) opt {
	return func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.PreemptAfter = d }
}

// position makes n publish position p (as its position command would).
func position(p int64) opt {
	return func(n *node, _ *controller.Config, _ *controller.Deps) { n.be.SetPosition(&p) }
}

func (n *node) promoted() bool {
	return slices.ContainsFunc(n.hooks.Reasons(), func(r string) bool { return strings.HasPrefix(r, "promote:") })
}

// A node of priority 1 that wins while a healthy node of priority 2 waits
// hands over to it: it neither fences nor writes the breadcrumb nor
// promotes; the preferred node takes over with the usual fencing of the
// breadcrumb's leader (the unhealthy old leader left it), marks the
// request done, and the node that asked withdraws it.
func TestWinHandsOverToHigherPriority(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b")
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		a := start(t, w, "a", priority(2))
		a.healthy()
		a.want(controller.StateStandby)
		time.Sleep(100 * time.Millisecond) // member records published
		if q := w.Queue(); !slices.Equal(q, []string{"b", "c", "a"}) {
			t.Fatalf("queue %v", q)
		}
		b.unhealthy()
		a.want(controller.StateLeader)
		if c.promoted() || len(c.fence.Targets()) != 0 {
			t.Errorf("c promoted or fenced: hooks %v, fenced %v", c.hooks.Reasons(), c.fence.Targets())
		}
		for _, wr := range w.Writes() {
			if wr.NodeID == "c" {
				t.Errorf("c wrote the breadcrumb: %+v", wr)
			}
		}
		if ft := a.fence.Targets(); len(ft) != 1 || ft[0].NodeID != "b" {
			t.Errorf("a fenced %v, want b (its breadcrumb stayed)", ft)
		}
		if n := c.metrics.Count("declined:handoff_preferred"); n != 1 {
			t.Errorf("c declined %d times, want 1 (%v)", n, c.metrics.Events())
		}
		time.Sleep(3 * time.Second) // withdrawn 2 s after done: every watch sees it done first
		synctest.Wait()
		if r := w.Failover(); r != nil {
			t.Errorf("request %+v still there: the node that asked withdraws it once done", r)
		}
		c.want(controller.StateStandby)
		if st := c.c.Status(); st.LastError != "" {
			t.Errorf("c's last error %q after a handover", st.LastError)
		}
	})
}

// The target of a handover never hands over in turn, even when an even
// better node appears: it promotes (no ping-pong).
func TestHandoverTargetDoesNotHandOverAgain(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b")
		a := start(t, w, "a", priority(2))
		a.healthy()
		a.want(controller.StateStandby)
		// A priority-3 node that campaigns (by its record) as a wins.
		three := 3
		if err := w.Node("z").PublishMember(context.Background(), cluster.Member{NodeID: "z", State: "standby", Health: "healthy", Priority: &three}); err != nil {
			t.Fatal(err)
		}
		w.SetFailover(&cluster.FailoverRequest{To: "a", TimeoutMS: 60000, ID: "r1", By: "c", Reason: cluster.ReasonPreferredPriority})
		a.want(controller.StateLeader)
		b.want(controller.StateStandby)
		if n := a.metrics.Count("declined:handoff_preferred"); n != 0 {
			t.Errorf("the target declined %d times", n)
		}
	})
}

// A handover to a node that never takes over costs one request timeout,
// not a leaderless cluster: the request expires, the target is not a
// candidate for a while, and the next win promotes. One request only.
func TestHandoverToAbsentTargetExpiresThenPromotes(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		two := 2
		if err := w.Node("ghost").PublishMember(context.Background(), cluster.Member{NodeID: "ghost", State: "standby", Health: "healthy", Priority: &two}); err != nil {
			t.Fatal(err)
		}
		c := start(t, w, "c")
		c.healthy()
		synctest.Wait()
		r := w.Failover()
		if r == nil || r.To != "ghost" || r.Reason != cluster.ReasonPreferredPriority || r.By != "c" {
			t.Fatalf("request %+v, want c's preferred_priority request to ghost", r)
		}
		// The world's terms have a 6 s session, no promote timeout here.
		if r.TimeoutMS != 12000 {
			t.Errorf("request timeout %d ms, want 2 x 6 s", r.TimeoutMS)
		}
		c.want(controller.StateOut)
		time.Sleep(11 * time.Second)
		c.want(controller.StateOut)
		time.Sleep(2 * time.Second)
		c.want(controller.StateLeader)
		if n := c.metrics.Count("declined:handoff_preferred"); n != 1 {
			t.Errorf("c declined %d times, want 1", n)
		}
		// Still preferred by its record, but it failed: a later win
		// promotes at once.
		c.unhealthy()
		c.want(controller.StateOut)
		c.healthy()
		c.want(controller.StateLeader)
		if n := c.metrics.Count("declined:handoff_preferred"); n != 1 {
			t.Errorf("c declined %d times, want 1: a target that failed is not asked again", n)
		}
	})
}

// A target that gives up its takeover (its fence fails) deletes the
// node's request, so the others rejoin at once instead of waiting for its
// timeout; they do not ask it again for a while.
func TestHandoverTargetThatFailsDeletesTheRequest(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b")
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		a := start(t, w, "a", priority(2))
		a.fence.Fail(100)
		a.healthy()
		a.want(controller.StateStandby)
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		b.unhealthy()
		c.want(controller.StateLeader) // at once: not after the request's 12 s
		if d := time.Since(start); d > time.Second {
			t.Errorf("c led %v after b went", d)
		}
		if ft := a.fence.Targets(); len(ft) == 0 || ft[0].NodeID != "b" {
			t.Errorf("a fenced %v, want it to have tried b", ft)
		}
		if a.promoted() {
			t.Error("a promoted after a failed fence")
		}
		if n := c.metrics.Count("declined:handoff_preferred"); n != 1 {
			t.Errorf("c declined %d times, want 1", n)
		}
	})
}

// election.max_lag: a winner more than max_lag behind the last leader
// position declines (no fence, no write, no promote), says why, backs off
// and asks the caught-up candidate, which takes over.
func TestLaggingWinnerDeclinesAndAsksTheCaughtUpOne(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		z := leader(t, w, "z", maxLag(100), position(1000))
		w.SetLeaderPosition(&cluster.LeaderPosition{NodeID: "z", Epoch: 1, Position: 1000})
		c := start(t, w, "c", maxLag(100), position(500))
		c.healthy()
		c.want(controller.StateStandby)
		b := start(t, w, "b", maxLag(100), position(950))
		b.healthy()
		b.want(controller.StateStandby)
		time.Sleep(100 * time.Millisecond)
		z.unhealthy()
		b.want(controller.StateLeader)
		if c.promoted() || len(c.fence.Targets()) != 0 {
			t.Errorf("lagging c promoted or fenced: hooks %v, fenced %v", c.hooks.Reasons(), c.fence.Targets())
		}
		if ft := b.fence.Targets(); len(ft) != 1 || ft[0].NodeID != "z" {
			t.Errorf("b fenced %v, want z", ft)
		}
		if n := c.metrics.Count("declined:lagging"); n != 1 {
			t.Errorf("c declined (lagging) %d times, want 1: %v", n, c.metrics.Events())
		}
		if st := c.c.Status(); !strings.Contains(st.LastError, "lagging") || !strings.Contains(st.LastError, "500") {
			t.Errorf("c's last error %q, want it to say it lags", st.LastError)
		}
	})
}

// A lagging node with nobody to ask never promotes by itself (it backs
// off and tries again); an operator's failover --to it does promote it.
func TestLaggingAloneNeverPromotesUntilAskedByName(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("z", 1))
		w.SetLeaderPosition(&cluster.LeaderPosition{NodeID: "z", Epoch: 1, Position: 1000})
		c := start(t, w, "c", maxLag(100), position(500))
		c.healthy()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if c.promoted() || len(c.fence.Targets()) != 0 || len(w.Writes()) != 0 {
			t.Fatalf("lagging c acted: hooks %v, fenced %v, writes %v", c.hooks.Reasons(), c.fence.Targets(), w.Writes())
		}
		if n := c.metrics.Count("declined:lagging"); n < 3 {
			t.Errorf("c declined %d times in 30 s, want several (backing off)", n)
		}
		if w.Failover() != nil {
			t.Errorf("c asked %+v with nobody eligible", w.Failover())
		}
		w.SetFailover(&cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "op"})
		c.want(controller.StateLeader)
		if ft := c.fence.Targets(); len(ft) != 1 || ft[0].NodeID != "z" {
			t.Errorf("c fenced %v, want z", ft)
		}
	})
}

// election.preempt_after: a standby of a higher priority that stays
// healthy and campaigning that long takes over by a graceful switchover
// (the leader demotes and deletes its breadcrumb: nothing to fence). The
// timer starts again when the standby stops campaigning for a while.
func TestPreemptionByHigherPriority(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b", preemptAfter(5*time.Second))
		c := start(t, w, "c", preemptAfter(5*time.Second))
		c.healthy()
		c.want(controller.StateStandby)
		time.Sleep(10 * time.Second)
		b.want(controller.StateLeader) // equal priority: never preempted
		a := start(t, w, "a", priority(2), preemptAfter(5*time.Second))
		a.healthy()
		a.want(controller.StateStandby)
		time.Sleep(3 * time.Second)
		a.unhealthy() // a break: the wait starts again
		time.Sleep(time.Second)
		a.healthy()
		a.want(controller.StateStandby)
		time.Sleep(4 * time.Second)
		b.want(controller.StateLeader)
		a.want(controller.StateStandby)
		time.Sleep(1200 * time.Millisecond)
		a.want(controller.StateLeader)
		b.wantHooks("demote:startup", "promote:elected", "demote:failover_handoff")
		if len(a.fence.Targets()) != 0 || len(w.Finishes()) != 1 {
			t.Errorf("a fenced %v, finishes %v: want a graceful switchover", a.fence.Targets(), w.Finishes())
		}
		if n := b.metrics.Count("preempted"); n != 1 {
			t.Errorf("b preempted %d times, want 1", n)
		}
		// a leads: nobody of a higher priority waits, nothing else happens.
		time.Sleep(20 * time.Second)
		a.want(controller.StateLeader)
		// b's write, then a's.
		stored := w.Writes()
		if c.promoted() || len(stored) != 2 || stored[0].NodeID != "b" || stored[1].NodeID != "a" {
			t.Errorf("c promoted (%v) or breadcrumbs %v: want b's then a's only", c.hooks.Reasons(), stored)
		}
	})
}

// No preemption with preempt_after 0.
func TestNoPreemptionWhenOff(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b")
		a := start(t, w, "a", priority(2))
		a.healthy()
		a.want(controller.StateStandby)
		time.Sleep(time.Minute)
		b.want(controller.StateLeader)
		if w.Failover() != nil {
			t.Errorf("request %+v with preempt_after 0", w.Failover())
		}
	})
}

// The failover watch may report a node's own handover request, and the
// loop end the term for it, before the write's answer arrives: the answer
// must not read as a failure (the term's context is gone by then), and the
// decision still counts and stands aside for it. Before, the preemption
// logged "could not ask" and the win's handover was neither counted nor
// logged.
func TestOwnRequestReportedBeforeItsAnswer(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.LateProposeAnswer(50 * time.Millisecond)
		b := leader(t, w, "b", preemptAfter(2*time.Second))
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		a := start(t, w, "a", priority(2))
		a.healthy()
		a.want(controller.StateStandby)
		time.Sleep(3 * time.Second)
		a.want(controller.StateLeader)
		if n := b.metrics.Count("preempted"); n != 1 {
			t.Errorf("b counted %d preemptions, want 1 (%v)", n, b.metrics.Events())
		}
		time.Sleep(3 * time.Second) // withdrawn 2 s after done
		synctest.Wait()
		if r := w.Failover(); r != nil {
			t.Errorf("request %+v still stands: b withdraws its request once done", r)
		}

	})
}

// The same for a win that hands over.
func TestOwnRequestAtAWinReportedBeforeItsAnswer(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.LateProposeAnswer(50 * time.Millisecond)
		b := leader(t, w, "b")
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		a := start(t, w, "a", priority(2))
		a.healthy()
		a.want(controller.StateStandby)
		time.Sleep(100 * time.Millisecond)
		b.unhealthy()
		time.Sleep(time.Second) // past the late answer
		a.want(controller.StateLeader)
		if c.promoted() {
			t.Errorf("c promoted: %v", c.hooks.Reasons())
		}
		if n := c.metrics.Count("declined:handoff_preferred"); n != 1 {
			t.Errorf("c counted %d handovers at a win, want 1 (%v)", n, c.metrics.Events())
		}
		time.Sleep(3 * time.Second) // withdrawn 2 s after done
		synctest.Wait()
		if r := w.Failover(); r != nil {
			t.Errorf("request %+v still stands: c withdraws its request once done", r)
		}
	})
}

// No preemption while the cluster is paused (maintenance: no automatic
// handover), even when a standby of a higher priority shows as
// campaigning (here a record of its own: a paused node stops campaigning
// soon, but its record can say otherwise meanwhile); after resume the
// leader hands over to it.
func TestNoPreemptionWhilePaused(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b", preemptAfter(2*time.Second))
		w.SetPause(&cluster.Pause{By: "op", Reason: "maintenance", At: time.Now()})
		synctest.Wait()
		two := 2
		if err := w.Node("z").PublishMember(context.Background(), cluster.Member{NodeID: "z", State: "standby", Health: "healthy", Priority: &two}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		b.want(controller.StateLeader)
		if w.Failover() != nil || b.metrics.Count("preempted") != 0 {
			t.Fatalf("b preempted while paused: request %+v", w.Failover())
		}
		w.SetPause(nil)
		time.Sleep(time.Second)
		synctest.Wait()
		if r := w.Failover(); r == nil || r.To != "z" || r.Reason != cluster.ReasonPreferredPriority {
			t.Fatalf("request %+v after resume, want b's preemption to z", r)
		}
	})
}

// The target of a node's handover (not an operator's) that lags by the
// time it wins does not promote: it declines, asks nobody in turn, and
// deletes the request so the others rejoin; an operator's request to the
// same lagging node would promote it (TestLaggingAloneNeverPromotesUntilAskedByName).
func TestLaggingHandoverTargetDeclinesAndDropsTheRequest(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("z", 1))
		w.SetLeaderPosition(&cluster.LeaderPosition{NodeID: "z", Epoch: 1, Position: 1000})
		c := start(t, w, "c", maxLag(100), position(500))
		c.healthy()
		synctest.Wait()
		w.SetFailover(&cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "h1", By: "failoverd:b", Reason: cluster.ReasonPreferredPosition})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if c.promoted() || len(c.fence.Targets()) != 0 {
			t.Fatalf("lagging c promoted for a node's handover: hooks %v, fenced %v", c.hooks.Reasons(), c.fence.Targets())
		}
		if n := c.metrics.Count("declined:lagging"); n < 1 {
			t.Errorf("c declined %d times, want it to decline as lagging: %v", n, c.metrics.Events())
		}
		if r := w.Failover(); r != nil && r.ID == "h1" {
			t.Errorf("the handover request %+v still stands after its target gave up", r)
		}
	})
}

// The log tells an operator's failover request from a node's own
// handover to a node it prefers: both the nodes that stand aside and the
// target say which it is.
func TestFailoverLogSaysWhoAsked(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		var lb, lc, la logLines
		leader(t, w, "b", preemptAfter(5*time.Second), logTo(&lb))
		c := start(t, w, "c", preemptAfter(5*time.Second), logTo(&lc))
		c.healthy()
		c.want(controller.StateStandby)
		a := start(t, w, "a", priority(2), preemptAfter(5*time.Second), logTo(&la))
		a.healthy()
		time.Sleep(10 * time.Second) // b hands over after 5 s
		a.want(controller.StateLeader)
		for _, l := range []*logLines{&lb, &lc} {
			got := l.find(t, "handover to a preferred node requested: standing aside")
			if len(got) != 1 || got[0]["to"] != "a" || got[0]["reason"] != cluster.ReasonPreferredPriority {
				t.Errorf("standing aside for the preemption logged %v, want one line to a with reason %s", got, cluster.ReasonPreferredPriority)
			}
		}
		if got := la.find(t, "handover to this node requested: the leader prefers it"); len(got) != 1 {
			t.Errorf("a logged %v, want the handover to it", got)
		}
		w.SetFailover(&cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "op1", By: "ops@h1"})
		c.want(controller.StateLeader)
		if got := la.find(t, "manual failover requested by an operator: standing aside"); len(got) != 1 || got[0]["by"] != "ops@h1" {
			t.Errorf("a logged %v, want the operator's request by ops@h1", got)
		}
		if got := lc.find(t, "manual failover to this node requested by an operator"); len(got) != 1 {
			t.Errorf("c logged %v, want the operator's request", got)
		}
	})
}

// A target that won and met the request before its watch brought it (the
// election is quicker than the watch) still logs who asked, once.
func TestFailoverLogWhenTheRequestArrivesDone(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		var la logLines
		leader(t, w, "a", logTo(&la))
		w.SetFailover(&cluster.FailoverRequest{To: "a", TimeoutMS: 60000, ID: "op2", By: "ops@h2", Done: true})
		time.Sleep(time.Second)
		w.SetFailover(&cluster.FailoverRequest{To: "a", TimeoutMS: 60000, ID: "op2", By: "ops@h2", Done: true})
		time.Sleep(time.Second)
		got := la.find(t, "manual failover to this node requested by an operator")
		if len(got) != 1 || got[0]["by"] != "ops@h2" || got[0]["done"] != true {
			t.Errorf("a logged %v, want one line for the request by ops@h2, done", got)
		}
	})
}
