package policy

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// Who should lead: priorities A=2, B=1, C=1.

// A leads; kill -9 A: B or C leads; A restarts healthy: election.
// preempt_after (3s) later the leader hands over to it gracefully (it
// demotes with reason failover_handoff and deletes its breadcrumb: A
// fences nobody, its promote names no previous leader).
func TestHigherPriorityNodeLeadsAgainAfterItRejoins(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{Priority: map[string]int{"node-a": 2}, ElectionYAML: "  preempt_after: 3s\n"}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		a := c.Node("node-a")
		// Whoever won first, A takes over once it has waited 3 s.
		choiceWaitLeads(t, c, a, 30*time.Second)
		// The others stand by again once A marked a handover to it done: a
		// request still standing when A dies would time out and make A a
		// node that failed a handover (not preferred for 10 minutes).
		choiceWaitStandby(t, c, a)
		// A's first leadership may have come from a handover (whoever won
		// first hands over to A after 3 s). That node would count A's death
		// below as a handover that did not hold and, by design, not prefer A
		// for 10 minutes. Restart the others so that none remembers one: the
		// test is about A rejoining after a crash, not about a failed handover.
		for _, n := range c.Nodes {
			if n == a {
				continue
			}
			n.Signal(syscall.SIGTERM)
			if _, exited := n.Wait(30 * time.Second); !exited {
				t.Fatalf("%s did not exit after SIGTERM", n.ID)
			}
			n.Start()
		}
		if l := c.WaitLeader("", 30*time.Second); l != a {
			t.Fatalf("leader %v after the others restarted, want %s", l, a.ID)
		}
		choiceWaitStandby(t, c, a)

		a.Kill(syscall.SIGKILL)
		second := c.WaitLeader(a.ID, 30*time.Second)
		preempted := choiceMetric(t, second, "failoverd_preemptions_total")

		a.Start()
		if !a.WaitState(30*time.Second, "standby") {
			t.Fatalf("%s did not rejoin as a standby", a.ID)
		}
		standby := time.Now()
		if l := c.Leader(); l != second {
			t.Fatalf("leader %v when %s rejoined, want %s", l, a.ID, second.ID)
		}
		choiceWaitLeads(t, c, a, 30*time.Second)
		if d := time.Since(standby); d < 2500*time.Millisecond {
			t.Errorf("%s led %v after it rejoined, want preempt_after (3s) at least", a.ID, d)
		}
		evs := c.Events()
		handoffs := 0
		for _, e := range clustertest.Find(evs, "demote", "node", second.ID, "reason", "failover_handoff") {
			if e.At.After(standby) {
				handoffs++
			}
		}
		if handoffs != 1 {
			t.Errorf("%s demoted with reason failover_handoff %d times after %s rejoined, want once (a graceful switchover)", second.ID, handoffs, a.ID)
		}
		var promote *clustertest.Event
		for _, e := range clustertest.Find(evs, "promote", "node", a.ID) {
			if e.At.After(standby) {
				promote = &e
			}
		}
		switch {
		case promote == nil:
			t.Errorf("no promote event of %s after it rejoined", a.ID)
		case promote.KV["prev"] != "":
			t.Errorf("%s promoted after fencing %s: the switchover was not graceful", a.ID, promote.KV["prev"])
		}
		for _, e := range clustertest.Find(evs, "fence_attempt", "node", a.ID) {
			if e.At.After(standby) {
				t.Errorf("%s fenced %s after it rejoined", a.ID, e.KV["target"])
			}
		}
		if v, want := choiceMetric(t, second, "failoverd_preemptions_total"), map[string]string{"0": "1", "1": "2"}[preempted]; v != want {
			t.Errorf("%s's failoverd_preemptions_total %s (was %s), want one more", second.ID, v, preempted)
		}
		c.CheckNoOverlap()
	})
}

