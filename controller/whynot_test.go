package controller_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
	"github.com/failoverd/failoverd/healthcheck"
)

// Why a node is not leading (Status.NotLeading): one test per reason, each
// driving the controller into the situation in the in-memory world.

// stampOf formats t as the NotLeading texts do.
func stampOf(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// why is n's Status.NotLeading once the loop settled.
func (n *node) why() string {
	n.t.Helper()
	synctest.Wait()
	return n.c.Status().NotLeading
}

// wantWhy checks that n's NotLeading has code and contains every part, in
// its status and in its member record alike; it returns it.
func (n *node) wantWhy(w *controllertest.World, code string, parts ...string) string {
	n.t.Helper()
	time.Sleep(100 * time.Millisecond) // the member record's debounce
	got := n.why()
	checkWhy(n.t, n.id, got, code, parts...)
	if m, _ := w.Member(n.id); m.NotLeading != got {
		n.t.Fatalf("%s's member record says not leading %q, its status %q", n.id, m.NotLeading, got)
	}
	n.checkDecision(got)
	return got
}

// outCauses are, for each reason of a node out of the election, the
// causes of a candidacy's end the loop acts on with it ("": none ends, the
// node never joined).
var outCauses = map[string][]string{
	controller.NotLeadingStopping:       {"shutdown"},
	controller.NotLeadingHookUnkillable: {"hook_unkillable"},
	controller.NotLeadingStartupDemote:  {""},
	controller.NotLeadingPriorityZero:   {"priority_zero"},
	controller.NotLeadingUnhealthy:      {"unhealthy"},
	controller.NotLeadingJoinRefused:    {"join_refused"},
	controller.NotLeadingCeded:          {"ceded"},
	controller.NotLeadingFencingFailed:  {"ceded"},
	controller.NotLeadingLagging:        {"ceded"},
	controller.NotLeadingBackoff:        {"ceded"},
	controller.NotLeadingStandingAside:  {"failover_handoff"},
	controller.NotLeadingPaused:         {"paused"},
	controller.NotLeadingInitializing:   {"", "join_refused"},
}

// inCodes are the reasons of a node that campaigns.
var inCodes = map[string]bool{
	controller.NotLeadingStandby: true, controller.NotLeadingLagging: true,
	controller.NotLeadingFencingFailed: true, controller.NotLeadingInitializing: true,
}

// checkDecision checks that got, n's NotLeading between terms, is the
// reason of the decision the loop acted on: the same text, a node in the
// election exactly when the loop decided to campaign, and a node out of it
// for the cause that goes with the reason. Only what the Status call adds
// (no session, the elector's refusal) is not the loop's.
func (n *node) checkDecision(got string) {
	n.t.Helper()
	st := n.c.Status()
	if st.State != controller.StateOut && st.State != controller.StateStandby {
		return // in a term: shown from the term
	}
	if !st.Connected || strings.Contains(got, "the elector stays out") {
		return
	}
	join, cause, decided := n.c.Decision()
	code, _, _ := strings.Cut(got, ":")
	switch {
	case decided != got:
		n.t.Fatalf("%s shows not leading %q, but the loop decided %q", n.id, got, decided)
	case join != (st.State == controller.StateStandby):
		n.t.Fatalf("%s is %s with not leading %q, but the loop decided to campaign: %v", n.id, st.State, got, join)
	case join && !inCodes[code]:
		n.t.Fatalf("%s campaigns with not leading %q", n.id, got)
	case !join && !slices.Contains(outCauses[code], cause):
		n.t.Fatalf("%s is out for cause %q with not leading %q (want one of %q)", n.id, cause, got, outCauses[code])
	}
}

// reached records the NotLeading codes the tests showed, while
// TestWhyNotLeadingIsTheDecision runs.
var reached struct {
	sync.Mutex
	codes map[string]bool
}

// The reason shown is the one the loop acted on, for every reason: every
// test of this file again, each shown reason checked against the loop's
// decision (checkDecision), and every code a node sets reached.
func TestWhyNotLeadingIsTheDecision(t *testing.T) {
	reached.Lock()
	reached.codes = map[string]bool{}
	reached.Unlock()
	defer func() {
		reached.Lock()
		reached.codes = nil
		reached.Unlock()
	}()
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"standby", TestWhyStandby},
		{"priority_zero", TestWhyPriorityZero},
		{"unhealthy", TestWhyUnhealthy},
		{"paused", TestWhyPaused},
		{"lagging", TestWhyLaggingBehindTheLeader},
		{"lagging_declined", TestWhyLaggingDeclined},
		{"fencing_failed", TestWhyFencingFailed},
		{"fencing_failed_new_leader", TestWhyFencingFailedNewLeader},
		{"fencing_failed_then_fenced", TestWhyFencingFailedThenFenced},
		{"backoff", TestWhyBackoff},
		{"startup_demote", TestWhyStartupDemoteFailed},
		{"hook_unkillable", TestWhyHookUnkillable},
		{"join_refused", TestWhyJoinRefused},
		{"ceded", TestWhyCeded},
		{"standing_aside", TestWhyStandingAside},
		{"initializing", TestWhyInitializing},
		{"disconnected", TestWhyDisconnected},
		{"demoting_and_stopping", TestWhyDemotingAndStopping},
		{"holds", TestWhyHolds},
		{"startup_demote_before_priority_zero", TestWhyFailedStartupDemoteShowsBeforePriorityZero},
	} {
		t.Run(tc.name, tc.f)
	}
	// held_out is set by `failoverd status` from the leader's holds, never
	// by a node (cmd/failoverd tests it).
	for _, code := range []string{
		controller.NotLeadingStopping, controller.NotLeadingDisconnected, controller.NotLeadingInitializing,
		controller.NotLeadingTakingOver, controller.NotLeadingDemoting, controller.NotLeadingPriorityZero,
		controller.NotLeadingHookUnkillable, controller.NotLeadingStartupDemote, controller.NotLeadingJoinRefused,
		controller.NotLeadingUnhealthy, controller.NotLeadingFencingFailed, controller.NotLeadingLagging,
		controller.NotLeadingBackoff, controller.NotLeadingCeded, controller.NotLeadingStandingAside,
		controller.NotLeadingPaused, controller.NotLeadingStandby,
	} {
		if !reached.codes[code] {
			t.Errorf("no test reached not leading %s", code)
		}
	}
}

