package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// SliceSeed is the CI slice's fixed seed.
const SliceSeed = 1

// TestChaosSlice is the short fixed-seed schedule `make test` runs: every
// fault kind once, in a seeded order, then the checker. Its seed draws
// priorities 2, 3, 3 (no priority-0 node: lagging-failover then has a
// caught-up candidate to judge against; TestChaosSliceUnfair has one). It
// fails (does not skip) without ZooKeeper under CI=true.
func TestChaosSlice(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos slice: real cluster, about 3 minutes")
	}
	r := run(t, schedule{seed: SliceSeed, mode: "fair", kinds: AllKinds,
		replay: fmt.Sprintf("go test -run 'TestChaosSlice$' ./test/chaos/ (seed %d, every kind once)", SliceSeed)})
	report(t, r)
}

// TestChaosSliceUnfair is the unfair-mode part of the slice: lost replies
// around the leader's leave and join, each variant once, and lost replies
// followed by a reconnect to a lagging server (the leaver's Finish, the
// successor's breadcrumb write), each variant once. One node has
// priority 0.
func TestChaosSliceUnfair(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos slice: real cluster, about a minute")
	}
	kinds := []string{LostReplies, LostReplies, LostReplies, LostReplyLagging, LostReplyLagging}
	r := run(t, schedule{seed: SliceSeed, mode: "unfair", kinds: kinds, fixed: true, zero: true,
		replay: fmt.Sprintf("go test -run TestChaosSliceUnfair ./test/chaos/ (seed %d)", SliceSeed)})
	report(t, r)
}

// TestChaosSliceEtcd is the etcd backend's slice: every etcd nemesis once,
// the daemon kinds that end a term by a crash or a pause, a reload under a
// takeover and the operator's breadcrumb clear, in a seeded order, on a
// 3-member etcd cluster of separate processes. It fails (does not skip)
// without etcd under CI=true.
func TestChaosSliceEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos slice: real etcd cluster, about 3 minutes")
	}
	r := run(t, schedule{backend: clustertest.BackendEtcd, seed: SliceSeed, mode: "fair", kinds: EtcdSliceKinds,
		replay: fmt.Sprintf("go test -run 'TestChaosSliceEtcd$' ./test/chaos/ (seed %d, every etcd nemesis once)", SliceSeed)})
	report(t, r)
}

// TakeoverSliceKinds is TestChaosSliceTakeover's schedule: the faults
// that end a ZooKeeper leader's term by its silence (a crash, a pause, a
// partition from ZooKeeper), those that must not let a successor take
// over (a partition between the leader and its peers only, slow or reset
// connections, the ensemble's leader killed, a quorum partition), and a
// handover.
var TakeoverSliceKinds = []string{KillDaemon, PauseDaemon, PartitionZK, PartitionPeer, LatencyZK, ResetZK, ZKKillLeader,
	QuorumPartition, HandoverKill, KillDaemon, PauseDaemon, PartitionZK}

// TestChaosSliceTakeover is the slice with election.take_over_at_deadline
// on (ZooKeeper, fair mode): every fault above once (the three that end
// a term by silence twice), then the checker. A successor that ended a
// live leader's term shows as VZnodeDeleted; two promoted leaders as the
// overlap rules. The run must see at least one takeover at a deadline,
// or it proved nothing about the option.
func TestChaosSliceTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos slice: real cluster, about 3 minutes")
	}
	t.Setenv("CHAOS_TAKEOVER", "1")
	r := run(t, schedule{seed: SliceSeed, mode: "fair", kinds: TakeoverSliceKinds, fixed: true,
		replay: fmt.Sprintf("CHAOS_TAKEOVER=1 go test -run 'TestChaosSliceTakeover$' ./test/chaos/ (seed %d)", SliceSeed)})
	report(t, r)
	if r.r.TakeoversAtDeadline == 0 {
		t.Error("no successor took over at a leader's deadline: the slice judged nothing of the option")
	}
}

