package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// Fencing first (election.fence_first, CHAOS_FENCE_FIRST; docs/safety.md,
// "Fencing first, then taking over"): the candidate next in line suspects
// a leader whose heartbeat stood still, fences it with a method that
// proves, and only then ends its term. The faults below are the ones that
// stop a leader's heartbeat (a crash of the daemon and of its service, a
// short pause, a cut from the coordination service) and the one that must
// never lead to a fence: a leader that is healthy and connected, whose
// peers only cannot reach its admin API.
const (
	// SIGKILL of the leader's failoverd, of the hooks it ran and of its
	// service, as a host crash; both restarted (the service as a
	// standby) at the heal, 0.3-3s later.
	CrashHost = "crash-host"
	// SIGSTOP of the leader's failoverd for 0.2-3s (shorter than
	// pause-daemon's, around the suspicion time): a successor may prove it
	// out while it sleeps; it must not act after its deadline on waking.
	PauseDaemonShort = "pause-daemon-short"
	// The leader cut off from the coordination service only (ZooKeeper
	// proxies or etcd client proxies), 0.5s..S+3s; its peers still reach
	// its admin API, which then says it does not reach the service. It
	// must demote (by its lease, or by an rpc fence) before anyone
	// promotes.
	PartitionCoordLeader = "partition-coord-leader"
	// The leader's admin API cut off from its peers only (its peer proxy
	// blackholed), 3-6s: its probes and rpc fences time out, but it is
	// healthy and renews its heartbeat. No successor may fence it or end
	// its term (fenced_healthy_leader).
	PartitionPeersOnly = "partition-peers-only"
	// A lying fence: fence.sh is replaced by a script that exits 0 and
	// stands nothing down (marked proves, as the suite's shell fence is),
	// and the leader is cut off from the coordination service and from its
	// peers (the rpc fence times out, the lie is what proves it out).
	// Fencing first then lets the old service act until its own deadline:
	// the checker measures that (fence_lie_bound) instead of failing the
	// overlap it causes.
	FenceLies = "fence-lies"
)

func init() {
	stoppedDaemonKinds[PauseDaemonShort] = true
	// The lie is measured on the first successor that proves the old
	// leader out: no veto or lag of the policy in the way.
	noVetoKinds[FenceLies] = true
}

// FenceFirstKinds are the kinds above, for the summary's rows.
var FenceFirstKinds = []string{CrashHost, PauseDaemonShort, PartitionCoordLeader, PartitionPeersOnly, FenceLies}

// fenceFirstStep injects one fault of a fencing-first kind (see Step);
// false for a kind that is not one.
func (m *Nemesis) fenceFirstStep(kind string, id int, leader *clustertest.Node,
	holdIn func(lo, hi time.Duration) time.Duration, inject func(string, ...any), heal func(string)) bool {
	e := m.e
	if !contains(FenceFirstKinds, kind) {
		return false
	}
	// Each of these is about the leader: after a handover right after
	// the last recovery (a preemption), wait until one leads again.
	if st, ok := leader.Status(); !ok || st.State != controller.StateLeader {
		e.WaitRecovered(LivenessBound)
		if l := e.Leader(); l != nil {
			leader = l
		}
	}
	switch kind {
	case CrashHost:
		inject(leader.ID)
		e.expectKill(leader)
		leader.Crash()
		time.Sleep(holdIn(300*time.Millisecond, 3*time.Second))
		leader.ReviveToy()
		leader.Start()
		heal(leader.ID)

	case PauseDaemonShort:
		inject(leader.ID)
		leader.Signal(syscall.SIGSTOP)
		time.Sleep(holdIn(200*time.Millisecond, 3*time.Second))
		leader.Signal(syscall.SIGCONT)
		heal(leader.ID)

	case PartitionCoordLeader:
		inject(leader.ID)
		e.cutOff(leader, true)
		time.Sleep(holdIn(500*time.Millisecond, e.Session+3*time.Second))
		e.cutOff(leader, false)
		heal(leader.ID)

	case PartitionPeersOnly:
		inject(leader.ID)
		leader.PeerProxy.Blackhole(true)
		// Several ZooKeeper renewals, and at least one etcd renewal
		// (TTL/3, 2.67s) beyond the suspicion time.
		time.Sleep(holdIn(3*time.Second, 6*time.Second))
		leader.PeerProxy.Blackhole(false)
		heal(leader.ID)

	case FenceRefusedThenCrash:
		m.fenceRefusedThenCrash(id, leader, holdIn, inject, heal)

	case FailoverAfterFailover:
		m.failoverAfterFailover(id, leader, holdIn, inject, heal)

	case FenceLies:
		fence := filepath.Join(e.C.Dir, "fence.sh")
		orig, err := os.ReadFile(fence)
		must(e.t, err)
		inject(leader.ID)
		must(e.t, os.WriteFile(fence, []byte(lyingFence(e.C.EventsPath)), 0o755))
		e.cutOff(leader, true)
		leader.PeerProxy.Blackhole(true)
		time.Sleep(holdIn(e.Session+time.Second, e.Session+3*time.Second))
		leader.PeerProxy.Blackhole(false)
		e.cutOff(leader, false)
		must(e.t, os.WriteFile(fence, orig, 0o755))
		heal(leader.ID)

	default:
		return false
	}
	return true
}

