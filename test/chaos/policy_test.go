package chaos

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A run with node-c at priority 0 (logged by the harness after the first
// promotion: priorities hold for the whole run), a veto that makes node-b
// give its term back, and node-b promoting in its next term.
const policyHistory = `
0 hook pre_promote node=node-a epoch=10
10 hook promote node=node-a epoch=10
20 hook promote_done node=node-a epoch=10
100 nemesis node_config node=node-a priority=2 pre_promote=true
100 nemesis node_config node=node-b priority=3 pre_promote=true
100 nemesis node_config node=node-c priority=0 pre_promote=true
1000 nemesis veto phase=on node=node-b fault=1
1000 nemesis fault phase=inject kind=kill-daemon id=1 target=node-a
1000 nemesis daemon_exit node=node-a pid=11 expected=true err=killed
3000 daemon elected node=node-b epoch=20
3010 hook fence node=node-b target=node-a target_epoch=10
3020 hook pre_promote node=node-b epoch=20
3030 hook pre_promote_veto node=node-b epoch=20
3040 daemon state node=node-b from=fencing to=standby reason=pre_promote_veto epoch=20
3500 nemesis veto phase=off node=node-b fault=1
3500 nemesis fault phase=heal kind=kill-daemon id=1 target=node-a
4100 daemon elected node=node-a epoch=25
4110 daemon handover_at_win node=node-a to=node-b reason=preferred_priority epoch=25
4500 daemon elected node=node-b epoch=30
4510 hook pre_promote node=node-b epoch=30
4520 hook promote node=node-b epoch=30
4600 nemesis failover_request id=r1 to=node-a by=node-b reason=preferred_priority done=false
4700 nemesis failover_request id=r1 to=node-a by=node-b reason=preferred_priority done=true
4800 nemesis failover_request id=r2 to=node-b by=- reason=operator done=false
`

func TestCheckPolicyClean(t *testing.T) {
	r := Check(hist(t, policyHistory), cfg)
	for _, v := range r.Violations {
		if v.Kind == VPromotedPriorityZero || v.Kind == VPromotedAfterVeto || v.Kind == VPromotedAfterDecline {
			t.Errorf("violation in a clean policy history: %v", v)
		}
	}
	if !slices.Equal(r.PriorityZero, []string{"node-c"}) || r.ElectionsWithoutZero != 3 {
		t.Errorf("priority 0: %v judged over %d elections, want [node-c] over 3", r.PriorityZero, r.ElectionsWithoutZero)
	}
	if r.HandoversAtWin != 1 || r.Declines != 0 {
		t.Errorf("handovers at a win %d, declines %d; want 1, 0", r.HandoversAtWin, r.Declines)
	}
	if r.Handovers["preferred_priority"] != 1 || r.Handovers["operator"] != 0 || r.HandoversDone != 1 {
		t.Errorf("handovers %v, %d done; want one for priority, done", r.Handovers, r.HandoversDone)
	}
	if r.PrePromotes != 3 || r.Vetoes != 1 || r.VetoFaults != 1 {
		t.Errorf("pre_promote runs %d, vetoes %d, veto faults %d; want 3, 1, 1", r.PrePromotes, r.Vetoes, r.VetoFaults)
	}
}

// Each policy rule, broken once: the priority-0 node elected, or running
// promote (even one the service refused), and a promote in a vetoed term.
func TestCheckPolicy(t *testing.T) {
	for _, c := range []struct {
		name, history, want string
	}{
		{"priority 0 elected", policyHistory + `
5000 daemon elected node=node-c epoch=40
`, VPromotedPriorityZero},
		{"priority 0 promoted, refused", policyHistory + `
5000 hook promote node=node-c epoch=40
5010 hook promote_refused node=node-c epoch=40
`, VPromotedPriorityZero},
		{"priority 0 logged after its promotion", `
0 hook promote node=node-c epoch=10
100 nemesis node_config node=node-c priority=0 pre_promote=true
`, VPromotedPriorityZero},
		{"promoted after handing over", `
3000 daemon elected node=node-b epoch=20
3010 daemon handover_at_win node=node-b to=node-a reason=preferred_priority epoch=20
3040 hook promote node=node-b epoch=20
`, VPromotedAfterDecline},
		{"promoted after declining", `
3000 daemon elected node=node-b epoch=20
3010 daemon declined node=node-b why=lagging epoch=20 asked=node-a
3040 hook promote node=node-b epoch=20
`, VPromotedAfterDecline},
		{"promoted after a veto", `
3000 daemon elected node=node-b epoch=20
3020 hook pre_promote node=node-b epoch=20
3030 hook pre_promote_veto node=node-b epoch=20
3040 hook promote node=node-b epoch=20
`, VPromotedAfterVeto},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Check(hist(t, c.history), cfg)
			found := false
			for _, v := range r.Violations {
				switch v.Kind {
				case c.want:
					found = true
					t.Logf("caught: %v", v)
				case VPromotedPriorityZero, VPromotedAfterVeto, VPromotedAfterDecline:
					t.Errorf("unexpected violation %v", v)
				}
			}
			if !found {
				t.Errorf("no %s found", c.want)
			}
		})
	}
}

