package e2e

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// election.fence_first at production timing (ZooKeeper: session 5 s,
// tickTime 2 s; etcd: lease_ttl 5 s), with the shell fence marked as
// proving and rpc proving by itself: three crashes of the leader (the
// daemon killed, the whole host killed, the daemon cut off from the
// coordination service with its service running), each ended by the
// successor fencing the old leader first and then ending its term at the
// heartbeat version it timed (its log says so), long before the expiry.
// Never two promoted leaders (CheckNoOverlap).
func TestFenceFirstWithDaemons(t *testing.T) {
	for _, backend := range []string{clustertest.BackendZooKeeper, clustertest.BackendEtcd} {
		t.Run(backend, func(t *testing.T) { fenceFirstWithDaemons(t, backend) })
	}
}

func fenceFirstWithDaemons(t *testing.T, backend string) {
	const session = 5 * time.Second // production timing
	o := clustertest.Options{Backend: backend, ThroughProxy: true, ShellProves: true,
		ElectionYAML: "  fence_first: true\n  suspect_after: 300ms\n"}
	if backend == clustertest.BackendEtcd {
		o.EtcdLeaseTTL = session
	} else {
		o.SessionTimeout, o.ZKTickTime = session, 2*time.Second
	}
	c := clustertest.Start(t, o)
	c.WaitLeader("", 30*time.Second)
	waitCampaigning(t, c)
	for _, fault := range leaderFaults {
		old := c.Leader()
		if old == nil {
			t.Fatal("no leader")
		}
		time.Sleep(2 * time.Second) // the successor has timed the leader's heartbeats for a while
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
		took := clustertest.FindLog(lines, "ended the old leader's term after fencing it: its heartbeat stood still", t0)
		t.Logf("%s: %s promoted %v after the fault on %s (%s, session %v)", fault, next.ID, ev.At.Sub(t0).Round(time.Millisecond), old.ID, backend, session)
		if len(took) != 1 {
			t.Errorf("%s: %s logged %d early takeovers after a fence, want 1", fault, next.ID, len(took))
		}
		if skip := clustertest.FindLog(lines, "previous leader was fenced before this term began: not fencing it again", t0); len(skip) != 1 {
			t.Errorf("%s: %s logged %d skipped second fences, want 1 (the term it proved out and ended itself)", fault, next.ID, len(skip))
		}
		if d := ev.At.Sub(t0); d > session {
			t.Errorf("%s: promoted %v after the fault, not before the session's end", fault, d)
		}
		endLeaderFault(t, c, old, fault, t0)
	}
	c.CheckNoOverlap()
}

// Fencing first never acts on what a suspicion alone says, on ZooKeeper
// at production timing, with only rpc proving (the shell fence does not):
//   - the peers cut off from a healthy leader's admin API (its heartbeat
//     moves): nobody suspects it, nobody fences;
//   - the leader's host killed: rpc to the dead admin API fails, so no
//     proving fence succeeds and the successor waits for the expiry (the
//     shell fence, which does not prove, then fences on the way in).
func TestFenceFirstNeedsAStillHeartbeatAndAProvingFence(t *testing.T) {
	const session = 5 * time.Second
	c := clustertest.Start(t, clustertest.Options{SessionTimeout: session, ZKTickTime: 2 * time.Second, PeerProxy: true,
		ElectionYAML: "  fence_first: true\n  suspect_after: 300ms\n"})
	c.WaitLeader("", 30*time.Second)
	waitCampaigning(t, c)
	old := c.Leader()
	st, _ := old.Status()
	epoch := st.Epoch

	t0 := time.Now()
	old.PeerProxy.Blackhole(true)
	time.Sleep(3 * session / 2) // many renew intervals of a heartbeat that moves
	old.PeerProxy.Blackhole(false)
	for _, n := range c.Nodes {
		lines, err := clustertest.ReadLog(n.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		if s := clustertest.FindLog(lines, "suspected leader does not answer: fencing it before taking over", t0); len(s) > 0 {
			t.Errorf("%s suspected the healthy leader %s, whose peers only were cut off from it: %v", n.ID, old.ID, s)
		}
	}
	if ev := since(c, t0, "fence_attempt"); len(ev) > 0 {
		t.Errorf("a healthy leader was fenced: %v", ev)
	}
	if l := c.Leader(); l == nil || l.ID != old.ID {
		t.Fatalf("the healthy leader %s lost its term", old.ID)
	}
	if st, _ := old.Status(); st.Epoch != epoch {
		t.Fatalf("the healthy leader %s (epoch %d) lost its term", old.ID, epoch)
	}

	time.Sleep(2 * time.Second)
	t0 = time.Now()
	old.Crash()
	next := c.WaitLeader(old.ID, 30*time.Second)
	ev, ok := waitEvent(t, c, t0, 30*time.Second, "promote", "node", next.ID)
	if !ok {
		t.Fatalf("no promote of %s", next.ID)
	}
	lines, err := clustertest.ReadLog(next.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if took := clustertest.FindLog(lines, "ended the old leader's term after fencing it: its heartbeat stood still", t0); len(took) > 0 {
		t.Errorf("%s ended the dead leader's term early without a proving fence: %v", next.ID, took)
	}
	if d := ev.At.Sub(t0); d < session {
		t.Errorf("%s promoted %v after the crash, before the session's end, without a proving fence", next.ID, d)
	}
	t.Logf("host killed, no proving method reached it: %s promoted %v after the crash (session %v)", next.ID, ev.At.Sub(t0).Round(time.Millisecond), session)
	c.CheckNoOverlap()
}
