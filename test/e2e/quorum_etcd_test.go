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
	const pinned = "node-a"
	member := -1 // the member node-a uses
	c := clustertest.Start(t, clustertest.Options{
		Backend: clustertest.BackendEtcd, EtcdLeaseTTL: 5 * time.Second, NoRPCFence: true,
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
	role := "follower"
	if c.Etcd.Leader() == member {
		role = "leader" // etcd's leadership moved since the start: the other case
	}
	time.Sleep(time.Second) // a few renewals through the member

	cut := time.Now()
	c.Etcd.Isolate(member)
	t.Logf("isolated etcd member %d (%s), %s's only member", member, role, old.ID)

	promote, ok := waitEvent(t, c, cut, 60*time.Second, "promote")
	if !ok {
		t.Fatal("no successor promoted within 60s of the isolation")
	}
	demote, demoted := waitEvent(t, c, cut, 20*time.Second, "demote", "node", old.ID)
	rel := func(e clustertest.Event) time.Duration { return e.At.Sub(cut).Round(time.Millisecond) }
	t.Logf("after the isolation: %s promoted at +%v", promote.KV["node"], rel(promote))
	if !demoted {
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
	c.CheckNoOverlap()
}
