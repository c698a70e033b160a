package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// TestManualFailoverUnfair is TestManualFailover in unfair mode, where every
// standby races for one lock: a switchover must still be a clean handoff to
// the target, on either backend. Several switchovers in a row (rotating the target); each must
// end with the target leading, without any other node winning the election
// on the way (not even for a moment: an "elected" or "candidate won" line in
// its log), without a fence attempt (the old leader deleted its breadcrumb),
// and, from the request's creation (seen by a watch of the test's own
// session or client) to the target's promote hook, within a bound that a clean
// handoff keeps easily on a loaded machine with -race binaries and bash+curl
// hooks (about half a second here) but that a detour through a timeout does
// not: the session timeout (etcd: the lease TTL) is 6 s, so a lock
// orphaned by a live session costs at least 6 s, and a fence attempt fails the test anyway. The CLI's
// own wall time (process start, connecting) only gets a sanity bound.
func TestManualFailoverUnfair(t *testing.T) {
	const handoffBound, cliBound = 3 * time.Second, 15 * time.Second
	clustertest.ForEachBackend(t, clustertest.Options{Mode: "unfair", SessionTimeout: 6 * time.Second, EtcdLeaseTTL: 6 * time.Second}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		requestPath := c.Layout().Failover()
		for i := 0; i < 4; i++ {
			old := waitUnfairReady(t, c, 60*time.Second)
			var target *clustertest.Node
			for j := 1; j < len(c.Nodes); j++ { // rotate the target
				if n := c.Nodes[(i+j)%len(c.Nodes)]; n != old {
					target = n
					break
				}
			}
			requested, err := c.WatchCreated(t.Context(), requestPath)
			if err != nil {
				t.Fatalf("switchover %d: watching %s: %v", i, requestPath, err)
			}
			t0 := time.Now()
			out, code := old.CLI("failover", "--to", target.ID, "--timeout", "30s")
			took := time.Since(t0)
			if code != 0 {
				t.Fatalf("switchover %d (%s → %s): exit %d: %s", i, old.ID, target.ID, code, out)
			}
			var handoff time.Duration
			select {
			case at, ok := <-requested:
				if !ok {
					t.Fatalf("switchover %d: the watch on %s ended without seeing the request created", i, requestPath)
				}
				p := clustertest.Find(c.Events(), "promote", "node", target.ID)
				if len(p) == 0 || !p[len(p)-1].At.After(t0) {
					t.Fatalf("switchover %d: no promote event of %s", i, target.ID)
				}
				handoff = p[len(p)-1].At.Sub(at)
			case <-time.After(5 * time.Second):
				t.Fatalf("switchover %d: the request was never seen created", i)
			}
			t.Logf("switchover %d: %s → %s: request → promote hook %v, CLI %v", i, old.ID, target.ID,
				handoff.Round(time.Millisecond), took.Round(time.Millisecond))
			if l := c.Leader(); l == nil || l.ID != target.ID {
				t.Fatalf("switchover %d: leader after failover = %v, want %s", i, l, target.ID)
			}
			var bad []string
			for _, n := range c.Nodes {
				if n == target {
					continue
				}
				lines, err := clustertest.ReadLog(n.LogPath())
				if err != nil {
					t.Fatal(err)
				}
				for _, msg := range []string{"elected", "candidate won"} {
					for _, l := range clustertest.FindLog(lines, msg, t0) {
						bad = append(bad, fmt.Sprintf("%s logged %q at +%v", n.ID, msg, l.At.Sub(t0).Round(time.Millisecond)))
					}
				}
				for _, l := range clustertest.FindLog(lines, "previous leader fenced", t0) {
					bad = append(bad, fmt.Sprintf("%s fenced %s", n.ID, l.KV["target"]))
				}
			}
			for _, f := range clustertest.Find(c.Events(), "fence_attempt") {
				if f.At.After(t0) {
					bad = append(bad, fmt.Sprintf("fence attempt %v", f.KV))
				}
			}
			if handoff > handoffBound {
				bad = append(bad, fmt.Sprintf("request → promote hook took %v (bound %v)", handoff.Round(time.Millisecond), handoffBound))
			}
			if took > cliBound {
				bad = append(bad, fmt.Sprintf("the CLI took %v (bound %v)", took.Round(time.Millisecond), cliBound))
			}
			if len(bad) > 0 {
				c.DumpLogs()
				t.Fatalf("switchover %d (%s → %s) was not a clean handoff: %s", i, old.ID, target.ID, strings.Join(bad, "; "))
			}
		}
		c.CheckNoOverlap()
	})
}

// waitUnfairReady waits until one node leads and every other one is a
// standby again (in unfair mode a standby has no znode of its own: its
// state is what says it campaigns; a node standing aside reports "out").
func waitUnfairReady(t *testing.T, c *clustertest.Cluster, timeout time.Duration) *clustertest.Node {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var leader *clustertest.Node
		standbys := 0
		for _, n := range c.Nodes {
			s, ok := n.Status()
			switch {
			case !ok:
			case s.State == controller.StateLeader:
				leader = n
			case s.State == controller.StateStandby:
				standbys++
			}
		}
		if leader != nil && standbys == len(c.Nodes)-1 {
			// "standby" is set as the cede ends; give the elector a moment
			// to watch the lock again.
			time.Sleep(200 * time.Millisecond)
			return leader
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.DumpLogs()
	t.Fatalf("no leader with %d standbys within %v", len(c.Nodes)-1, timeout)
	return nil
}
