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

// Maintenance mode and the failover cooldown, end to end (real
// ZooKeeper or etcd, real failoverd processes, the toy service).

// session is the clusters' session timeout: 4 s, so that a loaded machine
// does not add a leadership change of its own (a lease lost to a stalled
// daemon) in the middle of a test.
const session = 4 * time.Second

// holdFor is how long a test watches a paused cluster for a failover that
// must not happen: well over 3 times the usual failover time here (an
// unhealthy leader is replaced in about 0.5 s, a crashed one in about one
// session timeout, 4 s: that test waits 3 × session + 1 s).
const holdFor = 8 * time.Second

// pause runs failoverd pause on n and waits until every running node's
// admin API reports the pause (each daemon's watch saw it).
func pause(t *testing.T, c *clustertest.Cluster, n *clustertest.Node) {
	t.Helper()
	if out, code := n.CLI("pause", "--reason", "e2e maintenance"); code != 0 {
		t.Fatalf("failoverd pause: exit %d\n%s", code, out)
	}
	waitAll(t, c, "the pause", func(st pausedStatus) bool { return st.paused })
}

// resume runs failoverd resume on n and waits until every running node
// saw it.
func resume(t *testing.T, c *clustertest.Cluster, n *clustertest.Node) {
	t.Helper()
	if out, code := n.CLI("resume"); code != 0 {
		t.Fatalf("failoverd resume: exit %d\n%s", code, out)
	}
	waitAll(t, c, "the resume", func(st pausedStatus) bool { return !st.paused })
}

// pausedLeader pauses the cluster once it has a leader and returns the
// leader that stays: on this loaded machine a leader can lose its lease
// between a check and the pause, and its successor's takeover may finish
// (a promote already started) after the pause.
func pausedLeader(t *testing.T, c *clustertest.Cluster) *clustertest.Node {
	t.Helper()
	for attempt := 0; ; attempt++ {
		l := c.WaitLeader("", 30*time.Second)
		pause(t, c, l)
		time.Sleep(time.Second) // a takeover under way ends either way
		if now := c.Leader(); now != nil {
			return now
		}
		if attempt == 2 {
			c.DumpLogs()
			t.Fatal("no leader right after pausing, three times")
		}
		t.Logf("the leader went just before the pause (attempt %d); resuming to try again", attempt+1)
		resume(t, c, l)
	}
}

type pausedStatus struct {
	paused bool
	state  string
}