func checkWhy(t *testing.T, id, got, code string, parts ...string) {
	t.Helper()
	reached.Lock()
	if reached.codes != nil && strings.HasPrefix(got, code+": ") {
		reached.codes[code] = true
	}
	reached.Unlock()
	if !strings.HasPrefix(got, code+": ") {
		t.Fatalf("%s not leading %q, want code %s", id, got, code)
	}
	for _, p := range parts {
		if !strings.Contains(got, p) {
			t.Fatalf("%s not leading %q, want it to say %q", id, got, p)
		}
	}
}

// The leader has no reason; a standby says which node leads when it
// watches the leader (a follow hook), and only that it is in the election
// when it does not.
func TestWhyStandby(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		if got := a.why(); got != "" {
			t.Fatalf("the leader is not leading: %q", got)
		}
		b := start(t, w, "b", following(0))
		b.healthy()
		b.want(controller.StateStandby)
		b.wantWhy(w, controller.NotLeadingStandby, "in the election; a leads (epoch 1)")
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		if got := c.wantWhy(w, controller.NotLeadingStandby); got != "standby: in the election" {
			t.Errorf("c not leading %q", got)
		}
	})
}

func TestWhyPriorityZero(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		z := start(t, w, "z", priority(0))
		z.healthy()
		z.want(controller.StateOut)
		z.wantWhy(w, controller.NotLeadingPriorityZero, "node.priority is 0")
	})
}

// An unhealthy node says since when and the health check's error; healthy
// again, it is a standby.
func TestWhyUnhealthy(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		time.Sleep(time.Minute)
		at := time.Now()
		b.c.HealthChanged(healthcheck.Healthy, healthcheck.NotResponding, errors.New("GET http://b/health: connection refused"))
		b.want(controller.StateOut)
		b.wantWhy(w, controller.NotLeadingUnhealthy, "health not_responding since "+stampOf(at), ": GET http://b/health: connection refused")
		b.healthy()
		b.want(controller.StateStandby)
		b.wantWhy(w, controller.NotLeadingStandby)
	})
}

