package chaos

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The daemon's and the elector's fencing-first lines, as they log them.
func TestParseDaemonLogFenceFirst(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(&b, nil))
	log.Info("suspected leader does not answer: fencing it before taking over", "target", "node-a", "target_epoch", 10,
		"stood_seconds", 0.61, "probe", "it does not reach the coordination service")
	log.Warn("fenced the suspected leader before taking over", "target", "node-a", "target_epoch", 10, "method", "shell", "duration_seconds", 0.2)
	log.Info("ended the old leader's term after fencing it: its heartbeat stood still", "leader_node", "n_0000000010", "version", 7, "stood_seconds", 0.9)
	log.Info("previous leader was fenced before this term began: not fencing it again", "target", "node-a", "target_epoch", 10)
	evs := ParseDaemonLog(strings.NewReader(b.String()), "node-b")
	var got []string
	for _, e := range evs {
		got = append(got, e.Kind+":"+e.Get("node")+":"+e.Get("target")+e.Get("leader_node"))
	}
	want := "suspect_unanswered:node-b:node-a fenced_first:node-b:node-a took_over_after_fence:node-b:n_0000000010 proved_out_not_fenced:node-b:node-a"
	if strings.Join(got, " ") != want {
		t.Errorf("parsed %q, want %q", strings.Join(got, " "), want)
	}
	if p := evs[0].Get("probe"); p != "it_does_not_reach_the_coordination_service" {
		t.Errorf("probe %q", p)
	}
}

// A fence-first takeover of a crashed leader: counted, and the old
// term's entry deletion (it woke up later) is explained by the proving
// fence of that very term.
const fencedFirstCrash = `
0 nemesis node_config node=node-a priority=1
0 nemesis node_config node=node-b priority=1
0 nemesis node_config node=node-c priority=1
0 daemon elected node=node-a epoch=10 znode=n_0000000010
10 hook promote node=node-a epoch=10
1000 nemesis fault phase=inject kind=pause-daemon-short id=1 target=node-a
1700 daemon suspect_unanswered node=node-b target=node-a target_epoch=10 stood_seconds=0.6 probe=Get_timeout
1750 hook fence node=node-b target=node-a target_epoch=10
1760 daemon fenced_first node=node-b target=node-a target_epoch=10 method=shell
1770 daemon took_over_after_fence node=node-b leader_node=n_0000000010 version=5 stood_seconds=0.7
1800 daemon elected node=node-b epoch=20 znode=n_0000000020
1810 daemon proved_out_not_fenced node=node-b target=node-a target_epoch=10
1820 hook promote node=node-b epoch=20
2500 nemesis fault phase=heal kind=pause-daemon-short id=1 target=node-a
2550 daemon state node=node-a from=leader to=demoting reason=lease_expired epoch=10
2600 daemon leadership_ended node=node-a epoch=10 reason=election:_election_znode_deleted
`

func TestCheckFenceFirstExplained(t *testing.T) {
	r := Check(hist(t, fencedFirstCrash), cfg)
	wantClean(t, r)
	if r.TakeoversAfterFence != 1 || r.ProvingFences != 1 || r.SuspectsUnanswered != 1 || r.ProvedOutSkips != 1 || r.FencedFirstEnds != 1 {
		t.Errorf("counts: takeovers %d fences %d suspects %d skips %d ends %d", r.TakeoversAfterFence, r.ProvingFences,
			r.SuspectsUnanswered, r.ProvedOutSkips, r.FencedFirstEnds)
	}
	if r.Judged[VFencedHealthy] != 2 {
		t.Errorf("judged %d, want 2", r.Judged[VFencedHealthy])
	}
	// The same end without the proving fence of that term: znode_deleted.
	h := strings.Replace(fencedFirstCrash, "1760 daemon fenced_first node=node-b target=node-a target_epoch=10 method=shell\n", "", 1)
	h = strings.Replace(h, "1810 daemon proved_out_not_fenced node=node-b target=node-a target_epoch=10\n", "", 1)
	wantOnly(t, Check(hist(t, h), cfg), VZnodeDeleted)
}

