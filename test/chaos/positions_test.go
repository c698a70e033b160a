package chaos

import (
	"strings"
	"testing"
)

// A lagging node-b: frozen at 5000 from 1000 ms, the leader node-a
// publishing far ahead of it, node-c (caught up) publishing throughout.
// node-a is killed at 6000; node-b wins at 9000 (cut: 7000) and must
// decline; node-c wins at 9500 and promotes.
const lagBase = `
0 nemesis position_config max_lag=1500 interval=500ms rate=1000
0 nemesis node_config node=node-a priority=1
0 nemesis node_config node=node-b priority=1
0 nemesis node_config node=node-c priority=1
50 nemesis daemon_start node=node-a pid=11
50 nemesis daemon_start node=node-b pid=12
50 nemesis daemon_start node=node-c pid=13
100 nemesis member_position node=node-a position=1100
100 nemesis member_position node=node-b position=1100
100 nemesis member_position node=node-c position=1100
200 daemon elected node=node-a epoch=10
300 hook promote node=node-a epoch=10
1000 nemesis position_freeze node=node-b value=5000 fault=1
1500 nemesis leader_position node=node-a epoch=10 position=5500
4000 nemesis leader_position node=node-a epoch=10 position=8000
5500 nemesis leader_position node=node-a epoch=10 position=9500
6000 nemesis fault phase=inject kind=kill-daemon id=1 target=node-a
6000 nemesis daemon_exit node=node-a pid=11 expected=true err=killed
9000 daemon elected node=node-b epoch=20
`

// lagTail is node-b's decline and node-c's takeover.
const lagTail = `
9050 daemon declined node=node-b why=lagging epoch=20 asked=node-c
9100 daemon state node=node-b from=fencing to=standby reason=lagging epoch=20
9500 daemon elected node=node-c epoch=30
9600 hook promote node=node-c epoch=30
`

func lagViolations(t *testing.T, history string) Report {
	t.Helper()
	r := Check(hist(t, history), cfg)
	for _, v := range r.Violations {
		if v.Kind != VPromotedLagging {
			continue
		}
		t.Logf("found: %v", v)
	}
	return r
}

func TestCheckLaggingClean(t *testing.T) {
	r := lagViolations(t, lagBase+lagTail)
	if n := r.Count(VPromotedLagging); n != 0 {
		t.Fatalf("%d promoted_lagging in a clean history", n)
	}
	if r.MaxLag != 1500 || r.Freezes != 1 || r.LeaderPositions != 3 || r.LaggingWins != 1 || r.LaggingDeclined != 1 {
		t.Errorf("max_lag %d, freezes %d, leader positions %d, lagging wins %d (%d declined); want 1500, 1, 3, 1 (1)",
			r.MaxLag, r.Freezes, r.LeaderPositions, r.LaggingWins, r.LaggingDeclined)
	}
}

// The lagging node promotes: caught. Each fact the rule relies on, taken
// away once, leaves the promotion unjudged.
func TestCheckLagging(t *testing.T) {
	promote := "9200 hook promote node=node-b epoch=20\n"
	if n := lagViolations(t, lagBase+promote).Count(VPromotedLagging); n != 1 {
		t.Fatalf("a lagging node promoted: %d promoted_lagging, want 1", n)
	}
	for _, c := range []struct{ name, from, to string }{
		{"frozen too late (after the cut)", "1000 nemesis position_freeze", "7500 nemesis position_freeze"},
		{"thawed before the promote", "9000 daemon elected node=node-b epoch=20", "9000 daemon elected node=node-b epoch=20\n9100 nemesis position_thaw node=node-b value=14000"},
		{"leader position within max_lag by the cut", "4000 nemesis leader_position node=node-a epoch=10 position=8000\n5500 nemesis leader_position node=node-a epoch=10 position=9500", "7100 nemesis leader_position node=node-a epoch=10 position=9500"},
		{"no max_lag", "0 nemesis position_config max_lag=1500 interval=500ms rate=1000\n", ""},
		{"promote of another epoch", "9000 daemon elected node=node-b epoch=20", "9000 daemon elected node=node-b epoch=19"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := strings.Replace(lagBase, c.from, c.to, 1)
			if h == lagBase {
				t.Fatalf("%q not in the history", c.from)
			}
			if n := lagViolations(t, h+promote).Count(VPromotedLagging); n != 0 {
				t.Errorf("%d promoted_lagging, want none: the rule cannot know", n)
			}
		})
	}
}

// Once a leader position is recorded, the daemon applies max_lag at every
// win whoever else campaigns: a lagging winner that promotes is caught
// whether or not a caught-up candidate stood beside it.
func TestCheckLaggingWithoutACaughtUpCandidate(t *testing.T) {
	promote := "9200 hook promote node=node-b epoch=20\n"
	for _, c := range []struct{ name, from, to string }{
		{"no caught-up candidate publishes", "100 nemesis member_position node=node-c position=1100", "100 nemesis member_position node=node-c position=none"},
		{"the candidate stopped publishing", "9000 daemon elected", "8000 nemesis member_position node=node-c position=none\n9000 daemon elected"},
		{"the polls failed after the cut", "9000 daemon elected", "8000 nemesis position_poll ok=false\n9000 daemon elected"},
		{"the candidate lagged too", "1000 nemesis position_freeze node=node-b value=5000 fault=1", "1000 nemesis position_freeze node=node-b value=5000 fault=1\n1000 nemesis position_freeze node=node-c value=5000 fault=1"},
		{"the candidate's daemon died", "9000 daemon elected", "8000 nemesis daemon_exit node=node-c pid=13 expected=true\n9000 daemon elected"},
		{"the candidate struck by a fault", "9000 daemon elected", "8000 nemesis fault phase=inject kind=kill-service id=2 target=node-c\n9000 daemon elected"},
		{"the only other node has priority 0", "0 nemesis node_config node=node-c priority=1", "0 nemesis node_config node=node-c priority=0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := strings.Replace(lagBase, c.from, c.to, 1)
			if h == lagBase {
				t.Fatalf("%q not in the history", c.from)
			}
			r := lagViolations(t, h+promote)
			if n := r.Count(VPromotedLagging); n != 1 || r.Judged[VPromotedLagging] != 1 {
				t.Errorf("%d promoted_lagging, %d judged; want 1 and 1", n, r.Judged[VPromotedLagging])
			}
		})
	}
}
