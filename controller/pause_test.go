package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// Maintenance mode and the failover cooldown (pause.go) in the in-memory
// world.

var maintenance = &cluster.Pause{By: "ops@host", Reason: "maintenance", At: time.Unix(1, 0).UTC()}

func cooldown(d time.Duration) opt {
	return func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.FailoverCooldown = d }
}

// demotes lists n's demote hook runs as "demote:reason".
func (n *node) demotes() []string {
	var out []string
	for _, r := range n.hooks.Reasons() {
		if strings.HasPrefix(r, "demote:") {
			out = append(out, r)
		}
	}
	return out
}

// While paused a standby leaves the election, and the leader keeps its term
// although its health fails (shown in status); resume lets the failover
// happen: the leader steps down and the standby fences it and promotes.
func TestPauseKeepsUnhealthyLeader(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.SetPause(maintenance)
		b.want(controller.StateOut)
		if q := w.Queue(); !slices.Equal(q, []string{"a"}) {
			t.Fatalf("queue %v while paused, want only the leader", q)
		}
		a.unhealthy()
		time.Sleep(time.Minute)
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected")
		st := a.c.Status()
		if st.Health != "unhealthy" || st.Paused == nil || st.Paused.Reason != "maintenance" {
			t.Errorf("status %+v: want health unhealthy and the pause shown", st)
		}
		w.SetPause(nil)
		b.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected", "demote:unhealthy")
		if got := b.fence.Targets(); len(got) != 1 || got[0].NodeID != "a" {
			t.Errorf("b fenced %+v, want a (its breadcrumb stayed)", got)
		}
		if a.c.Status().Paused != nil {
			t.Error("status still shows the pause after resume")
		}
	})
}

// A leader whose session is lost while paused demotes as always (it cannot
// know whether the pause still holds), and nobody takes over until resume;
// then the successor fences it and promotes.
func TestPauseLeaderLostNotReplacedUntilResume(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.SetPause(maintenance)
		b.want(controller.StateOut)
		w.ExpireSession("a")
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:session_expired")
		time.Sleep(time.Minute)
		b.want(controller.StateOut)
		if w.Leader() != "" || len(b.fence.Targets()) != 0 {
			t.Fatalf("leader %q, b fenced %v while paused; want nobody", w.Leader(), b.fence.Targets())
		}
		w.SetPause(nil)
		synctest.Wait()
		if l := w.Leader(); l != "a" && l != "b" {
			t.Fatalf("leader %q after resume", l)
		}
		if w.Leader() == "b" {
			b.want(controller.StateLeader)
			if got := b.fence.Targets(); len(got) != 1 || got[0].NodeID != "a" {
				t.Errorf("b fenced %+v, want a", got)
			}
		}
	})
}

// A paused leader whose lease runs out demotes as always (cut off, it
// cannot know whether the pause still holds), unhealthy or not.
func TestPauseLeaseLossStillDemotes(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		w.SetPause(maintenance)
		synctest.Wait() // the pause reached a
		a.unhealthy()
		time.Sleep(10 * time.Second)
		a.want(controller.StateLeader)
		w.Expire("a")
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:lease_expired")
		if w.Leader() != "" {
			t.Errorf("leader %q while paused after the lease ran out", w.Leader())
		}
	})
}

// failover --to works while paused: the leader hands over, the target
// promotes and then leads as any paused leader; a third node stays out.
func TestPauseFailoverTargetTakesOver(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		c := start(t, w, "c")
		b.healthy()
		c.healthy()
		b.want(controller.StateStandby)
		w.SetPause(maintenance)
		b.want(controller.StateOut)
		c.want(controller.StateOut)
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
		b.want(controller.StateLeader)
		a.want(controller.StateOut)
		c.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:failover_handoff")
		if r := w.Failover(); r == nil || !r.Done {
			t.Errorf("request %+v, want it done", r)
		}
		// Done: b is a paused leader now, kept although unhealthy.
		b.unhealthy()
		time.Sleep(2 * time.Minute) // past the request's timeout too
		b.want(controller.StateLeader)
		a.want(controller.StateOut)
	})
}

// A failover target restarted while paused runs its startup demote at
// once (it must, before it may lead) and takes over; the old leader,
// fenced over rpc, answers demote requests while paused.
func TestPauseFailoverTargetRestartedWhilePaused(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetPause(maintenance)
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateOut)
		b.wantHooks()
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
		b.want(controller.StateLeader)
		b.wantHooks("demote:startup", "promote:elected")
	})
}