// TestChaosSliceRestartEndsTerm is the slice with
// election.end_own_term_on_restart on, on each backend: the leader's
// daemon killed (and restarted 0.3–4 s later) four times and paused once,
// then the checker. The run must see at least one previous entry removed
// by a restarted daemon, or it proved nothing about the option.
func TestChaosSliceRestartEndsTerm(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos slice: real clusters, about 2 minutes")
	}
	t.Setenv("CHAOS_RESTART_ENDS_TERM", "1")
	kinds := []string{KillDaemon, KillDaemon, PauseDaemon, KillDaemon, KillDaemon}
	for _, backend := range []string{clustertest.BackendZooKeeper, clustertest.BackendEtcd} {
		t.Run(backend, func(t *testing.T) {
			r := run(t, schedule{backend: backend, seed: SliceSeed, mode: "fair", kinds: kinds, fixed: true,
				replay: fmt.Sprintf("CHAOS_RESTART_ENDS_TERM=1 go test -run 'TestChaosSliceRestartEndsTerm/%s' ./test/chaos/ (seed %d)", backend, SliceSeed)})
			report(t, r)
			if r.r.OwnEntriesRemoved == 0 {
				t.Error("no restarted daemon removed its previous entry: the slice judged nothing of the option")
			}
		})
	}
}

// FenceFirstSliceKinds is TestChaosSliceFenceFirst's schedule on a
// backend: the faults that stop a leader's heartbeat (its daemon killed,
// its host crashed, a short pause, a cut from the coordination service
// only), each twice (the second kill is failover-after-failover's, with
// an operator's failover right after it; the second pause
// fence-refused-then-crash's, whose proof is refused its removal before
// the leader really crashes), the one that must not end its term (its
// peers cut off from its admin API only), twice, the coordination
// service's own leader killed, and a lying fence last.
func FenceFirstSliceKinds(backend string) []string {
	coordLeader := ZKKillLeader
	if backend == clustertest.BackendEtcd {
		coordLeader = EtcdKillLeader
	}
	return []string{KillDaemon, CrashHost, PauseDaemonShort, PartitionCoordLeader, PartitionPeersOnly, coordLeader,
		FailoverAfterFailover, FenceRefusedThenCrash, CrashHost, PartitionPeersOnly, PartitionCoordLeader, FenceLies}
}

// TestChaosSliceFenceFirst is the slice with election.fence_first on
// (suspect_after 300ms, the shell fence marked proves), fair mode, on
// each backend: FenceFirstSliceKinds in order, then the checker. A
// proving fence or an ended term of a leader that was healthy and
// connected fails it (fenced_healthy_leader: any during
// partition-peers-only); a term ended under a live leader shows as the
// overlap rules and znode_deleted, as without the option. The run must
// see at least one term ended after a fence, or it judged nothing of the
// option.
func TestChaosSliceFenceFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos slice: real clusters, about 2 minutes each")
	}
	t.Setenv("CHAOS_FENCE_FIRST", "1")
	for _, backend := range []string{clustertest.BackendZooKeeper, clustertest.BackendEtcd} {
		t.Run(backend, func(t *testing.T) {
			start := time.Now()
			kinds := FenceFirstSliceKinds(backend)
			r := run(t, schedule{backend: backend, seed: SliceSeed, mode: "fair", kinds: kinds, fixed: true,
				replay: fmt.Sprintf("CHAOS_FENCE_FIRST=1 go test -run 'TestChaosSliceFenceFirst/%s' ./test/chaos/ (seed %d)", backend, SliceSeed)})
			report(t, r)
			t.Logf("fence-first slice on %s: %d faults, %d terms ended after a fence, %d proving fences, %d violations, %v",
				backend, len(r.r.Faults), r.r.TakeoversAfterFence, r.r.ProvingFences, len(r.r.Violations), time.Since(start).Round(time.Second))
			if r.r.TakeoversAfterFence == 0 {
				t.Error("no successor ended a term after a fence: the slice judged nothing of the option")
			}
		})
	}
}

// EtcdSliceKinds is TestChaosSliceEtcd's schedule.
var EtcdSliceKinds = append([]string{KillDaemon, PauseDaemon, ReloadConfig, BreadcrumbClear, SwitchedPlace}, EtcdNemeses...)