// lyingFence is a fence.sh that reports success and stands nothing down.
func lyingFence(events string) string {
	return `#!/usr/bin/env bash
printf '%s %s\n' "$(date +%s%N)" "fence_lie node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID target_epoch=$FAILOVERD_TARGET_EPOCH" >> "` + events + `"
exit 0
`
}

// Daemon event kinds of fencing first (ParseDaemonLog).
const (
	// target= target_epoch= stood_seconds= probe=: the candidate next in
	// line suspected the leader and its probe failed (probe says why).
	KindSuspectUnanswered = "suspect_unanswered"
	// target= target_epoch= method= duration_seconds=: ProveOut's proving
	// fence succeeded.
	KindProvingFence = "fenced_first"
	// leader_node= version= stood_seconds=: the successor ended the old
	// leader's term at the heartbeat version it timed (ZooKeeper: the
	// znode's name; etcd: the node id).
	KindTakeoverAfterFence = "took_over_after_fence"
	// target= target_epoch=: the winner found the breadcrumb naming the
	// term it had proved out and did not fence it again.
	KindProvedOutSkip = "proved_out_not_fenced"
	// The lying fence's line (events log).
	KindFenceLie = "fence_lie"
)

// Violation kinds of fencing first.
const (
	// A proving fence of fencing first, or a term ended after one, whose
	// target was a leader healthy and connected to the coordination
	// service while its heartbeat was timed: during partition-peers-only,
	// or with no fault under way that stopped it, cut it off or struck
	// the coordination service.
	VFencedHealthy = "fenced_healthy_leader"
	// Under a lying fence, the old leader's service stood down later than
	// its own deadline allows (lease plus demote budget after its last
	// heartbeat, bounded by session_timeout - T/20 from the cut).
	VFenceLieBound = "fence_lie_bound"
)

// FenceFirstSlack: how long after a fault's heal it still explains a
// standing heartbeat (a restarted daemon's or a reconnected session's
// first renewals, a coordination server catching up).
const FenceFirstSlack = 5 * time.Second

// PeersOnlySlack: how long after a partition-peers-only heal a fence of
// its target is still laid to it (a probe or fence sent before the heal).
const PeersOnlySlack = time.Second

// fenceFault is one fault as the fencing-first rules see it.
type fenceFault struct {
	kind     string
	id       string
	targets  map[string]bool
	global   bool // it struck the coordination service (or every node)
	from, to time.Time
}

// coordKinds strike the coordination service itself (or all nodes).
func coordKind(kind string) bool {
	return strings.HasPrefix(kind, "zk-") || strings.HasPrefix(kind, "etcd-") || strings.HasPrefix(kind, "slow-hooks-") ||
		kind == PauseCluster || kind == LostReplyLagging
}