func TestWhyPaused(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
		w.SetPause(&cluster.Pause{By: "ops@h1", Reason: "kernel upgrade", At: at})
		b.want(controller.StateOut)
		b.wantWhy(w, controller.NotLeadingPaused, "paused (by ops@h1 at 2026-03-04T05:06:07Z: kernel upgrade)", "no automatic promotion")
	})
}

// With election.max_lag, a standby more than max_lag behind the promoted
// leader's position says by how much; caught up it is a standby; with its
// position unknown it is lagging again.
func TestWhyLaggingBehindTheLeader(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a", withPosition(&fakePosition{pos: 1000}))
		pos := &fakePosition{pos: 500}
		b := start(t, w, "b", maxLag(100), withPosition(pos))
		b.healthy()
		b.want(controller.StateStandby)
		time.Sleep(time.Second) // both positions read and published
		b.wantWhy(w, controller.NotLeadingLagging, "position 500 is 500 behind the leader a's 1000 (election.max_lag 100)")
		pos.set(950)
		time.Sleep(time.Second)
		b.wantWhy(w, controller.NotLeadingStandby, "a leads")
		pos.fail(controller.PositionErrExit)
		time.Sleep(time.Second)
		b.wantWhy(w, controller.NotLeadingLagging, "its position is unknown while election.max_lag is set (100)")
	})
}

// A won term that declined to promote for lag says why and until when it
// stays out.
func TestWhyLaggingDeclined(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("z", 1))
		w.SetLeaderPosition(&cluster.LeaderPosition{NodeID: "z", Epoch: 1, Position: 1000})
		c := start(t, w, "c", maxLag(100), position(500))
		c.healthy()
		synctest.Wait()
		if c.metrics.Count("declined:lagging") != 1 {
			t.Fatalf("c did not decline: %v", c.metrics.Events())
		}
		c.wantWhy(w, controller.NotLeadingLagging,
			"lagging: position 500 is 500 behind the last leader position 1000 (election.max_lag 100); out of the election until "+stampOf(time.Now())[:14])
	})
}

// A node whose fencing of the previous leader fails says which leader,
// since the first failure in a row, and the error; while it fences again
// it is taking over, and says the fence has been failing since then.
func TestWhyFencingFailed(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a")
		a.fence.Fail(100)
		first := time.Now()
		a.healthy()
		a.want(controller.StateOut)
		since := "fencing x@7 failing since " + stampOf(first) + ": " + controllertest.ErrFenceFailed.Error()
		a.wantWhy(w, controller.NotLeadingFencingFailed, since, "; out of the election until ")
		time.Sleep(10 * time.Second)
		if n := a.metrics.Count("fencing_failed"); n < 3 {
			t.Fatalf("%d failed fences in 10 s, want several", n)
		}
		a.want(controller.StateOut)
		a.wantWhy(w, controller.NotLeadingFencingFailed, since) // the first failure in a row
		a.fence.Take(time.Minute)
		time.Sleep(10 * time.Second) // the back-off (at most 8 s and jitter) is over
		a.want(controller.StateFencing)
		// Not in the member record: none is written during a takeover.
		checkWhy(t, "a", a.why(), controller.NotLeadingTakingOver, "(epoch ", "): fencing x@7 (failing since "+stampOf(first))
		// That fence fails too (after its minute); while a backs off, b is
		// elected and fences for a while, so once the back-off is over a
		// is a standby again: the streak still says why it does not lead.
		// (Waiting for the failure itself: a fixed sleep could end after a
		// short back-off, with a fencing again.)
		for n := a.metrics.Count("fencing_failed"); a.metrics.Count("fencing_failed") == n; {
			time.Sleep(100 * time.Millisecond)
		}
		a.want(controller.StateOut)
		b := start(t, w, "b")
		b.fence.Take(time.Minute)
		b.healthy()
		b.want(controller.StateFencing)
		time.Sleep(10 * time.Second)
		a.want(controller.StateStandby)
		a.wantWhy(w, controller.NotLeadingFencingFailed, since, "; in the election again, trying again")
	})
}