// A node of priority 1 that wins while A (priority 2) waits hands over to
// A instead of promoting: it neither fences nor promotes; A fences the
// dead leader and promotes. preempt_after is 0 here, so only the decision
// at the win can make A lead.
func TestLowerPriorityWinnerHandsOverToWaitingHigherPriority(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{Priority: map[string]int{"node-a": 2}, ElectionYAML: "  preempt_after: 0s\n"}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		a := c.Node("node-a")
		// Stop A (gracefully, if it won the start) so a priority-1 node leads.
		a.Signal(syscall.SIGTERM)
		if err, exited := a.Wait(20 * time.Second); !exited || err != nil {
			t.Fatalf("%s after SIGTERM: exited %v, %v", a.ID, exited, err)
		}
		old := c.WaitLeader(a.ID, 30*time.Second)
		choiceWaitStandby(t, c, old)
		var next *clustertest.Node
		for _, n := range c.Nodes {
			if n != a && n != old {
				next = n
			}
		}
		// A joins last: the queue is old, next, A.
		a.Start()
		if !a.WaitState(30*time.Second, "standby") {
			t.Fatalf("%s did not join as a standby", a.ID)
		}
		time.Sleep(time.Second) // its member record published and seen
		if l := c.Leader(); l != old {
			t.Fatalf("leader %v, want %s (preempt_after 0: no preemption)", l, old.ID)
		}
		declined := choiceMetric(t, next, `failoverd_promotion_declined_total{reason="handoff_preferred"}`)
		killed := time.Now()
		old.Kill(syscall.SIGKILL)
		choiceWaitLeads(t, c, a, 30*time.Second)
		evs := c.Events()
		for _, e := range clustertest.Find(evs, "promote", "node", next.ID) {
			if e.At.After(killed) {
				t.Errorf("%s promoted although %s (priority 2) was waiting", next.ID, a.ID)
			}
		}
		for _, e := range clustertest.Find(evs, "fence_attempt", "node", next.ID) {
			if e.At.After(killed) {
				t.Errorf("%s fenced %s although it handed over", next.ID, e.KV["target"])
			}
		}
		if f := clustertest.Find(evs, "fence", "node", a.ID, "target", old.ID); len(f) != 1 {
			t.Errorf("%s's fences of %s: %v, want one (the handover keeps the target's fencing)", a.ID, old.ID, f)
		}
		// next won once, while A waited, and handed over (it may have
		// done so at the start already, if it won before A).
		if v, want := choiceMetric(t, next, `failoverd_promotion_declined_total{reason="handoff_preferred"}`), map[string]string{"0": "1", "1": "2"}[declined]; v != want {
			t.Errorf("%s's handoff_preferred declines: %s (was %s), want one more", next.ID, v, declined)
		}
		c.CheckNoOverlap()
	})
}

// choiceWaitLeads waits until n is the promoted leader.
func choiceWaitLeads(t *testing.T, c *clustertest.Cluster, n *clustertest.Node, timeout time.Duration) {
	t.Helper()
	if !n.WaitState(timeout, "leader") {
		c.DumpLogs()
		leader := "none"
		if l := c.Leader(); l != nil {
			leader = l.ID
		}
		t.Fatalf("%s does not lead within %v (leader: %s)", n.ID, timeout, leader)
	}
}

// choiceWaitStandby waits until every running node but leader is a
// standby (none stands aside for a failover request any more).
func choiceWaitStandby(t *testing.T, c *clustertest.Cluster, leader *clustertest.Node) {
	t.Helper()
	for _, n := range c.Nodes {
		if n != leader && n.Running() && !n.WaitState(20*time.Second, "standby") {
			st, _ := n.Status()
			t.Fatalf("%s is %s, not a standby, while %s leads", n.ID, st.State, leader.ID)
		}
	}
}

// choiceMetric reads one sample (name with its labels, as exposed) from n's
// /metrics ("" when absent).
func choiceMetric(t *testing.T, n *clustertest.Node, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", n.ID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}