// waitAll waits until ok holds for every node whose daemon answers.
func waitAll(t *testing.T, c *clustertest.Cluster, what string, ok func(pausedStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		all := true
		for _, n := range c.Nodes {
			if st, up := n.Status(); up && !ok(pausedStatus{paused: st.Paused != nil, state: string(st.State)}) {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			c.DumpLogs()
			t.Fatalf("not every node saw %s within 20s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// since lists the events of kind (with key=value filters) after t0.
func since(c *clustertest.Cluster, t0 time.Time, kind string, kv ...string) []clustertest.Event {
	var out []clustertest.Event
	for _, e := range clustertest.Find(c.Events(), kind, kv...) {
		if e.At.After(t0) {
			out = append(out, e)
		}
	}
	return out
}

// metric returns the line of name in n's /metrics ("" when absent).
func metric(t *testing.T, n *clustertest.Node, name string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + n.AdminAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics of %s: %v", n.ID, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return line
		}
	}
	return ""
}

// A paused cluster keeps an unhealthy leader in place for > 3 × the usual
// failover time (standbys out of the election, health still reported,
// status and the metric show the pause), and resume lets the failover
// happen. On the old code the standbys take over within a second.
func TestPauseKeepsUnhealthyLeaderUntilResume(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{SessionTimeout: session, EtcdLeaseTTL: session}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		l := pausedLeader(t, c)
		for _, n := range c.Nodes {
			if n != l && !n.WaitState(10*time.Second, "out") {
				t.Fatalf("%s is not out of the election while paused", n.ID)
			}
		}
		t0 := time.Now()
		l.SetHealthy(false)
		if !waitHealth(l, "unhealthy", 10*time.Second) {
			t.Fatalf("%s never reported itself unhealthy", l.ID)
		}
		time.Sleep(holdFor)
		if got := c.Leader(); got != l {
			c.DumpLogs()
			t.Fatalf("leader %s after %v paused with an unhealthy leader, want %s kept", nodeID(got), holdFor, l.ID)
		}
		if ev := since(c, t0, "promote"); len(ev) != 0 {
			t.Fatalf("promotions while paused: %+v", ev)
		}
		if ev := since(c, t0, "demote", "node", l.ID); len(ev) != 0 {
			t.Fatalf("the paused leader demoted: %+v", ev)
		}
		out, _ := l.CLI("status")
		if !strings.Contains(out, "PAUSED since ") || !strings.Contains(out, "e2e maintenance") || !strings.Contains(out, "unhealthy") {
			t.Errorf("status while paused:\n%s", out)
		}
		if m := metric(t, l, "failoverd_paused"); m != "failoverd_paused 1" {
			t.Errorf("metric %q, want failoverd_paused 1", m)
		}

		resume(t, c, l)
		next := c.WaitLeader(l.ID, 30*time.Second)
		if m := metric(t, next, "failoverd_paused"); m != "failoverd_paused 0" {
			t.Errorf("metric %q after resume, want failoverd_paused 0", m)
		}
		c.CheckNoOverlap()
	})
}

// A leader killed while paused is not replaced (its session expires, no
// standby campaigns) until resume; then a successor fences it and
// promotes. On the old code a standby takes over one session timeout
// after the kill.
func TestPauseKilledLeaderNotReplacedUntilResume(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{SessionTimeout: session, EtcdLeaseTTL: session}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		l := pausedLeader(t, c)
		t0 := time.Now()
		l.Kill(syscall.SIGKILL)
		hold := 3*session + time.Second // its session is gone after one
		time.Sleep(hold)
		if got := c.Leader(); got != nil {
			t.Fatalf("%s leads %v after the paused leader was killed, want nobody", got.ID, hold)
		}
		if ev := since(c, t0, "promote"); len(ev) != 0 {
			t.Fatalf("promotions while paused: %+v", ev)
		}
		if ev := since(c, t0, "fence_attempt"); len(ev) != 0 {
			t.Fatalf("fencing while paused: %+v", ev)
		}
		var other *clustertest.Node
		for _, n := range c.Nodes {
			if n != l {
				other = n
			}
		}
		out, _ := other.CLI("status")
		if !strings.Contains(out, "Leader: none: the cluster is paused") {
			t.Errorf("status while paused without a leader:\n%s", out)
		}
		resume(t, c, other)
		next := c.WaitLeader(l.ID, 30*time.Second)
		if ev := since(c, t0, "fence", "node", next.ID, "target", l.ID); len(ev) != 1 {
			c.DumpLogs()
			t.Fatalf("%s's fences of %s after resume: %+v, want one", next.ID, l.ID, ev)
		}
		c.CheckNoOverlap()
	})
}

// failover --to works while paused: the leader hands over, the target
// promotes, the cluster stays paused, and the third node stays out.
func TestPauseFailoverToStillWorks(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{SessionTimeout: session, EtcdLeaseTTL: session}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		l := pausedLeader(t, c)
		var to, third *clustertest.Node
		for _, n := range c.Nodes {
			switch {
			case n == l:
			case to == nil:
				to = n
			default:
				third = n
			}
		}
		if out, code := l.CLI("failover", "--to", to.ID, "--timeout", "20s"); code != 0 {
			c.DumpLogs()
			t.Fatalf("failover --to %s while paused: exit %d\n%s", to.ID, code, out)
		}
		if got := c.Leader(); got != to {
			t.Fatalf("leader %s after failover --to %s while paused", nodeID(got), to.ID)
		}
		if st, _ := to.Status(); st.Paused == nil {
			t.Error("the cluster is no longer paused after the failover")
		}
		time.Sleep(2 * time.Second)
		for _, n := range []*clustertest.Node{l, third} {
			if st, ok := n.Status(); !ok || st.State != "out" {
				t.Errorf("%s is %s after the failover while paused, want out", n.ID, st.State)
			}
		}
		c.CheckNoOverlap()
	})
}