// The streak of failed fences ends when another node is seen leading: a
// new target.
func TestWhyFencingFailedNewLeader(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a", following(0))
		a.fence.Fail(1)
		a.healthy()
		a.want(controller.StateOut)
		a.wantWhy(w, controller.NotLeadingFencingFailed, "fencing x@7 failing since ")
		leader(t, w, "b") // while a backs off
		time.Sleep(10 * time.Second)
		a.want(controller.StateStandby)
		a.wantWhy(w, controller.NotLeadingStandby, "b leads")
	})
}

// The streak ends with a later takeover of this node that fences: here
// its term is lost while the promote hook runs, and once back in the
// election it is a plain standby, not still failing to fence x.
func TestWhyFencingFailedThenFenced(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetBreadcrumb(other("x", 7))
		a := start(t, w, "a")
		a.fence.Fail(1)
		a.hooks.On("promote", controllertest.Result{Take: time.Minute})
		a.healthy()
		a.want(controller.StateOut)
		a.wantWhy(w, controller.NotLeadingFencingFailed, "fencing x@7 failing since ")
		time.Sleep(5 * time.Second) // the back-off is over: fenced, promoting
		a.want(controller.StatePromoting)
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.Expire("a")
		b.want(controller.StateLeader)
		time.Sleep(5 * time.Second)
		a.want(controller.StateStandby)
		a.wantWhy(w, controller.NotLeadingStandby, "in the election")
	})
}

// Another failed takeover (here the promote) backs off: the step, since
// when, the error and until when.
func TestWhyBackoff(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.hooks.On("promote", controllertest.Result{Err: errors.New("scripted: promote refused")})
		a.healthy()
		a.want(controller.StateOut)
		a.wantWhy(w, controller.NotLeadingBackoff, "promote_failed since ", "scripted: promote refused", "; out of the election until ")
	})
}

func TestWhyStartupDemoteFailed(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a", script(func(n *node) {
			n.hooks.On("demote", controllertest.Result{Err: errors.New("scripted: boom")})
		}))
		a.healthy()
		a.want(controller.StateOut)
		a.wantWhy(w, controller.NotLeadingStartupDemote, "startup demote failed", "scripted: boom", "; next try at ")
	})
}

func TestWhyHookUnkillable(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		a.hooks.On("demote", controllertest.Result{Unkillable: true})
		a.unhealthy()
		a.want(controller.StateOut)
		a.healthy()
		a.wantWhy(w, controller.NotLeadingHookUnkillable, "demote hook did not exit after SIGKILL")
	})
}

// The join checks' refusal, and the elector's (shown by Status only).
func TestWhyJoinRefused(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a", script(func(n *node) {
			n.be.SetJoinError(&cluster.ModeMismatchError{Mode: "fair", Cluster: "/failoverd/ct", Why: "the cluster runs unfair"})
		}))
		a.healthy()
		a.want(controller.StateOut)
		time.Sleep(time.Second) // the member record is written before the checks run, then again a second later
		a.wantWhy(w, controller.NotLeadingJoinRefused, "the cluster runs unfair")
		b := start(t, w, "b", script(func(n *node) { n.be.SetRefusal(errors.New("scripted: the lease does not fit")) }))
		b.healthy()
		b.want(controller.StateOut)
		b.wantWhy(w, controller.NotLeadingJoinRefused, "the elector stays out: scripted: the lease does not fit")
	})
}

// A cede and a demote request keep the node out until a time.
func TestWhyCeded(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		if err := a.c.Cede(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		a.want(controller.StateOut)
		a.wantWhy(w, controller.NotLeadingCeded, "ceded the leadership; out of the election until "+stampOf(time.Now().Add(time.Minute)))
		b.want(controller.StateLeader)
		if o := b.c.Demote(context.Background(), "test"); !o.Demoted {
			t.Fatalf("demote: %+v", o)
		}
		b.wantWhy(w, controller.NotLeadingCeded, "demoted on request", "out of the election until ")
	})
}

