package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// TestLeaderKeepsItsTermWhenTheEtcdLeaderDies: the etcd leader (1 of 3
// members) is killed with SIGKILL under a running failoverd cluster, three
// times, at the PostgreSQL example's demote timeout (3s, a demote budget
// of 3.5s) and the etcd.lease_ttl the documentation gives for it, the
// shortest that leaves an etcd election after one renewal went unanswered
// (etcdcluster.RidesElection: 7s). No renewal is confirmed until the next
// etcd leader is elected; the lease must hold that. The failoverd leader
// must keep its term through every kill: same leader, same epoch, no
// demote, no promote, no etcd session ended. With renewals every TTL/3
// (the interval before it was capped at a second) the same kill ended the
// term with lease_expired in 2 of 4 tries at 6s and 1 of 3 at 9s.
func TestLeaderKeepsItsTermWhenTheEtcdLeaderDies(t *testing.T) {
	const demote = 3 * time.Second
	ttl := etcdcluster.RidesElection(demote + 2*controller.KillGrace)
	if ttl != 7*time.Second {
		t.Fatalf("the lease_ttl that rides an etcd election out at a 3s demote is %v; docs/configuration.md and examples/postgresql say 7s", ttl)
	}
	c := clustertest.Start(t, clustertest.Options{Backend: clustertest.BackendEtcd, EtcdLeaseTTL: ttl, EtcdDemoteTimeout: demote})
	leader := c.Leader()
	if leader == nil {
		t.Fatal("no leader")
	}
	epoch := epochOf(t, leader)
	for _, n := range c.Nodes {
		if n != leader {
			waitState(t, n, 60*time.Second, controller.StateStandby, true)
		}
	}
	ended := func() int { return strings.Count(leader.DaemonLog(), "etcd session ended") }
	endedBefore := ended()
	t0 := time.Now()
	for round := range 3 {
		time.Sleep(3 * time.Second) // renewals on the whole cluster again
		m := c.Etcd.Leader()
		kill := time.Now()
		c.Etcd.Kill(m)
		dead := time.Since(kill) // SIGKILL sent, the process reaped
		next := c.Etcd.Leader()  // polls the members still running
		elected := time.Since(kill)
		// Watch the leader past a whole lease after the kill: a term that
		// could not be renewed would have ended by then.
		minLeft := ttl
		for time.Since(kill) < ttl+time.Second {
			s, ok := leader.Status()
			if ok && (s.State != controller.StateLeader || s.Epoch != epoch) {
				c.Etcd.StartMember(m)
				t.Fatalf("round %d: %s is %s at epoch %d %v after the etcd leader (member %d, reaped after %v, member %d leading %v after the kill) was killed; want leader at epoch %d",
					round, leader.ID, s.State, s.Epoch, time.Since(kill).Round(time.Millisecond), m, dead.Round(time.Millisecond), next, elected.Round(time.Millisecond), epoch)
			}
			if ok {
				minLeft = min(minLeft, time.Duration(s.LeaseRemaining*float64(time.Second)))
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("round %d: killed etcd leader member %d (reaped after %v); member %d led %v later (seen by polling); %s kept epoch %d, least lease_remaining seen %v",
			round, m, dead.Round(time.Millisecond), next, elected.Round(time.Millisecond), leader.ID, epoch, minLeft.Round(time.Millisecond))
		c.Etcd.StartMember(m)
	}
	if l := c.Leader(); l == nil || l.ID != leader.ID || epochOf(t, l) != epoch {
		t.Fatalf("leader %v after the kills, want %s at epoch %d", l, leader.ID, epoch)
	}
	for _, kind := range []string{"promote", "demote"} {
		for _, e := range clustertest.Find(c.Events(), kind) {
			if !e.At.Before(t0) {
				t.Errorf("%s %s at +%v (reason %s): a failover the etcd leader's death caused",
					e.KV["node"], kind, e.At.Sub(t0).Round(time.Millisecond), e.KV["reason"])
			}
		}
	}
	if n := ended() - endedBefore; n != 0 {
		t.Errorf("%s's etcd session ended %d times during the kills; log:\n%s", leader.ID, n, leader.DaemonLog())
	}
	if strings.Contains(leader.DaemonLog(), "lease_expired") {
		t.Errorf("%s's log names lease_expired", leader.ID)
	}
	c.CheckNoOverlap()
}