// fenceFaults collects every fault's span and the nodes it struck.
func fenceFaults(h History, nodes map[string]bool) []*fenceFault {
	byID := map[string]*fenceFault{}
	var out []*fenceFault
	for _, e := range h {
		if e.Kind != KindFault {
			continue
		}
		f := byID[e.Get("id")]
		if f == nil {
			f = &fenceFault{kind: e.Get("kind"), id: e.Get("id"), targets: map[string]bool{}}
			byID[e.Get("id")] = f
			out = append(out, f)
		}
		if t := e.Get("target"); nodes[t] {
			f.targets[t] = true
		} else if e.Get("phase") == "inject" {
			f.global = true // zk1, m0, all, standbys
		}
		if coordKind(f.kind) {
			f.global = true
		}
		switch e.Get("phase") {
		case "inject":
			f.from = e.At
		case "heal":
			f.to = e.At
		}
	}
	for _, f := range out {
		if f.to.IsZero() && len(h) > 0 {
			f.to = h[len(h)-1].At
		}
	}
	return out
}

// overlaps reports whether f's span, stretched by slack after its heal,
// meets [from, to].
func (f *fenceFault) overlaps(from, to time.Time, slack time.Duration) bool {
	return !f.from.After(to) && !f.to.Add(slack).Before(from)
}

// checkFenceFirst applies fenced_healthy_leader to every proving fence and
// every term ended after one, counts them, and returns the terms a
// proving fence proved out (node and epoch -> when), which end by the
// deletion of their entry without failing znode_deleted.
func checkFenceFirst(h History, r *Report, add func(string, time.Time, string, ...any)) map[nodeEpoch]time.Time {
	nodes := map[string]bool{}
	znodeOf := map[string]string{} // election znode -> node
	for _, e := range h {
		switch e.Kind {
		case KindDaemonStart, KindNodeConfig:
			nodes[e.Get("node")] = true
		case KindElected:
			nodes[e.Get("node")] = true
			if z := e.Get("znode"); z != "" {
				znodeOf[z] = e.Get("node")
			}
		}
	}
	faults := fenceFaults(h, nodes)
	proved := map[nodeEpoch]time.Time{}
	lastSuspect := map[string]Event{} // successor -> its last unanswered suspicion
	lastFence := map[string]Event{}   // successor -> its last proving fence
	judge := func(e Event, target string, from time.Time, what string) {
		r.judge(VFencedHealthy, 1)
		var excuse *fenceFault
		for _, f := range faults {
			if f.kind == PartitionPeersOnly {
				// Faults run one at a time: a fence from its injection to
				// just after its heal had nothing else to go by.
				if f.targets[target] && !e.At.Before(f.from) && !e.At.After(f.to.Add(PeersOnlySlack)) {
					add(VFencedHealthy, e.At, "%s %s %s during %s (fault %s, from %s): the leader was healthy and connected, only its peers could not reach it",
						e.Get("node"), what, target, f.kind, f.id, f.from.Format("15:04:05.000"))
					return
				}
				continue
			}
			if !f.overlaps(from, e.At, FenceFirstSlack) {
				continue
			}
			switch {
			case f.targets[target] && (excuse == nil || !excuse.targets[target]):
				excuse = f // a fault that struck the target explains it best
			case f.global && excuse == nil:
				excuse = f
			}
		}
		if excuse == nil {
			add(VFencedHealthy, e.At, "%s %s %s, whose heartbeat it timed from %s, while no fault had stopped %s, cut it off or struck the coordination service",
				e.Get("node"), what, target, from.Format("15:04:05.000"), target)
			return
		}
		if excuse.global && !excuse.targets[target] {
			r.FenceFirstInCoordFaults++
			if s, ok := lastSuspect[e.Get("node")]; ok && strings.Contains(s.Get("probe"), "does_not_reach_the_coordination_service") {
				r.FenceFirstInCoordFaultsUnreached++
			}
		}
	}
	for _, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case KindSuspectUnanswered:
			r.SuspectsUnanswered++
			lastSuspect[node] = e
		case KindProvingFence:
			r.ProvingFences++
			lastFence[node] = e
			proved[nodeEpoch{e.Get("target"), e.Int("target_epoch")}] = e.At
			from := e.At
			if s, ok := lastSuspect[node]; ok && s.Get("target") == e.Get("target") && e.At.Sub(s.At) < time.Minute {
				from = s.At.Add(-seconds(s.Get("stood_seconds")))
			}
			judge(e, e.Get("target"), from, "fenced (proving, fencing first)")
		case KindTakeoverAfterFence:
			r.TakeoversAfterFence++
			target := e.Get("leader_node")
			if f, ok := lastFence[node]; ok && e.At.Sub(f.At) < time.Minute {
				target = f.Get("target")
			} else if n, ok := znodeOf[target]; ok {
				target = n
			} else if n, ok := znodeOf[filepath.Base(target)]; ok {
				target = n
			}
			from := e.At.Add(-seconds(e.Get("stood_seconds")))
			if s, ok := lastSuspect[node]; ok && s.Get("target") == target && e.At.Sub(s.At) < time.Minute {
				from = s.At.Add(-seconds(s.Get("stood_seconds")))
			}
			judge(e, target, from, "ended the term of")
		case KindProvedOutSkip:
			r.ProvedOutSkips++
		}
	}
	return proved
}