// TestChaosKinds runs chosen kinds once each, in order, for working on a
// nemesis: CHAOS_KINDS=hook-unkillable,zk-names (CHAOS_MODE=unfair for an
// unfair cluster, CHAOS_SEED, CHAOS_BACKEND=etcd for the etcd backend).
// Skipped without CHAOS_KINDS.
func TestChaosKinds(t *testing.T) {
	ks := os.Getenv("CHAOS_KINDS")
	if ks == "" {
		t.Skip("set CHAOS_KINDS=kind,kind...")
	}
	seed, _ := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64)
	mode := os.Getenv("CHAOS_MODE")
	if mode == "" {
		mode = "fair"
	}
	backend := os.Getenv("CHAOS_BACKEND")
	if backend == "" {
		backend = clustertest.BackendZooKeeper
	}
	r := run(t, schedule{backend: backend, seed: seed, mode: mode, kinds: strings.Split(ks, ","), fixed: true,
		replay: fmt.Sprintf("CHAOS_BACKEND=%s CHAOS_KINDS=%s CHAOS_MODE=%s CHAOS_SEED=%d go test -run TestChaosKinds -v ./test/chaos/", backend, ks, mode, seed)})
	report(t, r)
}

// chaosBackends reads CHAOS_BACKEND: zookeeper, etcd, or both (the
// default), in that order.
func chaosBackends(t *testing.T) []string {
	switch b := os.Getenv("CHAOS_BACKEND"); b {
	case "", "both":
		return []string{clustertest.BackendZooKeeper, clustertest.BackendEtcd}
	case clustertest.BackendZooKeeper, clustertest.BackendEtcd:
		return []string{b}
	default:
		t.Fatalf("CHAOS_BACKEND=%q: want zookeeper, etcd or both", b)
		return nil
	}
}

// TestChaosLong runs the long schedule of `make chaos` (CHAOS_DURATION, e.g.
// 30m, and CHAOS_SEED; a random seed is drawn and printed without one) on
// each backend CHAOS_BACKEND names (zookeeper, etcd, or both: the
// default), one after the other, each for the whole duration, as a
// subtest named by the backend. It is opt-in: skipped unless
// CHAOS_DURATION is set.
func TestChaosLong(t *testing.T) {
	ds := os.Getenv("CHAOS_DURATION")
	if ds == "" {
		t.Skip("set CHAOS_DURATION (make chaos DURATION=30m SEED=7)")
	}
	d, err := time.ParseDuration(ds)
	if err != nil || d <= 0 {
		t.Fatalf("CHAOS_DURATION=%q: want a positive duration like 30m", ds)
	}
	seed := uint64(time.Now().UnixNano() % 1000000)
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: want a number", s)
		}
	}
	for _, backend := range chaosBackends(t) {
		t.Run(backend, func(t *testing.T) { chaosLong(t, backend, d, ds, seed) })
	}
}

// chaosLong is TestChaosLong on one backend. Most of the time runs on the
// fair-mode cluster with every fair kind, the rest on an unfair-mode one
// (on ZooKeeper: lost replies around leave and join; on both: the faults
// that end terms there).
func chaosLong(t *testing.T, backend string, d time.Duration, ds string, seed uint64) {
	unfair := max(d/8, 2*time.Minute)
	if unfair > d/2 {
		unfair = d / 2
	}
	kinds, unfairKinds := AllKinds, UnfairKinds
	if backend == clustertest.BackendEtcd {
		kinds, unfairKinds = EtcdLongKinds, EtcdUnfairKinds
	}
	if fenceFirstOn("fair") {
		// CHAOS_FENCE_FIRST: the faults made for the option join the
		// fair part's blocks.
		kinds = append(append([]string(nil), kinds...), FenceFirstKinds...)
	}
	replay := fmt.Sprintf("CHAOS_BACKEND=%s make chaos DURATION=%s SEED=%d", backend, ds, seed)
	if fenceFirstOn("fair") {
		replay = "CHAOS_FENCE_FIRST=1 " + replay
	}
	r := run(t, schedule{backend: backend, seed: seed, d: d - unfair, mode: "fair", kinds: kinds, replay: replay})
	if fenceFirstOn("fair") && r.r.TakeoversAfterFence == 0 {
		t.Error("CHAOS_FENCE_FIRST: no successor ended a term after a fence: the run judged nothing of the option")
	}
	ru := run(t, schedule{backend: backend, seed: seed + 1, d: unfair, mode: "unfair", kinds: unfairKinds, replay: replay + " (unfair part)"})
	all := Combine(r.r, ru.r)
	t.Log("\n" + Summary(all, seed, replay+" (both parts)"))
	report(t, r)
	report(t, ru)
}

