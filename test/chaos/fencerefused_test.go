package chaos

import (
	"strings"
	"testing"
)

// fence-refused-then-crash as the checker sees it: node-b proved node-a
// out, its removal was refused (the heartbeat moved), node-a went on
// leading at epoch 10, and later node-a's daemon crashed; node-b won at
// the lease's end and fenced node-a before it promoted.
const fenceRefusedCrash = `
0 nemesis node_config node=node-a priority=1
0 nemesis node_config node=node-b priority=1
0 nemesis node_config node=node-c priority=1
0 daemon elected node=node-a epoch=10 znode=n_0000000010
10 hook promote node=node-a epoch=10
1000 nemesis fault phase=inject kind=fence-refused-then-crash id=1 target=node-a epoch=10
1700 daemon suspect_unanswered node=node-b target=node-a target_epoch=10 stood_seconds=0.6 probe=refused
1750 hook fence_held node=node-b target=node-a target_epoch=10
1900 hook fence_released node=node-b target=node-a target_epoch=10 answer=ok
1910 daemon fenced_first node=node-b target=node-a target_epoch=10 method=shell
1920 daemon removal_refused node=node-b leader_node=n_0000000010
2000 nemesis fault phase=proof kind=fence-refused-then-crash id=1 target=node-a outcome=heartbeat_moved
4000 nemesis fault phase=crash kind=fence-refused-then-crash id=1 target=node-a epoch=10
4000 nemesis daemon_exit node=node-a pid=11 expected=true err=killed
6500 daemon elected node=node-b epoch=20 znode=n_0000000020
%FENCE%
6700 hook promote node=node-b epoch=20
8000 nemesis fault phase=heal kind=fence-refused-then-crash id=1 target=node-a
`

func TestCheckFenceRefusedThenCrash(t *testing.T) {
	fenced := strings.Replace(fenceRefusedCrash, "%FENCE%", "6550 hook fence node=node-b target=node-a target_epoch=10\n"+
		"6560 daemon fenced node=node-b target=node-a target_epoch=10 method=shell", 1)
	r := Check(hist(t, fenced), cfg)
	wantClean(t, r)
	if r.RemovalsRefused != 1 || r.HeldFences != 1 || r.FenceRefusedCrashes != 1 || r.Judged[VFenceSkipped] != 1 {
		t.Errorf("refused %d held %d crashes %d judged %d, want 1 each", r.RemovalsRefused, r.HeldFences, r.FenceRefusedCrashes, r.Judged[VFenceSkipped])
	}
	// The proof outlived its refused removal: the winner skipped the
	// fence. Both parts of the rule fail it (and the overlap rule).
	skipped := strings.Replace(fenceRefusedCrash, "%FENCE%", "6550 daemon proved_out_not_fenced node=node-b target=node-a target_epoch=10", 1)
	r = Check(hist(t, skipped), cfg)
	if n := r.Count(VFenceSkipped); n != 2 {
		t.Errorf("%d fence_skipped, want 2 (the skip, the promote after the crash): %v", n, r.Violations)
	}
	// No fence and no skip at all: the promote after the crash fails.
	r = Check(hist(t, strings.Replace(fenceRefusedCrash, "%FENCE%", "", 1)), cfg)
	if n := r.Count(VFenceSkipped); n != 1 {
		t.Errorf("%d fence_skipped, want 1: %v", n, r.Violations)
	}
}

// A skip stands only for the term the winner proved out and removed
// itself right before it won: after another term of its own in between,
// or a proof of another epoch, it fails.
func TestCheckFenceSkipNeedsItsOwnRemoval(t *testing.T) {
	wantClean(t, Check(hist(t, fencedFirstCrash), cfg))
	between := strings.Replace(fencedFirstCrash, "1800 daemon elected node=node-b epoch=20 znode=n_0000000020\n",
		"1780 daemon elected node=node-b epoch=19 znode=n_0000000019\n1790 daemon state node=node-b from=fencing to=standby reason=ceded epoch=19\n1800 daemon elected node=node-b epoch=20 znode=n_0000000020\n", 1)
	if n := Check(hist(t, between), cfg).Count(VFenceSkipped); n != 1 {
		t.Errorf("a term won in between: %d fence_skipped, want 1", n)
	}
	other := strings.Replace(fencedFirstCrash, "1760 daemon fenced_first node=node-b target=node-a target_epoch=10", "1760 daemon fenced_first node=node-b target=node-a target_epoch=9", 1)
	if n := Check(hist(t, other), cfg).Count(VFenceSkipped); n != 1 {
		t.Errorf("a proof of another epoch: %d fence_skipped, want 1", n)
	}
}

// An operator's failover right after an automatic one: it must go
// through, and its target starts no cooldown (the automatic one does).
func TestCheckOperatorFailoverCooldown(t *testing.T) {
	const h = `
0 daemon elected node=node-a epoch=10
10 hook promote node=node-a epoch=10
1000 nemesis fault phase=inject kind=failover-after-failover id=3 target=node-a
1000 nemesis daemon_exit node=node-a pid=11 expected=true err=killed
2000 daemon elected node=node-b epoch=20
2010 hook fence node=node-b target=node-a target_epoch=10
2100 hook promote node=node-b epoch=20
2110 daemon cooldown node=node-b epoch=20 until=x
2200 nemesis fault phase=operator kind=failover-after-failover id=3 target=node-c from=node-b
2500 hook demote node=node-b epoch=20 reason=failover
2600 daemon elected node=node-c epoch=30
2700 hook promote node=node-c epoch=30
%COOLDOWN%
3000 nemesis operator_failover node=node-c from=node-b code=%CODE% fault=3
4000 nemesis fault phase=heal kind=failover-after-failover id=3 target=node-a
`
	ok := strings.NewReplacer("%COOLDOWN%", "", "%CODE%", "0").Replace(h)
	r := Check(hist(t, ok), cfg)
	if n := r.Count(VOperatorCooldown); n != 0 || r.OperatorFailovers != 1 || r.Cooldowns != 1 || r.Judged[VOperatorCooldown] != 1 {
		t.Errorf("clean: %d violations, %d failovers, %d cooldowns: %v", n, r.OperatorFailovers, r.Cooldowns, r.Violations)
	}
	cool := strings.NewReplacer("%COOLDOWN%", "2710 daemon cooldown node=node-c epoch=30 until=x", "%CODE%", "0").Replace(h)
	if n := Check(hist(t, cool), cfg).Count(VOperatorCooldown); n != 1 {
		t.Errorf("the operator's target started a cooldown: %d violations, want 1", n)
	}
	refused := strings.NewReplacer("%COOLDOWN%", "", "%CODE%", "1").Replace(h)
	if n := Check(hist(t, refused), cfg).Count(VOperatorCooldown); n != 1 {
		t.Errorf("the failover was refused: %d violations, want 1", n)
	}
}
