package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// election.take_over_at_deadline on ZooKeeper, with the ensemble's
// tickTime at ZooKeeper's default (2 s), so that an expiry waits in
// tick-sized buckets as in production: three crashes of the leader (the
// daemon killed, the whole host killed, the daemon cut off from ZooKeeper
// with its service running), each ended by the successor deleting the old
// leader's znode at the heartbeat version it timed, before ZooKeeper
// expired the old session (the successor's log says so; a delete after
// the expiry would find nothing and log nothing). Never two promoted
// leaders (CheckNoOverlap): in the cut-off case the old leader demotes by
// its own deadline before the successor promotes.
func TestTakeOverAtTheLeadersDeadlineWithDaemons(t *testing.T) {
	const session = 5 * time.Second // production timing
	// A lease of 2.5 s (the longest is 3.05 s) puts the deadline, lease +
	// demote budget (1.7 s) + 0.25 s = 4.45 s after the newest heartbeat,
	// clear of the session's expiry (5 s after the newest request, rounded
	// up to a tick): with the longest lease the two would race.
	c := clustertest.Start(t, clustertest.Options{SessionTimeout: session, ZKTickTime: 2 * time.Second, ThroughProxy: true,
		ElectionYAML: "  take_over_at_deadline: true\n  lease: 2500ms\n"})
	c.WaitLeader("", 30*time.Second)
	waitCampaigning(t, c)
	for _, fault := range leaderFaults {
		old := c.Leader()
		if old == nil {
			t.Fatal("no leader")
		}
		time.Sleep(session) // the successor has timed the leader's heartbeats for a while
		t0 := time.Now()
		injectLeaderFault(t, old, fault)
		next := c.WaitLeader(old.ID, 30*time.Second)
		ev, ok := waitEvent(t, c, t0, 30*time.Second, "promote", "node", next.ID)
		if !ok {
			t.Fatalf("%s: no promote of %s", fault, next.ID)
		}
		lines, err := clustertest.ReadLog(next.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		took := clustertest.FindLog(lines, "ended the old leader's term at its own deadline: its heartbeat stood still past it", t0)
		t.Logf("%s: %s promoted %v after the fault on %s (session %v, tickTime 2s)", fault, next.ID, ev.At.Sub(t0).Round(time.Millisecond), old.ID, session)
		if len(took) != 1 {
			t.Errorf("%s: %s logged %d early takeovers, want 1: it waited for the session to expire", fault, next.ID, len(took))
		}
		if d := ev.At.Sub(t0); d > session+2*time.Second {
			t.Errorf("%s: promoted %v after the fault, later than the session plus a tick", fault, d)
		}
		endLeaderFault(t, c, old, fault, t0)
	}
	c.CheckNoOverlap()
}

// The three crashes of a leader the takeover tests inject, in order.
var leaderFaults = []string{"daemon killed", "host killed", "cut off"}

// injectLeaderFault crashes old as fault says: its daemon SIGKILLed, its
// whole host (daemon and service) killed, or its daemon cut off from the
// coordination service with its service running (ThroughProxy).
func injectLeaderFault(t *testing.T, old *clustertest.Node, fault string) {
	t.Helper()
	switch fault {
	case "daemon killed":
		if !old.Kill(syscall.SIGKILL) {
			t.Fatalf("the daemon of %s did not die", old.ID)
		}
	case "host killed":
		old.Crash()
	case "cut off":
		old.CutOff(true)
	}
}

// endLeaderFault undoes injectLeaderFault (injected at t0) and waits until
// every node campaigns again; a cut-off leader must have demoted.
func endLeaderFault(t *testing.T, c *clustertest.Cluster, old *clustertest.Node, fault string, t0 time.Time) {
	t.Helper()
	switch fault {
	case "cut off":
		if _, ok := since1(c, t0, "demote", "node", old.ID); !ok {
			t.Errorf("the cut-off %s did not demote", old.ID)
		}
		old.CutOff(false)
	case "host killed":
		old.StartService()
		old.Start()
	default:
		old.Start()
	}
	waitCampaigning(t, c)
}

// since1 is the first event of kind at or after t0.
func since1(c *clustertest.Cluster, t0 time.Time, kind string, kv ...string) (clustertest.Event, bool) {
	ev := since(c, t0, kind, kv...)
	if len(ev) == 0 {
		return clustertest.Event{}, false
	}
	return ev[0], true
}
