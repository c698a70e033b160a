package e2e

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/zktest"
)

// TestLeaderOnIsolatedZooKeeperFollowerDemotesBeforeASuccessorPromotes is the
// lease argument end to end. The failoverd leader is connected only to one
// ZooKeeper follower; that follower is cut off from its peers (quorum and
// election links held, client port up). It goes on answering its clients'
// reads and pings from its local copy for syncLimit × tickTime (12 s), three times
// the session timeout, while the ZooKeeper leader expires the old leader's
// session after 4 s and lets a successor win. The old leader must stand its
// service down on its own (its lease may only be moved by answers the
// ZooKeeper leader gave) before the successor promotes. rpc fencing is off,
// so the only demote of the old leader is its own.
func TestLeaderOnIsolatedZooKeeperFollowerDemotesBeforeASuccessorPromotes(t *testing.T) {
	const (
		session   = 4 * time.Second
		tick      = 200 * time.Millisecond
		syncLimit = 60 // a cut-off follower serves for 12 s
		pinned    = "node-a"
	)
	follower := -1 // the server node-a uses, a follower
	c := clustertest.Start(t, clustertest.Options{
		ZooKeepers: 3, ProxyEnsemble: true, QuorumProxies: true,
		ZKTickTime: tick, ZKSyncLimit: syncLimit, SessionTimeout: session,
		NoRPCFence: true,
		ZKServersOf: func(zc *zktest.Cluster, n *clustertest.Node) []int {
			if follower < 0 {
				follower = (zc.Leader() + 1) % len(zc.Servers)
			}
			if n.ID == pinned {
				return []int{follower}
			}
			var others []int
			for i := range zc.Servers {
				if i != follower {
					others = append(others, i)
				}
			}
			return others
		},
	})
	if syncLimit*tick <= session {
		t.Fatal("the test needs syncLimit × tickTime above the session timeout")
	}
	old := c.Node(pinned)
	if l := c.Leader(); l == nil || l.ID != old.ID {
		time.Sleep(time.Second) // members published healthy
		if out, code := old.CLI("failover", "--to", old.ID, "--timeout", "10s"); code != 0 {
			t.Fatalf("failover --to %s: exit %d: %s", old.ID, code, out)
		}
	}
	if l := c.Leader(); l == nil || l.ID != old.ID {
		t.Fatalf("leader %v, want %s", l, old.ID)
	}
	// The others stand aside for a while after a failover; the test needs
	// them back in the election.
	for _, n := range c.Nodes {
		if n != old {
			waitState(t, n, 60*time.Second, controller.StateStandby, true)
		}
	}
	if m, _ := zktest.Mode(c.ZK.Servers[follower].Addr()); m != "follower" {
		t.Fatalf("server %d is %q, want follower", follower, m)
	}
	time.Sleep(time.Second) // a few renewals through the follower

	cut := time.Now()
	c.ZK.Isolate(follower)
	t.Logf("isolated zookeeper server %d (follower), %s's only server", follower, old.ID)

	promote, ok := waitEvent(t, c, cut, 60*time.Second, "promote")
	if !ok {
		t.Fatal("no successor promoted within 60s of the isolation")
	}
	mode, _ := zktest.Mode(c.ZK.Servers[follower].Addr())
	demote, demoted := waitEvent(t, c, cut, 20*time.Second, "demote", "node", old.ID)
	fence, fenced := waitEvent(t, c, cut, time.Second, "fence", "target", old.ID)
	rel := func(e clustertest.Event) time.Duration { return e.At.Sub(cut).Round(time.Millisecond) }
	t.Logf("after the isolation: %s promoted at +%v (the isolated server was still %q)", promote.KV["node"], rel(promote), mode)
	if fenced {
		t.Logf("%s fenced %s at +%v", fence.KV["node"], old.ID, rel(fence))
	}
	if mode != "follower" {
		t.Errorf("the isolated server stopped serving (%q) before the successor promoted: the test did not reproduce a follower answering from its local copy", mode)
	}
	if !demoted {
		t.Fatalf("%s never demoted after its server was isolated", old.ID)
	}
	t.Logf("%s demoted at +%v (reason %s); margin before the promotion %v",
		old.ID, rel(demote), demote.KV["reason"], promote.At.Sub(demote.At).Round(time.Millisecond))
	if promote.KV["node"] == old.ID {
		t.Fatalf("%s promoted again", old.ID)
	}
	if !demote.At.Before(promote.At) {
		t.Errorf("%s demoted at +%v, after %s promoted at +%v: two leaders for %v",
			old.ID, rel(demote), promote.KV["node"], rel(promote), demote.At.Sub(promote.At).Round(time.Millisecond))
	}

	// Heal: the old leader rejoins as a standby; the successor stays.
	next := c.WaitLeader(old.ID, 30*time.Second)
	c.ZK.Heal(follower)
	waitState(t, old, 60*time.Second, controller.StateStandby, true)
	time.Sleep(2 * time.Second)
	if l := c.Leader(); l == nil || l.ID != next.ID || next.ID != promote.KV["node"] {
		t.Errorf("leader after the heal = %v, want %s", l, promote.KV["node"])
	}
	c.CheckNoOverlap()
}

// waitState waits until n reports state (and, with connected, that its
// ZooKeeper session is connected).
func waitState(t *testing.T, n *clustertest.Node, timeout time.Duration, state controller.State, connected bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, ok := n.Status()
		if ok && s.State == state && (s.Connected || !connected) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not report %s (connected: %t) within %v: %+v", n.ID, state, connected, timeout, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