// The seed decides the priorities; forceZero always yields one priority-0
// node, and every other node campaigns (1..3).
func TestDrawPolicy(t *testing.T) {
	zeros := 0
	for seed := uint64(0); seed < 300; seed++ {
		p := DrawPolicy(seed, false)
		if !maps.Equal(p.Priority, DrawPolicy(seed, false).Priority) {
			t.Fatalf("seed %d: two draws differ", seed)
		}
		z := countZero(p)
		if z > 1 {
			t.Fatalf("seed %d: %v has %d priority-0 nodes", seed, p, z)
		}
		zeros += z
		if f := DrawPolicy(seed, true); countZero(f) != 1 {
			t.Fatalf("seed %d forced: %v", seed, f)
		}
		for id, pr := range p.Priority {
			if pr < 0 || pr > 3 {
				t.Fatalf("seed %d: %s priority %d", seed, id, pr)
			}
		}
	}
	if zeros < 100 || zeros > 300*9/10 {
		t.Errorf("%d of 300 runs have a priority-0 node, want about %d%%", zeros, ZeroPriorityShare)
	}
}

func countZero(p Policy) int {
	n := 0
	for _, pr := range p.Priority {
		if pr == 0 {
			n++
		}
	}
	return n
}

// The daemons' decisions are read from their logs, with the messages the
// controller logs (a renamed message would make the rules judge nothing).
func TestParseDaemonLogDecisions(t *testing.T) {
	var b strings.Builder
	l := slog.New(slog.NewJSONHandler(&b, nil))
	l.Info("elected while a better candidate waits: handing over without fencing or promoting", "to", "node-b", "reason", "preferred_priority", "epoch", 7)
	l.Warn("elected but not promoting", "why", "not promoting: this node is lagging", "epoch", 8, "asked", "node-c")
	l.Info("handing leadership over to a standby of a higher priority", "to", "node-b", "priority", 3, "epoch", 9)
	evs := ParseDaemonLog(strings.NewReader(b.String()), "node-a")
	want := []string{KindHandoverAtWin, KindDeclined, KindPreempt}
	if len(evs) != len(want) {
		t.Fatalf("parsed %+v", evs)
	}
	for i, e := range evs {
		if e.Kind != want[i] || e.Get("node") != "node-a" || e.Int("epoch") != int64(7+i) {
			t.Errorf("event %d: %+v, want %s at epoch %d", i, e, want[i], 7+i)
		}
	}
	files, _ := filepath.Glob("../../controller/*.go")
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for msg, kind := range daemonMessages {
		if (kind == KindHandoverAtWin || kind == KindDeclined || kind == KindPreempt) && !strings.Contains(src.String(), `"`+msg+`"`) {
			t.Errorf("package controller no longer logs %q", msg)
		}
	}
}