// seconds parses a float number of seconds (0 if it is not one).
func seconds(s string) time.Duration {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// The lying fence's verdict: each fence-lies fault, what the lie let
// through, and whether the old leader's own deadline bounded it.
type LieResult struct {
	ID     string
	Target string
	// Cut: the injection (the old leader's last heartbeat is no later).
	Cut time.Time
	// Lies: fence_lie lines during the fault; Promoted: a successor's
	// promote after the first of them (zero: none).
	Lies     int
	Promoted time.Time
	// StoodDown: the old service's stand-down (toy.log); Bound: the
	// latest it may come, the cut plus the old term's session_timeout -
	// T/20 (its lease plus demote budget) plus LateStandDownSlack.
	StoodDown, Bound time.Time
	// Overlap: the time both services were primary; Rejected: the old
	// epoch's writes the store refused in the fault's window.
	Overlap  time.Duration
	Rejected int
}

// checkFenceLies judges every fence-lies fault (fence_lie_bound) and
// drops the overlap, service_overlap, stale_leader and znode_deleted
// violations between its target and the successor inside its window: the
// lie caused them by construction; the bound is what is judged.
func checkFenceLies(h History, r *Report, add func(string, time.Time, string, ...any)) {
	type window struct {
		res        *LieResult
		epoch      int64 // the old leader's epoch at the cut
		oldT       time.Duration
		from, till time.Time
	}
	var ws []*window
	byID := map[string]*window{}
	termOf := map[string]nodeEpoch{} // node -> its newest elected term
	sessionOf := map[nodeEpoch]time.Duration{}
	for _, e := range h {
		switch {
		case e.Kind == KindElected:
			k := nodeEpoch{e.Get("node"), e.Int("epoch")}
			termOf[e.Get("node")] = k
			if T, err := time.ParseDuration(e.Get("session_timeout")); err == nil {
				sessionOf[k] = T
			}
		case e.Kind == KindFault && e.Get("kind") == FenceLies && e.Get("phase") == "inject":
			k := termOf[e.Get("target")]
			w := &window{res: &LieResult{ID: e.Get("id"), Target: e.Get("target"), Cut: e.At}, epoch: k.epoch, oldT: sessionOf[k], from: e.At}
			ws = append(ws, w)
			byID[e.Get("id")] = w
		case e.Kind == KindFault && e.Get("kind") == FenceLies && e.Get("phase") == "heal":
			if w := byID[e.Get("id")]; w != nil {
				w.till = e.At
			}
		}
	}
	if len(ws) == 0 {
		return
	}
	for _, w := range ws {
		res := w.res
		if w.till.IsZero() && len(h) > 0 {
			w.till = h[len(h)-1].At
		}
		r.judge(VFenceLieBound, 1)
		T := w.oldT
		if T == 0 {
			T = SessionTimeout
		}
		res.Bound = res.Cut.Add(T - T/20 + LateStandDownSlack)
		for _, e := range h {
			if e.At.Before(w.from) {
				continue
			}
			if e.At.After(w.till.Add(FenceFirstSlack)) {
				break
			}
			switch {
			case e.Kind == KindFenceLie && e.Get("target") == res.Target:
				res.Lies++
			case e.Kind == KindToyPromote && e.Get("node") != res.Target && res.Lies > 0 && res.Promoted.IsZero():
				res.Promoted = e.At
			case e.Kind == KindToyDemote && e.Get("node") == res.Target && e.Get("was") == "primary" && res.StoodDown.IsZero():
				res.StoodDown = e.At
			case e.Kind == KindWrite && e.Get("accepted") == "false" && e.Get("node") == res.Target:
				res.Rejected++
			}
		}
		if !res.Promoted.IsZero() && res.StoodDown.After(res.Promoted) {
			res.Overlap = res.StoodDown.Sub(res.Promoted)
		}
		switch {
		case res.StoodDown.IsZero():
			add(VFenceLieBound, w.till, "fence-lies %s: %s's service never stood down by itself within %v of the heal (its own deadline was %s)",
				res.ID, res.Target, FenceFirstSlack, res.Bound.Format("15:04:05.000"))
		case res.StoodDown.After(res.Bound):
			add(VFenceLieBound, res.StoodDown, "fence-lies %s: %s's service stood down %v after the cut, past its own deadline (session_timeout %v - T/20 + %v slack)",
				res.ID, res.Target, res.StoodDown.Sub(res.Cut).Round(time.Millisecond), T, LateStandDownSlack)
		}
		r.FenceLies = append(r.FenceLies, *res)
	}
	// The overlaps the lies caused, within each window up to the old
	// service's own deadline: measured above, not failed twice.
	kept := r.Violations[:0]
	for _, v := range r.Violations {
		drop := false
		for _, w := range ws {
			if v.At.Before(w.from) || v.At.After(w.res.Bound.Add(FenceFirstSlack)) || !strings.Contains(v.Msg, w.res.Target) {
				continue
			}
			switch v.Kind {
			case VOverlap, VServiceOverlap, VStaleLeader, VZnodeDeleted, VLateStandDown:
				drop = true
				r.LieViolationsMeasured++
			}
		}
		if !drop {
			kept = append(kept, v)
		}
	}
	r.Violations = kept
}

// fenceFirstSummary renders the fencing-first counters ("" when none).
func fenceFirstSummary(r Report) string {
	if r.SuspectsUnanswered+r.ProvingFences+r.TakeoversAfterFence+r.ProvedOutSkips+len(r.FenceLies)+r.RemovalsRefused+r.OperatorFailovers == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fencing first (election.fence_first): %d suspected leaders did not answer their probe, %d proving fences, %d terms ended after a fence, %d winners did not fence the term they proved out again; %d ends of a proved-out term's entry (not failed)\n",
		r.SuspectsUnanswered, r.ProvingFences, r.TakeoversAfterFence, r.ProvedOutSkips, r.FencedFirstEnds)
	fmt.Fprintf(&b, "  of those, during a fault of the coordination service only: %d (%d after the leader answered that it did not reach the service)\n",
		r.FenceFirstInCoordFaults, r.FenceFirstInCoordFaultsUnreached)
	for _, l := range r.FenceLies {
		promoted, stood := "no successor promoted", "never"
		if !l.Promoted.IsZero() {
			promoted = "successor promoted " + ms(l.Promoted.Sub(l.Cut)) + " after the cut"
		}
		if !l.StoodDown.IsZero() {
			stood = ms(l.StoodDown.Sub(l.Cut)) + " after the cut"
		}
		fmt.Fprintf(&b, "  lying fence %s on %s: %d lies, %s; old service stood down %s (bound %s: lease + demote budget after its last heartbeat); both primary %s; %d writes of the old service rejected by epoch\n",
			l.ID, l.Target, l.Lies, promoted, stood, ms(l.Bound.Sub(l.Cut)), ms(l.Overlap), l.Rejected)
	}
	fmt.Fprintf(&b, "  removals of a proved-out term refused (its heartbeat moved): %d; held fences returned: %d; crashes after one judged: %d\n",
		r.RemovalsRefused, r.HeldFences, r.FenceRefusedCrashes)
	fmt.Fprintf(&b, "  failover cooldowns started: %d; operator's failovers right after an automatic one: %d\n", r.Cooldowns, r.OperatorFailovers)
	if r.LieViolationsMeasured > 0 {
		fmt.Fprintf(&b, "  overlap violations the lies caused, measured against the bound instead of failed: %d\n", r.LieViolationsMeasured)
	}
	return b.String()
}