// Daemons restarted while paused leave their service alone: a standby
// runs no startup demote and no follow hook, and the leader's graceful
// stop does not demote (its service stays primary) nor does its restart.
// After resume each runs its deferred startup demote before joining, and
// the cluster gets a leader again.
func TestPauseRestartLeavesServiceAlone(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{Follow: true, SessionTimeout: session, EtcdLeaseTTL: session}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		first := c.WaitLeader("", 30*time.Second)
		// Let the standbys' first follow runs finish before the pause.
		deadline := time.Now().Add(20 * time.Second)
		for len(clustertest.Find(c.Events(), "follow_done", "leader", first.ID)) < len(c.Nodes)-1 {
			if time.Now().After(deadline) {
				t.Fatalf("the standbys never followed %s", first.ID)
			}
			time.Sleep(50 * time.Millisecond)
		}
		l := pausedLeader(t, c)
		var s *clustertest.Node
		for _, n := range c.Nodes {
			if n != l {
				s = n
			}
		}
		t0 := time.Now()
		for _, n := range []*clustertest.Node{s, l} {
			n.Signal(syscall.SIGTERM)
			if err, exited := n.Wait(20 * time.Second); !exited || err != nil {
				t.Fatalf("%s after SIGTERM: exited %v, %v", n.ID, exited, err)
			}
			n.Start()
		}
		for _, n := range []*clustertest.Node{s, l} {
			if !n.WaitState(20*time.Second, "out") {
				t.Fatalf("%s did not come back (out) while paused", n.ID)
			}
		}
		waitAll(t, c, "the pause after the restarts", func(st pausedStatus) bool { return st.paused })
		time.Sleep(3 * time.Second)
		if ev := since(c, t0, "demote"); len(ev) != 0 {
			c.DumpLogs()
			t.Fatalf("demotes while paused (stop or startup): %+v", ev)
		}
		if ev := since(c, t0, "follow"); len(ev) != 0 {
			t.Fatalf("follow hooks while paused: %+v", ev)
		}
		if r := l.Role(); r != "primary" {
			t.Errorf("%s's service is %q after its daemon restarted while paused, want primary (left alone)", l.ID, r)
		}

		t1 := time.Now()
		resume(t, c, s)
		next := c.WaitLeader("", 30*time.Second)
		// Each runs its deferred startup demote (retried after a hook timeout
		// on a loaded machine: one that succeeded is what counts).
		deadline = time.Now().Add(20 * time.Second)
		for _, n := range []*clustertest.Node{s, l} {
			for len(since(c, t1, "demote", "node", n.ID, "reason", "startup")) != 1 {
				if time.Now().After(deadline) {
					c.DumpLogs()
					t.Fatalf("%s's startup demotes after resume: %+v, want one", n.ID, since(c, t1, "demote", "node", n.ID))
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		t.Logf("%s leads after resume", next.ID)
		c.CheckNoOverlap()
	})
}

// The cooldown holds an unhealthy new leader after an automatic failover
// and releases it after: with failover_cooldown 10s, a leader that turns
// unhealthy right after taking over keeps leading until about 10 s after
// its promotion, then steps down. On the old code it steps down within a
// second of turning unhealthy.
func TestCooldownHoldsUnhealthyNewLeader(t *testing.T) {
	const cooldown = 10 * time.Second
	clustertest.ForEachBackend(t, clustertest.Options{ElectionYAML: "  failover_cooldown: 10s\n", SessionTimeout: session, EtcdLeaseTTL: session}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		first := c.WaitLeader("", 30*time.Second)
		first.Kill(syscall.SIGKILL)
		l := c.WaitLeader(first.ID, 30*time.Second)
		st, _ := l.Status()
		promoted := time.Now()
		if st.CooldownUntil.IsZero() || st.CooldownUntil.Sub(promoted) > cooldown || st.CooldownUntil.Sub(promoted) < cooldown-5*time.Second {
			t.Fatalf("%s's cooldown_until %v (now %v), want about %v after its promotion", l.ID, st.CooldownUntil, promoted, cooldown)
		}
		l.SetHealthy(false)
		if !waitHealth(l, "unhealthy", 5*time.Second) {
			t.Fatalf("%s never reported itself unhealthy", l.ID)
		}
		// failoverd status first: on a loaded machine the CLI can take
		// longer than the 2 s left at the check below.
		if out, _ := l.CLI("status"); !strings.Contains(out, "cooldown until") {
			t.Errorf("status inside the cooldown:\n%s", out)
		}
		time.Sleep(time.Until(st.CooldownUntil) - 2*time.Second)
		if got := c.Leader(); got != l {
			c.DumpLogs()
			t.Fatalf("leader %s inside the cooldown, want %s kept although unhealthy", nodeID(got), l.ID)
		}
		if m := metric(t, l, "failoverd_cooldown_holds_total"); m != "failoverd_cooldown_holds_total 1" {
			t.Errorf("metric %q, want failoverd_cooldown_holds_total 1", m)
		}
		next := c.WaitLeader(l.ID, 20*time.Second)
		if at := time.Now(); at.Before(st.CooldownUntil) {
			t.Errorf("%s took over at %v, before %s's cooldown ended (%v)", next.ID, at, l.ID, st.CooldownUntil)
		}
		c.CheckNoOverlap()
	})
}

// waitHealth waits until n's admin API reports health.
func waitHealth(n *clustertest.Node, health string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if st, ok := n.Status(); ok && st.Health == health {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func nodeID(n *clustertest.Node) string {
	if n == nil {
		return "none"
	}
	return n.ID
}
