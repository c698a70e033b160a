package e2e

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// TestLeaderOnIsolatedEtcdMemberDemotesBeforeASuccessorPromotes is the
// etcd backend's lease argument end to end, the twin of the ZooKeeper
// follower test: the failoverd leader reaches etcd only through one
// member, and that member is cut off from its peers (raft links held, its
// client port up). It cannot forward the leader's lease renewals to the
// etcd leader (or, if it led, it steps down), so the lease runs out on the
// majority's clock and a successor wins; the old leader must stand its
// service down on its own (its deadline counts only renewals etcd
// answered) before the successor promotes. rpc fencing is off, so the
// only demote of the old leader is its own.
func TestLeaderOnIsolatedEtcdMemberDemotesBeforeASuccessorPromotes(t *testing.T) {
	c, old, member := isolatedMemberCluster(t, 5*time.Second)
	role := "follower"
	if c.Etcd.Leader() == member {
		role = "leader" // etcd's leadership moved since the start: the other case
	}
	isolateAndCheck(t, c, old, member, role)
	c.CheckNoOverlap()
}

// TestLeaderOnIsolatedEtcdLeaderDemotesBeforeASuccessorPromotes: the same
// with the failoverd leader's only member the etcd *leader*, at a 3s
// lease, three times on one cluster. The isolated etcd leader answers
// keepalives from its own lessor until CheckQuorum steps it down (up to
// about two election timeouts), while the majority elects a new etcd
// leader after about one and extends leases by one election timeout only:
// the old failoverd leader must not count those renewals (each is
// confirmed by a linearizable read, which the cut-off leader cannot
// serve) and must demote before its successor promotes.
func TestLeaderOnIsolatedEtcdLeaderDemotesBeforeASuccessorPromotes(t *testing.T) {
	c, old, member := isolatedMemberCluster(t, 3*time.Second)
	for round := range 3 {
		if round > 0 {
			// The old leader leads again through its member (once its
			// new session published its member record).
			deadline := time.Now().Add(60 * time.Second)
			for {
				out, code := old.CLI("failover", "--to", old.ID, "--timeout", "30s")
				if code == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: failover --to %s: exit %d: %s", round, old.ID, code, out)
				}
				time.Sleep(time.Second)
			}
			if l := c.Leader(); l == nil || l.ID != old.ID {
				t.Fatalf("round %d: leader %v, want %s", round, l, old.ID)
			}
			for _, n := range c.Nodes {
				if n != old {
					waitState(t, n, 60*time.Second, controller.StateStandby, true)
				}
			}
		}
		c.Etcd.MoveLeader(member)
		t.Logf("round %d", round)
		isolateAndCheck(t, c, old, member, "leader")
	}
	c.CheckNoOverlap()
}

// isolatedMemberCluster starts three daemons on etcd with leases of ttl,
// rpc fencing off, node-a reaching etcd only through one member (a
// follower at the start) and the others through the other two; it makes
// node-a the leader and waits until the others stand by.
func isolatedMemberCluster(t *testing.T, ttl time.Duration) (*clustertest.Cluster, *clustertest.Node, int) {
	t.Helper()
	const pinned = "node-a"
	member := -1 // the member node-a uses
	c := clustertest.Start(t, clustertest.Options{
		Backend: clustertest.BackendEtcd, EtcdLeaseTTL: ttl, NoRPCFence: true,
		EtcdMembersOf: func(ec *etcdtest.Cluster, n *clustertest.Node) []int {
			if member < 0 {
				member = (ec.Leader() + 1) % len(ec.Members) // a follower at the start
			}
			if n.ID == pinned {
				return []int{member}
			}
			var others []int
			for i := range ec.Members {
				if i != member {
					others = append(others, i)
				}
			}
			return others
		},
	})
	old := c.Node(pinned)
	if l := c.Leader(); l == nil || l.ID != old.ID {
		time.Sleep(time.Second) // members published healthy
		if out, code := old.CLI("failover", "--to", old.ID, "--timeout", "20s"); code != 0 {
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
	return c, old, member
}

// isolateAndCheck cuts member off from its peers, checks that old demotes
// before a successor promotes, heals, and checks that old rejoins as a
// standby under that successor.
func isolateAndCheck(t *testing.T, c *clustertest.Cluster, old *clustertest.Node, member int, role string) {
	t.Helper()
	time.Sleep(time.Second) // a few renewals through the member

	cut := time.Now()
	c.Etcd.Isolate(member)
	t.Logf("isolated etcd member %d (%s), %s's only member", member, role, old.ID)

	promote, ok := waitEvent(t, c, cut, 60*time.Second, "promote")
	if !ok {
		c.Etcd.Heal(member)
		t.Fatal("no successor promoted within 60s of the isolation")
	}
	demote, demoted := waitEvent(t, c, cut, 20*time.Second, "demote", "node", old.ID)
	rel := func(e clustertest.Event) time.Duration { return e.At.Sub(cut).Round(time.Millisecond) }
	t.Logf("after the isolation: %s promoted at +%v", promote.KV["node"], rel(promote))
	if !demoted {
		c.Etcd.Heal(member)
		t.Fatalf("%s never demoted after its member was isolated", old.ID)
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
	c.Etcd.Heal(member)
	waitState(t, old, 60*time.Second, controller.StateStandby, true)
	time.Sleep(2 * time.Second)
	if l := c.Leader(); l == nil || l.ID != next.ID || next.ID != promote.KV["node"] {
		t.Errorf("leader after the heal = %v, want %s", l, promote.KV["node"])
	}
}
