package controller

import (
	"slices"
	"strings"
	"testing"

	"github.com/failoverd/failoverd/cluster"
)

func pos(v int64) *int64 { return &v }

// standby is a campaigning peer.
func standby(id string, prio int, p *int64) peer {
	return peer{ID: id, Priority: prio, Position: p, Campaigning: true}
}

// Every rule of the decision at a win, in its order.
func TestDecideAtWin(t *testing.T) {
	self := func(prio int, p *int64) peer { return peer{ID: "a", Priority: prio, Position: p, Campaigning: true} }
	lag := pos(100)
	for _, tc := range []struct {
		name   string
		f      winFacts
		act    winAction
		to     string
		reason string
		why    string // a part of Why
	}{
		{name: "alone", f: winFacts{Self: self(1, nil)}, act: actPromote},
		{name: "equal peers: no preference, this node promotes",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("b", 1, nil), standby("c", 1, nil)}}, act: actPromote},
		{name: "rule 4: a higher priority is preferred",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("b", 1, nil), standby("c", 2, nil)}}, act: actHandOff, to: "c", reason: reasonPreferredPriority},
		{name: "rule 1: the target of a request never hands over",
			f: winFacts{Self: self(1, nil), Target: true, Others: []peer{standby("c", 5, nil)}}, act: actPromote},
		{name: "rule 1: the target of a request promotes even when lagging",
			f: winFacts{Self: self(1, pos(0)), Target: true, Others: []peer{standby("c", 1, pos(1000))}, MaxLag: lag}, act: actPromote},
		{name: "rule 1: the target of a node's handover still obeys max_lag",
			f: winFacts{Self: self(1, pos(0)), Target: true, NodeTarget: true, Others: []peer{standby("c", 1, pos(1000))}, MaxLag: lag}, act: actDecline, why: "lagging"},
		{name: "rule 1: the target of a node's handover within max_lag promotes, no preference",
			f: winFacts{Self: self(1, pos(950)), Target: true, NodeTarget: true, Others: []peer{standby("c", 5, pos(1000))}, MaxLag: lag}, act: actPromote},
		{name: "rule 1: the target of a node's handover without max_lag promotes",
			f: winFacts{Self: self(1, pos(0)), Target: true, NodeTarget: true, Others: []peer{standby("c", 5, pos(1000))}}, act: actPromote},
		{name: "rule 2: a node that does not campaign is no candidate",
			f: winFacts{Self: self(1, nil), Others: []peer{{ID: "c", Priority: 2}}}, act: actPromote},
		{name: "rule 2: priority 0 is no candidate",
			f: winFacts{Self: self(1, pos(0)), Others: []peer{standby("c", 0, pos(1000))}}, act: actPromote},
		{name: "rule 2: a node that recently failed a handover is no candidate",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("c", 2, nil)}, Failed: map[string]bool{"c": true}}, act: actPromote},
		{name: "rule 2: another entry for this node id is not another node",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("a", 3, nil)}}, act: actPromote},
		{name: "rule 4: the most advanced wins among equal priorities",
			f: winFacts{Self: self(1, pos(10)), Others: []peer{standby("b", 1, pos(50)), standby("c", 1, pos(20))}}, act: actHandOff, to: "b", reason: reasonPreferredPosition},
		{name: "rule 4: known beats unknown",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("b", 1, pos(0))}}, act: actHandOff, to: "b", reason: reasonPreferredPosition},
		{name: "rule 4: this node wins ties",
			f: winFacts{Self: self(1, pos(50)), Others: []peer{standby("b", 1, pos(50))}}, act: actPromote},
		{name: "rule 4: priority before position",
			f: winFacts{Self: self(2, pos(10)), Others: []peer{standby("b", 1, pos(50))}}, act: actPromote},
		{name: "rule 4: among others, the lowest id wins ties",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("d", 2, nil), standby("c", 2, nil)}}, act: actHandOff, to: "c", reason: reasonPreferredPriority},
		{name: "rule 2: behind the last leader position by more than max_lag",
			f: winFacts{Self: self(1, pos(800)), LeaderPos: pos(1000), MaxLag: lag}, act: actDecline, why: "behind the last leader position"},
		{name: "rule 2: within max_lag of the last leader position",
			f: winFacts{Self: self(1, pos(900)), LeaderPos: pos(1000), MaxLag: lag}, act: actPromote},
		{name: "rule 3: lagging behind a candidate asks it",
			f: winFacts{Self: self(1, pos(800)), Others: []peer{standby("b", 1, pos(1000))}, MaxLag: lag}, act: actDecline, to: "b", reason: reasonPreferredPosition, why: "most advanced candidate"},
		{name: "rule 3: lagging, the other one lags behind the leader too: nobody to ask",
			f: winFacts{Self: self(1, pos(800)), Others: []peer{standby("b", 1, pos(850))}, LeaderPos: pos(1000), MaxLag: lag}, act: actDecline},
		{name: "rule 3: a lagging node asks even a lower priority",
			f: winFacts{Self: self(2, pos(0)), Others: []peer{standby("b", 1, pos(1000))}, MaxLag: lag}, act: actDecline, to: "b", reason: reasonPreferredPosition},
		{name: "rule 2: a lagging higher priority is not preferred",
			f: winFacts{Self: self(1, pos(1000)), Others: []peer{standby("b", 2, pos(500))}, MaxLag: lag}, act: actPromote},
		{name: "rule 2: an unknown position is not eligible under max_lag",
			f: winFacts{Self: self(1, pos(1000)), Others: []peer{standby("b", 2, nil)}, MaxLag: lag}, act: actPromote},
		{name: "rule 3: this node's unknown position under max_lag",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("b", 1, pos(5))}, MaxLag: lag}, act: actDecline, to: "b", reason: reasonPreferredPosition, why: "unknown"},
		{name: "rule 2: nobody publishes positions and no leader ever did: max_lag does not apply",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("b", 1, nil)}, MaxLag: lag}, act: actPromote},
		{name: "rule 2: every position unknown but a leader published one: nobody is eligible",
			f: winFacts{Self: self(1, nil), Others: []peer{standby("b", 1, nil)}, MaxLag: lag, LeaderPos: pos(1000)}, act: actDecline, why: "unknown"},
		{name: "rule 2: a non-candidate's position puts the rule in play",
			f: winFacts{Self: self(1, nil), Others: []peer{{ID: "b", Priority: 1, Position: pos(3)}}, MaxLag: lag}, act: actDecline},
		{name: "rule 2: within max_lag: the most advanced still wins",
			f: winFacts{Self: self(1, pos(950)), Others: []peer{standby("b", 1, pos(1000))}, MaxLag: lag}, act: actHandOff, to: "b", reason: reasonPreferredPosition},
		{name: "rule 2: a failed node's position does not count as the most advanced",
			f: winFacts{Self: self(1, pos(0)), Others: []peer{standby("b", 1, pos(1000))}, MaxLag: lag, Failed: map[string]bool{"b": true}}, act: actPromote},
		{name: "max_lag 0: exactly as advanced only",
			f: winFacts{Self: self(1, pos(999)), Others: []peer{standby("b", 1, pos(1000))}, MaxLag: pos(0)}, act: actDecline, to: "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideAtWin(tc.f)
			if d.Action != tc.act || d.To != tc.to || (tc.reason != "" && d.Reason != tc.reason) || !strings.Contains(d.Why, tc.why) {
				t.Errorf("decideAtWin = %+v, want action %d to %q reason %q why ~%q", d, tc.act, tc.to, tc.reason, tc.why)
			}
		})
	}
}