// The key case: the leader is healthy and connected, only its peers cannot
// reach its admin API. Any proving fence of it, any term ended, fails.
// So does one with no fault under way, and one while a fault struck
// another node only.
func TestCheckFencedHealthyLeader(t *testing.T) {
	peers := strings.ReplaceAll(fencedFirstCrash, "pause-daemon-short", PartitionPeersOnly)
	r := Check(hist(t, peers), cfg)
	if n := r.Count(VFencedHealthy); n != 2 {
		t.Errorf("%d fenced_healthy_leader, want 2 (the fence and the ended term): %v", n, r.Violations)
	}
	quiet := strings.ReplaceAll(strings.ReplaceAll(fencedFirstCrash, "1000 nemesis fault phase=inject kind=pause-daemon-short id=1 target=node-a\n", ""),
		"2500 nemesis fault phase=heal kind=pause-daemon-short id=1 target=node-a\n", "")
	if n := Check(hist(t, quiet), cfg).Count(VFencedHealthy); n != 2 {
		t.Errorf("no fault: %d fenced_healthy_leader, want 2", n)
	}
	other := strings.ReplaceAll(fencedFirstCrash, "kind=pause-daemon-short id=1 target=node-a", "kind=kill-daemon id=1 target=node-c")
	if n := Check(hist(t, other), cfg).Count(VFencedHealthy); n != 2 {
		t.Errorf("a fault of another node: %d fenced_healthy_leader, want 2", n)
	}
	// After the heal of partition-peers-only another fault explains a
	// fence: the coordination service's leader killed, the leader's own
	// answer that it did not reach the service.
	after := strings.NewReplacer("1000 nemesis fault phase=inject kind=pause-daemon-short id=1 target=node-a",
		"100 nemesis fault phase=inject kind=partition-peers-only id=1 target=node-a\n500 nemesis fault phase=heal kind=partition-peers-only id=1 target=node-a\n1600 nemesis fault phase=inject kind=etcd-kill-leader id=2 target=m1",
		"2500 nemesis fault phase=heal kind=pause-daemon-short id=1 target=node-a", "2500 nemesis fault phase=heal kind=etcd-kill-leader id=2 target=m1",
		"probe=Get_timeout", "probe=it_does_not_reach_the_coordination_service stood_seconds=1.3",
		"2550 daemon state node=node-a from=leader to=demoting reason=lease_expired", "1790 daemon state node=node-a from=leader to=demoting reason=operator_demote").Replace(fencedFirstCrash)
	if r := Check(hist(t, after), cfg); len(r.Violations) != 0 || r.FenceFirstInCoordFaultsUnreached != 2 {
		t.Errorf("after the heal, in etcd-kill-leader: %v, %d explained by the leader's answer", r.Violations, r.FenceFirstInCoordFaultsUnreached)
	}
	// Long after a heal the fault explains nothing any more.
	late := strings.Replace(fencedFirstCrash, "2500 nemesis fault phase=heal", "500 nemesis fault phase=heal", 1)
	late = strings.Replace(late, "1000 nemesis fault phase=inject", "100 nemesis fault phase=inject", 1)
	late = strings.NewReplacer("1700 ", "9700 ", "1750 ", "9750 ", "1760 ", "9760 ", "1770 ", "9770 ", "1800 ", "9800 ", "1810 ", "9810 ", "1820 ", "9820 ",
		"2550 ", "9850 ", "2600 ", "9900 ").Replace(late)
	if n := Check(hist(t, late), cfg).Count(VFencedHealthy); n != 2 {
		t.Errorf("fenced %v after the heal: %d fenced_healthy_leader, want 2", 9200*time.Millisecond, n)
	}
}

// While the coordination service's leader is killed, a proving fence is
// explained (the leader may not reach it); counted apart, with how many
// had the leader's own answer that it did not.
func TestCheckFenceFirstInCoordinationFault(t *testing.T) {
	h := strings.NewReplacer("kind=pause-daemon-short id=1 target=node-a", "kind=zk-kill-leader id=1 target=zk2",
		"probe=Get_timeout", "probe=it_does_not_reach_the_coordination_service",
		"2550 daemon state node=node-a from=leader to=demoting reason=lease_expired", "1790 daemon state node=node-a from=leader to=demoting reason=operator_demote").Replace(fencedFirstCrash)
	r := Check(hist(t, h), cfg)
	wantClean(t, r)
	if r.FenceFirstInCoordFaults != 2 || r.FenceFirstInCoordFaultsUnreached != 2 {
		t.Errorf("in coordination faults %d (%d unreached), want 2 (2)", r.FenceFirstInCoordFaults, r.FenceFirstInCoordFaultsUnreached)
	}
}

// A lying fence lets the old service act until its own deadline: the
// overlap it causes is measured against that bound, not failed; a
// stand-down past the bound fails fence_lie_bound.
func TestCheckFenceLies(t *testing.T) {
	const lie = `
0 daemon elected node=node-a epoch=10 znode=n_0000000010 session_timeout=2s lease=800ms
10 hook promote node=node-a epoch=10
10 service toy_promote node=node-a epoch=10
1000 nemesis fault phase=inject kind=fence-lies id=1 target=node-a
1700 daemon suspect_unanswered node=node-b target=node-a target_epoch=10 stood_seconds=0.6 probe=Get_timeout
1750 hook fence_lie node=node-b target=node-a target_epoch=10
1760 daemon fenced_first node=node-b target=node-a target_epoch=10 method=shell
1770 daemon took_over_after_fence node=node-b leader_node=n_0000000010 version=5 stood_seconds=0.7
1800 daemon elected node=node-b epoch=20 znode=n_0000000020
1820 hook promote node=node-b epoch=20
1830 service toy_promote node=node-b epoch=20
1840 store write node=node-b epoch=20 seq=1 accepted=true max_epoch=20
1850 store write node=node-a epoch=10 seq=9 accepted=false max_epoch=20
%DEMOTE%
4000 nemesis fault phase=heal kind=fence-lies id=1 target=node-a
`
	ok := strings.Replace(lie, "%DEMOTE%", "2600 service toy_demote node=node-a epoch=10 was=primary\n2610 hook demote node=node-a epoch=10 reason=lease_expired", 1)
	r := Check(hist(t, ok), cfg)
	wantClean(t, r)
	if len(r.FenceLies) != 1 || r.LieViolationsMeasured == 0 {
		t.Fatalf("lies %+v, measured %d", r.FenceLies, r.LieViolationsMeasured)
	}
	l := r.FenceLies[0]
	if l.Lies != 1 || l.Overlap != 770*time.Millisecond || l.Rejected != 1 || l.Bound.Sub(l.Cut) != 2000*time.Millisecond {
		t.Errorf("verdict %+v", l)
	}
	if s := fenceFirstSummary(r); !strings.Contains(s, "lying fence 1 on node-a") {
		t.Errorf("summary %q", s)
	}
	late := strings.Replace(lie, "%DEMOTE%", "3500 service toy_demote node=node-a epoch=10 was=primary\n3510 hook demote node=node-a epoch=10 reason=lease_expired", 1)
	wantOnly(t, Check(hist(t, late), cfg), VFenceLieBound)
}