// schedule is one run of the nemesis.
type schedule struct {
	backend string // "": ZooKeeper
	seed    uint64
	d       time.Duration // 0: one block
	mode    string
	kinds   []string
	fixed   bool // kinds in the order given, not shuffled
	zero    bool // one node has priority 0 whatever the seed draws
	replay  string
}

// ran is what run hands to report.
type ran struct {
	h      History
	r      Report
	replay string
}

// run starts an environment, runs the schedule (blocks of its kinds in a
// seeded order, until d has passed; d == 0: one block), checks the history
// and saves the artifacts (always for a long run, and for any failure).
func run(t *testing.T, s schedule) ran {
	seed, d, replay := s.seed, s.d, s.replay
	pol := DrawPolicy(seed, s.zero)
	backend := s.backend
	if backend == "" {
		backend = clustertest.BackendZooKeeper
	}
	t.Logf("chaos: %s, seed %d, %s mode, priorities %s, replay with: %s", backend, seed, s.mode, pol, replay)
	e := NewEnvBackend(t, backend, seed, s.mode, pol)
	m := NewNemesis(e, seed)
	m.kinds = s.kinds
	if !e.WaitRecovered(LivenessBound) {
		t.Fatal("no leader writing at the start")
	}
	e.Sample()
	start := time.Now()
	injected := map[string]int{}
	// The first block always runs to its end, so even a short run
	// injects every kind once.
	for done, first := false, true; !done; first = false {
		block := m.Block()
		if s.fixed {
			block = s.kinds
		}
		for _, k := range block {
			if d > 0 && time.Since(start) >= d && !first {
				done = true
				break
			}
			m.Step(k)
			injected[k]++
			if n := m.id; d > 0 && n%25 == 0 {
				t.Logf("chaos: %d faults injected, %v elapsed", n, time.Since(start).Round(time.Second))
			}
		}
		if d == 0 {
			done = true
		}
	}
	e.WaitRecovered(LivenessBound)
	time.Sleep(time.Second)
	e.Sample()
	e.ScanCrashes()
	e.StopMonitor()

	h, err := e.History()
	if err != nil {
		t.Fatal(err)
	}
	r := Check(h, DefaultCheckConfig(LivenessBound))
	sum := Summary(r, seed, replay)
	t.Log("\n" + sum)

	if r.Follows == 0 {
		t.Error("the follow hook never ran: the follow rule judged nothing")
	}
	if r.PrePromotes == 0 {
		t.Error("the pre_promote hook never ran: the veto rule judged nothing")
	}
	if len(r.PriorityZero) > 0 && r.ElectionsWithoutZero == 0 {
		t.Error("nobody was elected while a priority-0 node stood out: the priority-0 rule judged nothing")
	}
	if r.MaxLag > 0 && r.LeaderPositions == 0 {
		t.Error("no leader position was ever published: the lag rule judged nothing")
	}
	for _, msg := range Unexercised(s.kinds, r) {
		t.Error(msg)
	}
	for _, k := range s.kinds {
		if injected[k] == 0 {
			t.Errorf("fault kind %s was never injected", k)
		}
	}
	dir := os.Getenv("CHAOS_ARTIFACTS")
	if dir == "" && (d > 0 || len(r.Violations) > 0 || t.Failed()) {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("failoverd-chaos-%s-seed%d-%s", backend, seed, time.Now().Format("20060102-150405")))
	} else if dir != "" {
		dir = filepath.Join(dir, backend, s.mode)
	}
	if dir != "" {
		if err := e.SaveArtifacts(dir, h); err != nil {
			t.Logf("saving artifacts: %v", err)
		} else {
			os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(sum), 0o644)
			t.Logf("history, logs and summary saved in %s", dir)
		}
	}
	return ran{h: h, r: r, replay: replay}
}

// report fails the test for every violation, with the history around the
// first ones.
func report(t *testing.T, x ran) {
	for i, v := range x.r.Violations {
		if i < 10 {
			t.Errorf("VIOLATION %v\nhistory around it:\n%s", v, x.h.Excerpt(v.At, 3*time.Second))
		} else {
			t.Errorf("VIOLATION %v", v)
		}
	}
}
