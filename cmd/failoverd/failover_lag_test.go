package main

import (
	"strings"
	"testing"

	"github.com/failoverd/failoverd/cluster"
)

// failover --to under election.max_lag: refused when the target is more
// than max_lag behind the last leader position or the most advanced node
// that may lead, or its position is unknown while others publish.
func TestFailoverLagRefusal(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	zero := 0
	member := func(id string, pos *int64) cluster.Member {
		return cluster.Member{NodeID: id, Health: "healthy", State: "standby", Position: pos}
	}
	lp := &cluster.LeaderPosition{NodeID: "x", Epoch: 7, Position: 1000}
	for _, tc := range []struct {
		name    string
		maxLag  *int64
		target  cluster.Member
		members []cluster.Member
		leader  *cluster.LeaderPosition
		want    string // part of the refusal ("": none)
	}{
		{name: "no max_lag", target: member("b", p(0)), members: []cluster.Member{member("a", p(1000))}},
		{name: "within max_lag", maxLag: p(100), target: member("b", p(950)), members: []cluster.Member{member("a", p(1000))}, leader: lp},
		{name: "behind the leader position", maxLag: p(100), target: member("b", p(800)), leader: lp, members: []cluster.Member{member("b", p(800))}, want: "200 behind the last leader position (x, epoch 7)"},
		{name: "behind a live node", maxLag: p(100), target: member("b", p(800)), members: []cluster.Member{member("a", p(5000)), member("b", p(800))}, want: "behind the position of a"},
		{name: "a priority-0 node does not count", maxLag: p(100), target: member("b", p(800)),
			members: []cluster.Member{{NodeID: "w", Health: "healthy", Priority: &zero, Position: p(5000)}, member("b", p(800))}},
		{name: "unknown while others publish", maxLag: p(100), target: member("b", nil), members: []cluster.Member{member("a", p(1))}, want: "unknown"},
		{name: "nobody publishes", maxLag: p(100), target: member("b", nil), members: []cluster.Member{member("a", nil)}, leader: lp},
	} {
		got := failoverLagRefusal(tc.maxLag, tc.target, clusterView{Members: tc.members, LeaderPosition: tc.leader})
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: refusal %q, want %q", tc.name, got, tc.want)
		}
	}
}