// The candidates that may replace a running leader.
func TestPreemptCandidates(t *testing.T) {
	lag := pos(100)
	for _, tc := range []struct {
		name string
		f    preemptFacts
		want []string
	}{
		{name: "a higher priority standby", f: preemptFacts{Self: peer{ID: "b", Priority: 1}, Others: []peer{standby("a", 2, nil), standby("c", 1, nil)}}, want: []string{"a"}},
		{name: "equal priority never preempts", f: preemptFacts{Self: peer{ID: "b", Priority: 2}, Others: []peer{standby("a", 2, nil)}}},
		{name: "not campaigning", f: preemptFacts{Self: peer{ID: "b", Priority: 1}, Others: []peer{{ID: "a", Priority: 2}}}},
		{name: "recently failed", f: preemptFacts{Self: peer{ID: "b", Priority: 1}, Others: []peer{standby("a", 2, nil)}, Failed: map[string]bool{"a": true}}},
		{name: "best first", f: preemptFacts{Self: peer{ID: "b", Priority: 1}, Others: []peer{standby("a", 2, pos(1)), standby("d", 3, nil), standby("c", 2, pos(5))}}, want: []string{"d", "c", "a"}},
		{name: "lagging behind the leader", f: preemptFacts{Self: peer{ID: "b", Priority: 1, Position: pos(1000)}, Others: []peer{standby("a", 2, pos(800)), standby("c", 2, pos(950))}, MaxLag: lag}, want: []string{"c"}},
		{name: "ahead of the leader is fine", f: preemptFacts{Self: peer{ID: "b", Priority: 1, Position: pos(1000)}, Others: []peer{standby("a", 2, pos(5000))}, MaxLag: lag}, want: []string{"a"}},
		{name: "unknown under max_lag", f: preemptFacts{Self: peer{ID: "b", Priority: 1, Position: pos(1000)}, Others: []peer{standby("a", 2, nil)}, MaxLag: lag}},
		{name: "leader's position unknown: nobody", f: preemptFacts{Self: peer{ID: "b", Priority: 1}, Others: []peer{standby("a", 2, pos(5))}, MaxLag: lag}},
		{name: "nobody publishes positions: max_lag does not apply", f: preemptFacts{Self: peer{ID: "b", Priority: 1}, Others: []peer{standby("a", 2, nil)}, MaxLag: lag}, want: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range preemptCandidates(tc.f) {
				got = append(got, p.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("preemptCandidates = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPeerOf(t *testing.T) {
	two := 2
	for _, tc := range []struct {
		m    cluster.Member
		want peer
	}{
		{cluster.Member{NodeID: "a", State: "standby", Health: "healthy"}, peer{ID: "a", Priority: 1, Campaigning: true}},
		{cluster.Member{NodeID: "a", State: "standby", Health: "unhealthy", Priority: &two}, peer{ID: "a", Priority: 2}},
		{cluster.Member{NodeID: "a", State: "out", Health: "healthy"}, peer{ID: "a", Priority: 1}},
		{cluster.Member{NodeID: "a", State: "leader", Health: "healthy"}, peer{ID: "a", Priority: 1}},
		// A negative position (not written by failoverd) is unknown.
		{cluster.Member{NodeID: "a", State: "out", Health: "healthy", Position: pos(-5)}, peer{ID: "a", Priority: 1}},
	} {
		if got := peerOf(tc.m); got != tc.want {
			t.Errorf("peerOf(%+v) = %+v, want %+v", tc.m, got, tc.want)
		}
	}
}