func TestWhyStandingAside(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.SetFailover(&cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "r1", By: "failoverd failover"})
		b.want(controller.StateOut)
		b.wantWhy(w, controller.NotLeadingStandingAside, "a failover request to c stands; out of the election until "+stampOf(time.Now().Add(time.Minute)))
	})
}

// Before the pause record was read the node does not join; a node that
// just started says so.
func TestWhyInitializing(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.HidePause("a", true)
		a := start(t, w, "a")
		if got := a.c.Status().NotLeading; got != "initializing: starting" && !strings.HasPrefix(got, "initializing: waiting") {
			t.Errorf("just started: not leading %q", got)
		}
		a.healthy()
		a.want(controller.StateOut)
		a.wantWhy(w, controller.NotLeadingInitializing, "waiting for the pause record before the startup demote")
		time.Sleep(11 * time.Second) // the startup demote's wait for it is over
		a.wantWhy(w, controller.NotLeadingInitializing, "waiting for the pause record")
		w.HidePause("a", false)
		a.want(controller.StateLeader)
	})
}

// Without a session, a node that does not lead says so (Status only: the
// member record cannot be written then); the leader has no reason.
func TestWhyDisconnected(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b")
		b.healthy()
		b.want(controller.StateStandby)
		w.Node("a").SetConnected(false)
		w.Node("b").SetConnected(false)
		checkWhy(t, "b", b.why(), controller.NotLeadingDisconnected, "no session with the coordination service")
		if got := a.why(); got != "" {
			t.Errorf("the leader, disconnected, is not leading: %q", got)
		}
	})
}

// A leader whose term ends is demoting while its demote runs, then says
// why it is out; a stopped node is stopping.
func TestWhyDemotingAndStopping(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		a.hooks.On("demote", controllertest.Result{Take: 5 * time.Second})
		a.unhealthy()
		a.want(controller.StateDemoting)
		checkWhy(t, "a", a.why(), controller.NotLeadingDemoting, "its term (epoch 1) ended (unhealthy)")
		time.Sleep(6 * time.Second)
		a.wantWhy(w, controller.NotLeadingUnhealthy)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		checkWhy(t, "a", a.why(), controller.NotLeadingStopping)
	})
}

// A node that saw a handover fail holds its target out of its candidates
// and publishes the hold (until when, why); the held target, whose fence
// failed, says so itself.
func TestWhyHolds(t *testing.T) {
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
		if st := c.c.Status(); st.Holds != "" {
			t.Fatalf("c holds %q before any handover", st.Holds)
		}
		b.unhealthy()
		c.want(controller.StateLeader)
		at := time.Now()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		st := c.c.Status()
		want := "a until " + stampOf(at.Add(10*time.Minute)) + ": the request was deleted before the target was promoted"
		if st.Holds != want {
			t.Errorf("c holds %q, want %q", st.Holds, want)
		}
		if m, _ := w.Member("c"); m.Holds != st.Holds {
			t.Errorf("c's member record holds %q, its status %q", m.Holds, st.Holds)
		}
		if h, ok := (cluster.Member{Holds: st.Holds}).HoldOn("a"); !ok || !strings.HasPrefix(h, "until ") {
			t.Errorf("HoldOn(a) = %q, %v", h, ok)
		}
		a.wantWhy(w, controller.NotLeadingFencingFailed, "fencing b@1 failing since ")
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if st := c.c.Status(); st.Holds != "" {
			t.Errorf("c holds %q after the hold ended", st.Holds)
		}
	})
}

// A failed startup demote (the service may still act as primary) shows
// before priority 0: a node that never campaigns must not look harmless
// while its service may be primary.
func TestWhyFailedStartupDemoteShowsBeforePriorityZero(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a", priority(0), script(func(n *node) {
			n.hooks.Always("demote", &controllertest.Result{Err: errors.New("boom")})
		}))
		a.healthy()
		time.Sleep(3 * time.Second)
		a.want(controller.StateOut)
		got := a.c.Status().NotLeading
		if code, _, _ := strings.Cut(got, ":"); code != controller.NotLeadingStartupDemote {
			t.Errorf("not_leading %q, want %s first", got, controller.NotLeadingStartupDemote)
		}
	})
}
