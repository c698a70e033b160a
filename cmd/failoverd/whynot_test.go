package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// member is a record of node id in state (healthy) with reason why.
func member(id, state, why string) cluster.Member {
	return cluster.Member{NodeID: id, State: state, Health: "healthy", NotLeading: why}
}

func sick(m cluster.Member, health string) cluster.Member {
	m.Health = health
	return m
}

// Why no member leads, from the members' reasons and the pause.
func TestNoLeaderWhy(t *testing.T) {
	zero := 0
	old := cluster.Member{NodeID: "old", State: "out", Health: "healthy", Priority: &zero} // no reason: an earlier version
	pause := &cluster.Pause{By: "ops", At: time.Unix(1, 0)}
	for _, tc := range []struct {
		name  string
		ms    []cluster.Member
		pause *cluster.Pause
		want  string
	}{
		{"no members", nil, nil, "no member is running (no member records)"},
		{"a leader", []cluster.Member{member("a", "leader", ""), sick(member("b", "out", "unhealthy: health unhealthy"), "unhealthy")}, nil, ""},
		{"a leader while paused", []cluster.Member{member("a", "leader", "")}, pause, ""},
		{"every member unhealthy", []cluster.Member{
			sick(member("a", "out", "unhealthy: health unhealthy since T"), "unhealthy"),
			sick(member("b", "out", "priority_zero: node.priority is 0"), "not_responding"),
		}, pause, "every member is unhealthy (a: unhealthy, b: not_responding)"},
		{"fencing fails", []cluster.Member{
			member("a", "out", "fencing_failed: fencing c@3 failing since 2026-01-02T03:04:05Z: refused; out of the election until T"),
			member("b", "out", "standing_aside: a failover request to a stands"),
		}, nil, "a cannot take over: fencing c@3 failing since 2026-01-02T03:04:05Z: refused; out of the election until T"},
		{"fencing fails, back in the election", []cluster.Member{
			member("a", "standby", "fencing_failed: fencing c@3 failing since 2026-01-02T03:04:05Z: refused; in the election again, trying again"),
			member("b", "standby", "standby: in the election"),
		}, nil, "a cannot take over: fencing c@3 failing since 2026-01-02T03:04:05Z: refused; in the election again, trying again"},
		{"taking over", []cluster.Member{
			member("a", "standby", "standby: in the election"),
			member("b", "fencing", "taking_over: elected at T (epoch 4): fencing c@3"),
		}, nil, "b is taking over: elected at T (epoch 4): fencing c@3"},
		{"paused and the leader stepped down", []cluster.Member{
			member("a", "out", "paused: the cluster is paused (by ops at T): no automatic promotion"),
			sick(member("b", "out", "unhealthy: health unhealthy"), "unhealthy"),
		}, pause, "the cluster is paused: no automatic failover until 'failoverd resume' (failover --to still works)"},
		{"election under way", []cluster.Member{
			sick(member("a", "out", "unhealthy: health unhealthy"), "unhealthy"),
			member("b", "standby", "standby: in the election; no promoted leader seen"),
		}, nil, "no leader elected yet: b is in the election"},
		{"mixed, grouped by code", []cluster.Member{
			sick(member("a", "out", "unhealthy: health unhealthy"), "unhealthy"),
			member("b", "out", "lagging: position 5 is 95 behind; out of the election until T"),
			old,
			sick(member("d", "out", "unhealthy: health not_responding"), "not_responding"),
			member("e", "out", "out_startup_demote: startup demote failed: boom"),
		}, nil, "no member may lead (unhealthy: a, d; lagging: b; priority 0, never leads: old; out_startup_demote: e)"},
		{"none in the election", []cluster.Member{
			member("a", "out", "hook_unkillable: since T: the demote hook did not exit after SIGKILL"),
			member("b", "out", "join_refused: node id b is already used"),
		}, nil, "no member may lead (hook_unkillable: a; join_refused: b)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := noLeaderWhy(tc.ms, tc.pause); got != tc.want {
				t.Errorf("noLeaderWhy = %q\n                 want %q", got, tc.want)
			}
		})
	}
}

// A standby that the leader holds after a failed handover is held_out,
// with the leader's until and why; other reasons stay as the record says.
func TestMemberWhy(t *testing.T) {
	leader := member("a", "leader", "")
	leader.Epoch = 3
	leader.Holds = "b until 2026-01-02T03:04:05Z: the request timed out; c until 2026-01-02T04:00:00Z: the request timed out"
	zero := 0
	for _, tc := range []struct {
		m    cluster.Member
		want string
	}{
		{leader, ""},
		{member("b", "standby", "standby: in the election; a leads (epoch 3)"),
			"held_out: the leader a holds it out of its candidates after a failed handover, until 2026-01-02T03:04:05Z: the request timed out"},
		{sick(member("c", "out", "unhealthy: health unhealthy"), "unhealthy"), "unhealthy: health unhealthy"},
		{member("d", "standby", "standby: in the election; a leads (epoch 3)"), "standby: in the election; a leads (epoch 3)"},
		{member("h", "standby", "fencing_failed: fencing x@2 failing since 2026-01-02T03:04:05Z: refused; in the election again, trying again"),
			"standby: in the election; a leads (epoch 3)"},
		{cluster.Member{NodeID: "e", State: "out", Health: "healthy", Priority: &zero}, "priority_zero: node.priority is 0: this node never campaigns"},
		{cluster.Member{NodeID: "f", State: "out", Health: "unhealthy"}, "unhealthy: health unhealthy"},
		{cluster.Member{NodeID: "g", State: "out", Health: "healthy"}, "out: no reason published (a node of an earlier version)"},
	} {
		if got := memberWhy(tc.m, &leader); got != tc.want {
			t.Errorf("memberWhy(%s) = %q, want %q", tc.m.NodeID, got, tc.want)
		}
	}
}

// status prints one line per member that does not lead, wrapped at 100
// columns.
func TestPrintNotLeading(t *testing.T) {
	long := "unhealthy: health not_responding since 2026-01-02T03:04:05Z: GET http://10.0.0.2:6380/health: dial tcp 10.0.0.2:6380: connect: connection refused"
	ms := []cluster.Member{member("a", "leader", ""), sick(member("node-b", "out", long), "not_responding"), member("c", "standby", "standby: in the election; a leads (epoch 1)")}
	var b bytes.Buffer
	printNotLeading(&b, clusterView{Members: ms, NotLeading: notLeadingOf(ms)})
	want := "Not leading: node-b: unhealthy: health not_responding since 2026-01-02T03:04:05Z: GET\n" +
		"    http://10.0.0.2:6380/health: dial tcp 10.0.0.2:6380: connect: connection refused\n" +
		"Not leading: c: standby: in the election; a leads (epoch 1)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	for line := range strings.Lines(b.String()) {
		if len(line) > whyWidth+1 {
			t.Errorf("line longer than %d columns: %q", whyWidth, line)
		}
	}
}