// A term won but still fencing when the pause arrives is given back: the
// fence is cut short, nothing is written, nothing promoted, no back-off.
func TestPauseDuringFencing(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a")
		a.fence.Take(time.Minute)
		a.healthy()
		a.want(controller.StateFencing)
		w.SetPause(maintenance)
		a.want(controller.StateOut)
		a.wantHooks("demote:startup")
		if len(w.Writes()) != 0 || w.Leader() != "" {
			t.Errorf("writes %v, leader %q after the pause", w.Writes(), w.Leader())
		}
		if st := a.c.Status(); st.LastError != "" {
			t.Errorf("last error %q: a pause is not a failure", st.LastError)
		}
		w.SetPause(nil)
		a.fence.Take(0)
		a.want(controller.StateLeader)
	})
}

// A term whose pre_promote hook runs when the pause arrives is given
// back: the hook is stopped, nothing is written or promoted, and it is not
// a veto (no back-off, no last error).
func TestPauseDuringPrePromote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a", prePromote())
		a.hooks.On("pre_promote", controllertest.Result{Take: time.Minute})
		a.healthy()
		time.Sleep(time.Second)
		a.want(controller.StateFencing)
		w.SetPause(maintenance)
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "pre_promote:elected")
		if len(w.Writes()) != 0 || a.metrics.Count("pre_promote_veto") != 0 || a.c.Status().LastError != "" {
			t.Errorf("writes %v, vetoes %d, last error %q after the pause", w.Writes(), a.metrics.Count("pre_promote_veto"), a.c.Status().LastError)
		}
	})
}

// A daemon started while paused leaves its service alone (no startup
// demote, no follow hook), stays out, and after resume demotes first and
// only then joins the election.
func TestPauseDefersStartupDemote(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		x := leader(t, w, "x")
		w.SetPause(maintenance)
		a := start(t, w, "a", following(30*time.Second))
		a.healthy()
		time.Sleep(time.Minute)
		a.want(controller.StateOut)
		a.wantHooks()
		if slices.Contains(w.Queue(), "a") {
			t.Fatal("a joined the election while paused")
		}
		w.SetPause(nil)
		synctest.Wait()
		got := a.hooks.Reasons()
		if len(got) == 0 || got[0] != "demote:startup" {
			t.Fatalf("hooks after resume %v, want the startup demote first", got)
		}
		if !slices.Contains(got, "follow:startup") {
			t.Errorf("hooks after resume %v, want the follow hook too", got)
		}
		a.want(controller.StateStandby)
		x.want(controller.StateLeader)
	})
}

// A restarted daemon that cannot read the pause record waits for it at
// most PauseWait, then demotes as it always did; it joins the election
// only once it read the record.
func TestPauseUnknownDemotesAfterWait(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.HidePause("a", true)
		a := start(t, w, "a")
		a.healthy()
		time.Sleep(5 * time.Second)
		a.wantHooks()
		time.Sleep(6 * time.Second)
		a.wantHooks("demote:startup")
		a.want(controller.StateOut)
		w.HidePause("a", false)
		a.want(controller.StateLeader)
		a.wantHooks("demote:startup", "promote:elected")
	})
}

// A demote request works while paused: on a paused leader it ends the
// term (demote, graceful), and on a daemon restarted while paused it runs
// the deferred startup demote and answers demoted.
func TestPauseDemoteRequestsStillWork(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		w.SetPause(maintenance)
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateOut)
		if o := a.c.Demote(context.Background(), "operator"); !o.Demoted || o.Err != nil {
			t.Fatalf("Demote() on the paused leader = %+v", o)
		}
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:operator_demote")
		if o := b.c.Demote(context.Background(), "fence"); !o.Demoted || o.Err != nil {
			t.Fatalf("Demote() on the restarted daemon = %+v", o)
		}
		b.wantHooks("demote:startup")
		if w.Leader() != "" {
			t.Errorf("leader %q while paused", w.Leader())
		}
	})
}

// A graceful stop of the leader while paused leaves its service as it is:
// no demote, and the breadcrumb stays so that whoever leads next fences it.
func TestPauseShutdownLeavesService(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.SetPause(maintenance)
		b.want(controller.StateOut)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		a.wantHooks("demote:startup", "promote:elected")
		if bc, _ := w.Breadcrumb(); bc == nil || bc.NodeID != "a" {
			t.Fatalf("breadcrumb %+v, want a's kept", bc)
		}
		b.want(controller.StateOut)
		w.SetPause(nil)
		b.want(controller.StateLeader)
		if got := b.fence.Targets(); len(got) != 1 || got[0].NodeID != "a" {
			t.Errorf("b fenced %+v, want a", got)
		}
	})
}

// A standby's graceful stop while paused is as always (it holds nothing).
func TestPauseShutdownStandby(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "x")
		a := start(t, w, "a")
		a.healthy()
		a.want(controller.StateStandby)
		w.SetPause(maintenance)
		a.want(controller.StateOut)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		a.wantHooks("demote:startup")
	})
}

// The cooldown: after an automatic promotion the leader keeps its term
// while unhealthy until the cooldown ends (counted once, shown), then
// steps down as today.
func TestCooldownHoldsThenReleases(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		t0 := time.Now()
		a := leader(t, w, "a", cooldown(time.Minute))
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		until := a.c.Status().CooldownUntil
		if until.IsZero() || until.Sub(t0) < 59*time.Second || until.Sub(t0) > 61*time.Second {
			t.Fatalf("status cooldown_until %v, want about a minute after %v", until, t0)
		}
		time.Sleep(10 * time.Second)
		a.unhealthy()
		time.Sleep(20 * time.Second)
		a.want(controller.StateLeader)
		a.healthy()
		time.Sleep(time.Second)
		a.unhealthy()
		time.Sleep(time.Second)
		a.want(controller.StateLeader)
		if n := a.metrics.Count("cooldown_hold"); n != 2 {
			t.Errorf("cooldown holds counted %d, want 2 (once per hold)", n)
		}
		time.Sleep(time.Until(until) + time.Millisecond)
		a.want(controller.StateOut)
		a.wantHooks("demote:startup", "promote:elected", "demote:unhealthy")
		b.want(controller.StateLeader)
		if !a.c.Status().CooldownUntil.IsZero() {
			t.Error("cooldown still shown after leadership ended")
		}
	})
}

// A lost session ends a leader within its cooldown as always.
func TestCooldownDoesNotHoldLostSession(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", cooldown(time.Hour))
		w.ExpireSession("a")
		synctest.Wait()
		if got := a.hooks.Reasons(); len(got) < 3 || got[2] != "demote:session_expired" {
			t.Fatalf("hooks %v, want the demote at the session's end", got)
		}
	})
}

// The target of an operator's failover gets no cooldown: unhealthy, it
// steps down at once.
func TestCooldownNotAfterManualFailover(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b", cooldown(time.Hour))
		b.healthy()
		b.want(controller.StateStandby)
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
		b.want(controller.StateLeader)
		if u := b.c.Status().CooldownUntil; !u.IsZero() {
			t.Errorf("cooldown until %v after a manual failover, want none", u)
		}
		b.unhealthy()
		b.want(controller.StateOut)
		a.want(controller.StateLeader)
		if n := b.metrics.Count("cooldown_hold"); n != 0 {
			t.Errorf("cooldown holds %d, want 0", n)
		}
	})
}

// pauseLog records, in fake time, when the fuzzer paused and resumed and
// which operator's failover request stood.
type pauseLog struct {
	paused   []span // [From, To): To zero while paused
	requests []req
}

type span struct{ From, To time.Time }

type req struct {
	at time.Time
	to string // "": withdrawn
}

// pausedAt reports whether the cluster was paused strictly after it was
// paused at t (the pause's own instant is not: a step the loop finished
// at that instant may start a hook before it sees the pause).
func (p *pauseLog) pausedAt(t time.Time) bool {
	for _, s := range p.paused {
		if t.After(s.From) && (s.To.IsZero() || t.Before(s.To)) {
			return true
		}
	}
	return false
}

// targetAt reports whether a request naming id stood at t: set at or
// before t, within its 3 s timeout, and not replaced or withdrawn before t
// (a change at t itself may reach the node after it acted).
func (p *pauseLog) targetAt(id string, t time.Time) bool {
	from := -1
	for i, r := range p.requests {
		if r.to == id && !r.at.After(t) {
			from = i
		}
	}
	if from < 0 || !t.Before(p.requests[from].at.Add(3*time.Second)) {
		return false
	}
	for _, r := range p.requests[from+1:] {
		if r.at.Before(t) {
			return false
		}
	}
	return true
}

// FuzzPause drives three nodes through random health changes, term ends,
// demotes, cedes, failover requests, fence and promote trouble, pauses and
// resumes, and checks the loop's invariants plus the pause's promise: no
// fence, pre_promote or promote starts while the cluster is paused, except
// on the target of a standing failover request.
func FuzzPause(f *testing.F) {
	f.Add([]byte{21, 0, 3, 12, 24, 4, 1, 15, 27, 30, 18, 9})
	f.Add([]byte{22, 12, 21, 15, 16, 24, 6, 33, 13, 25, 3, 28, 21, 30})
	f.Add([]byte{21, 15, 18, 22, 2, 5, 9, 24, 1, 10, 21, 33})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 48 {
			ops = ops[:48]
		}
		test(t, func(t *testing.T, w *controllertest.World) {
			w.SetBreadcrumb(other("x", 1))
			nodes := []*node{start(t, w, "a", prePromote(), cooldown(2*time.Second)), start(t, w, "b", following(time.Second)), start(t, w, "c")}
			for _, n := range nodes {
				n.healthy()
			}
			var log pauseLog
			for i, op := range ops {
				n := nodes[int(op)%3]
				switch op / 3 % 12 {
				case 0:
					n.unhealthy()
				case 1:
					n.healthy()
				case 2:
					go n.c.Demote(context.Background(), "fuzz")
				case 3:
					if w.Term(n.id) != nil {
						w.Expire(n.id)
					}
				case 4:
					if w.Term(n.id) != nil {
						w.ExpireSession(n.id)
					}
				case 5:
					log.requests = append(log.requests, req{at: time.Now(), to: n.id})
					w.SetFailover(&cluster.FailoverRequest{To: n.id, TimeoutMS: 3000, ID: fmt.Sprint(i)})
				case 6:
					log.requests = append(log.requests, req{at: time.Now()})
					w.SetFailover(nil)
				case 7:
					if len(log.paused) == 0 || !log.paused[len(log.paused)-1].To.IsZero() {
						log.paused = append(log.paused, span{From: time.Now()})
					}
					w.SetPause(maintenance)
				case 8:
					if len(log.paused) > 0 && log.paused[len(log.paused)-1].To.IsZero() {
						log.paused[len(log.paused)-1].To = time.Now()
					}
					w.SetPause(nil)
				case 9:
					n.fence.Fail(1)
				case 10:
					n.hooks.On("promote", controllertest.Result{Take: time.Second})
				case 11:
					go n.c.Cede(context.Background(), time.Duration(op%3+1)*time.Second)
				}
				time.Sleep(time.Duration(op%5) * 200 * time.Millisecond)
				synctest.Wait()
				checkInvariants(t, w, nodes)
				checkPaused(t, &log, nodes)
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			checkInvariants(t, w, nodes)
			checkPaused(t, &log, nodes)
		})
	})
}

// checkPaused: no fence, pre_promote or promote started while paused,
// except on the target of a standing failover request.
func checkPaused(t *testing.T, log *pauseLog, nodes []*node) {
	t.Helper()
	for _, n := range nodes {
		for _, c := range n.hooks.Calls() {
			if (c.Name == "promote" || c.Name == "pre_promote") && log.pausedAt(c.At) && !log.targetAt(n.id, c.At) {
				t.Fatalf("%s started %s at %v while paused (%+v), not a failover target (%+v); hooks %v",
					n.id, c.Name, c.At, log.paused, log.requests, n.hooks.Reasons())
			}
		}
		for _, at := range n.fence.Times() {
			if log.pausedAt(at) && !log.targetAt(n.id, at) {
				t.Fatalf("%s fenced at %v while paused (%+v), not a failover target (%+v)", n.id, at, log.paused, log.requests)
			}
		}
	}
}

// After a failover --to while paused the replicas follow the new primary
// (the demoted old leader and a third node), but a pause with no promoted
// leader parks nobody: the no-leader run waits for the resume.
func TestPauseFollowsAFailoverToButParksNobody(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", following(10*time.Second))
		b := start(t, w, "b", following(10*time.Second))
		c := start(t, w, "c", following(10*time.Second))
		b.healthy()
		c.healthy()
		b.want(controller.StateStandby)
		c.want(controller.StateStandby)
		synctest.Wait()
		w.SetPause(maintenance)
		b.want(controller.StateOut)
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
		b.want(controller.StateLeader)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		for _, n := range []*node{a, c} {
			got := n.follows()
			if !slices.ContainsFunc(got, func(f string) bool { return strings.HasSuffix(f, ":b@2") }) {
				t.Errorf("%s's follow runs %v while paused, want it to follow b", n.id, got)
			}
		}
	})
}

// With no promoted leader while paused, nobody is parked: the no-leader
// run waits for the resume.
func TestPauseParksNobody(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := start(t, w, "b", following(5*time.Second)) // unhealthy: it never leads
		time.Sleep(time.Second)
		w.SetPause(maintenance)
		time.Sleep(time.Minute)
		b.wantFollows()
		w.SetPause(nil)
		time.Sleep(10 * time.Second)
		if got := b.follows(); !slices.Contains(got, "no_leader:-") {
			t.Errorf("follow runs %v after the resume, want the no-leader run", got)
		}
	})
}

// The target of an operator's failover gets no cooldown also when its own
// failover watch has not reported the request by the time it promotes:
// the request its term read says why it leads.
func TestCooldownNotAfterManualFailoverItsWatchMissed(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b", cooldown(time.Hour))
		b.be.SetFailoverBlind(true)
		b.healthy()
		b.want(controller.StateStandby)
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1"})
		b.want(controller.StateLeader)
		if u := b.c.Status().CooldownUntil; !u.IsZero() {
			t.Errorf("cooldown until %v after a manual failover whose request b's watch missed, want none", u)
		}
	})
}
