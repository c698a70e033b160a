package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The checker: a pure function of a merged history.
//
// Who is promoted, according to the history: a node is promoted from its
// "promote" hook event (logged before the hook asks the service, so the
// interval starts no later than the service did) until the first of
//   - its "demote" event (logged after the service answered the demote),
//   - its "promote_failed" event (the hook gave up before asking),
//   - a "fence" event naming it with target_epoch >= the epoch it was
//     promoted at (logged after the fencer stood the service down, or found
//     its process gone; a fence for an older epoch leaves a newer leadership
//     alone, as the service does).
//
// A "promote" event followed by "promote_refused" for the same node and
// epoch never made anyone primary: the service answered 409 (a stale or
// already stood-down epoch) and changed nothing. Such promotions are counted
// and otherwise ignored.
//
// The intervals are therefore supersets of the time each service really was
// primary, so an overlap found here may be a false alarm only in the
// conservative direction; a clean result is a real proof for this run.

// Violation kinds.
const (
	VOverlap        = "overlap"          // two nodes promoted at once
	VStaleWrite     = "stale_write"      // store accepted an epoch below one it had accepted
	VWrongWriter    = "wrong_writer"     // accepted write at epoch E by a node that was not promoted at E
	VUnpromoted     = "unpromoted_write" // accepted write at an epoch nobody was promoted at (yet)
	VEpochOrder     = "epoch_order"      // a promotion's epoch not above every earlier one
	VLiveness       = "lost_liveness"    // no promoted, writing leader within the bound after a heal
	VExit           = "unexpected_exit"  // a failoverd exited without the nemesis killing it
	VCrash          = "crash"            // a data race or panic in a failoverd log
	VGoroutines     = "goroutine_growth" // goroutines grew across cycles
	VFDs            = "fd_growth"        // file descriptors grew across cycles
	VUnhealedFaults = "unhealed_fault"   // a fault injected but never healed
	// A node still believed it was leader (elected, not yet stood down)
	// after a successor was elected, even if fencing prevented harm.
	VStaleLeader = "stale_leader"
	// A node promoted in a term in which fencing the previous leader had
	// failed, with no later successful fence of it.
	VPromoteAfterFailedFence = "promote_after_failed_fence"
	// A fault that must be survived while it lasts (a hook that cannot be
	// killed) saw no other node take over before it was healed.
	VNoTakeover = "no_takeover"
	// After a fault aimed at its ZooKeeper connection (names, handshake),
	// a node could not be made leader again: it is locked out.
	VLockedOut = "node_locked_out"
	// A leadership ended because its election znode was deleted while its
	// session lived. Nobody deletes another node's znode in these runs (no
	// operator; Term.Finish deletes a term's own znode after it ended), so
	// another session deleted it acting on a stale view: a leaver that read
	// "its" unfair lock on a lagging server and took its successor's.
	VZnodeDeleted = "znode_deleted"
)

// AllViolationKinds lists every kind, for the summary.
var AllViolationKinds = []string{VOverlap, VServiceOverlap, VStaleWrite, VWrongWriter, VUnpromoted, VEpochOrder, VStaleLeader, VLateStandDown, VPromoteAfterFailedFence,
	VFencedByWrongAnswer, VClearAccepted, VSwitchedLed, VPinnedTermExtended, VZnodeDeleted, VFollowBadLeader, VFollowInTerm, VPromotedPriorityZero, VPromotedAfterVeto, VPromotedAfterDecline, VPromotedLagging,
	VPausedAction, VFencedHealthy, VFenceLieBound, VLiveness, VLeaseLostQuiet, VNoTakeover, VLockedOut, VExit, VCrash, VGoroutines, VFDs, VUnhealedFaults}

// Violation is one failed property.
type Violation struct {
	Kind string
	At   time.Time
	Msg  string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s at %s: %s", v.Kind, v.At.Format("15:04:05.000000"), v.Msg)
}

// CheckConfig bounds what the checker accepts.
type CheckConfig struct {
	// LivenessBound: after a fault heals, a promoted leader must have a
	// write accepted by the store under its epoch within this long.
	LivenessBound time.Duration
	// Growth: a daemon process with at least MinSamples samples fails when
	// the minimum of its last third exceeds the median of its first third
	// by more than GoroutineFactor×base + GoroutineSlack goroutines, or by
	// more than FDSlack file descriptors.
	MinSamples      int
	GoroutineFactor float64
	GoroutineSlack  int64
	FDSlack         int64
	// StaleLeaderSlack: how long after a successor's "elected" an old
	// leader's stand-down may still be logged (see StaleLeaderSlack).
	StaleLeaderSlack time.Duration
}

// StaleLeaderSlack bounds the error of comparing two daemons' log times.
// Both log with the same host clock (CLOCK_REALTIME, nanoseconds), so the
// only error is the delay between a decision and its log line: goroutine
// scheduling of a -race binary on a loaded 2-core machine, tens of
// milliseconds, rarely a few hundred. A correct daemon stands down at the
// end of its lease, at least the demote budget plus session/20 (1.2s in
// the suite) before ZooKeeper can even expire its session, so the margin it keeps is
// larger still; the broken builds the rule is for overrun by seconds (a
// lease that never ends lasts until the session expiry is noticed; a lease
// renewed by a cut-off follower lasts syncLimit×tickTime).
const StaleLeaderSlack = 500 * time.Millisecond

// stoppedDaemonKinds are the fault kinds that SIGSTOP their target's
// failoverd from injection to heal.
var stoppedDaemonKinds = map[string]bool{PauseDaemon: true}

// TakeoverKinds are fault kinds the cluster must survive while they last:
// another node must be promoted between injection and heal.
var TakeoverKinds = map[string]bool{}

// DefaultCheckConfig is what the suite uses; see LivenessBound in chaos_test.go.
func DefaultCheckConfig(bound time.Duration) CheckConfig {
	return CheckConfig{LivenessBound: bound, MinSamples: 9, GoroutineFactor: 0.5, GoroutineSlack: 25, FDSlack: 12,
		StaleLeaderSlack: StaleLeaderSlack}
}

// FaultResult is what happened around one fault.
type FaultResult struct {
	ID                int
	Kind, Target      string
	Injected, Healed  time.Time
	Recovered         time.Time     // see Check: first accepted write after the heal by the lasting leadership
	Recovery          time.Duration // Recovered - Healed; -1 if never
	WriteGap          time.Duration // longest stretch without accepted writes, from injection to recovery
	windowEnd         time.Time     // the next fault's injection, or the end of the history
	RecoveredByEpoch  int64
	ChangedLeadership bool // the recovering epoch is newer than the last accepted before injection
}

// Report is the checker's verdict.
type Report struct {
	Violations        []Violation
	Faults            []FaultResult
	Promotions        int
	RefusedPromotions int // promote events the service refused (409): nobody became primary
	Accepted          int
	RejectedStale     int // writes the store refused for a stale epoch: fencing tokens at work
	LateAccepted      int // accepted after the writer's leadership ended in the history, epoch still newest (in flight)
	Fences            int
	FenceFailures     int
	DaemonExits       int
	KnownRaces        []string // node: name of a known dependency race (reported, not a violation)
	Samples           int
	Follows           int // follow hook runs (their "follow" lines)
	Start, End        time.Time
	// Handoffs: successor elections after which the checker judged the
	// previous leader's stand-down; MinHandoffMargin is the smallest time
	// from a stand-down by lease expiry to its successor's election
	// (negative: after it), leaving out leaders that were paused (SIGSTOP)
	// when it happened.
	Handoffs         int
	MinHandoffMargin time.Duration
	LeaseHandoffs    int // handoffs after a lease expiry (MinHandoffMargin's sample)
	// ExpiredZnodeEnds: leaderships that ended for "znode deleted" which
	// the node's own session expiry during a pause explains (not failed).
	ExpiredZnodeEnds int
	// TakeoversAtDeadline: terms a successor ended at the old leader's
	// own deadline (election.take_over_at_deadline). One that ended a
	// live leader's term shows as that leader's VZnodeDeleted.
	TakeoversAtDeadline int
	// Fencing first (fencefirst.go): suspicions whose probe failed,
	// proving fences, terms a successor ended after one
	// (election.fence_first), winners that did not fence again the term
	// they proved out, and leaderships that ended for the deletion of
	// their entry after a proving fence of that very term (not failed).
	// FenceFirstInCoordFaults: proving fences and ends during a fault of
	// the coordination service only (the leader itself not struck); of
	// those, the ones whose leader had answered it did not reach it.
	SuspectsUnanswered               int
	ProvingFences                    int
	TakeoversAfterFence              int
	ProvedOutSkips                   int
	FencedFirstEnds                  int
	FenceFirstInCoordFaults          int
	FenceFirstInCoordFaultsUnreached int
	// FenceLies: the lying fence's verdicts; LieViolationsMeasured: the
	// overlaps they caused, judged by fence_lie_bound instead.
	FenceLies             []LieResult
	LieViolationsMeasured int
	// RemovalsRefused: guarded removals of a suspected term refused for
	// a heartbeat that moved; HeldFences: fences of
	// fence-refused-then-crash that returned; FenceRefusedCrashes: its
	// crashes judged (fencerefused.go).
	RemovalsRefused     int
	HeldFences          int
	FenceRefusedCrashes int
	// OperatorFailovers: failover-after-failover's failovers --to;
	// Cooldowns: failover cooldowns the leaders started.
	OperatorFailovers int
	Cooldowns         int
	// OwnEntriesRemoved: previous processes' election entries a restarted
	// daemon removed (election.end_own_term_on_restart).
	OwnEntriesRemoved int
	// OwnFinishEnds: leaderships that ended for "znode deleted" by the
	// node's own Term.Finish, whose reply was lost (not failed).
	OwnFinishEnds int
	// RevokedEnds: leaderships that ended for a deleted election entry
	// while an operator revoked that node's lease (etcd-lease-revoke).
	RevokedEnds int
	// EtcdResumeRevokes: leaderships whose etcd lease etcd itself revoked
	// while its holder kept renewing it, right after a stopped etcd
	// leader was continued (see etcdRevokedTerms): not failed, counted.
	EtcdResumeRevokes int
	// RevokedHandoffs: successors elected after the previous leader's
	// lease was revoked under it (by an operator, or by etcd on resume),
	// whose stand-down the lease argument does not bound (see
	// checkStaleLeaders).
	RevokedHandoffs int
	// The promotion policy (policy.go): every node's priority as the
	// harness logged it ("node=priority"), the priority-0 nodes, elections
	// won by others while a priority-0 node stood out, pre_promote runs,
	// their vetoes, and faults during which one node's pre_promote vetoed.
	Priorities           []string
	PriorityZero         []string
	ElectionsWithoutZero int
	PrePromotes          int
	Vetoes               int
	VetoFaults           int
	// Handovers a node asked for (failover requests as the poller read
	// them), by reason (preferred_priority, preferred_position), and how
	// many of them their target completed.
	Handovers     map[string]int
	HandoversDone int
	// The daemons' own decisions (their logs): won terms handed over to a
	// better candidate, won terms declined (lagging, positions unreadable),
	// and leaders that handed over to a higher priority (preemption).
	HandoversAtWin int
	Declines       int
	Preemptions    int
	// Positions (positions.go): election.max_lag (0: not in play), the
	// lagging nodes frozen, leader positions the poller saw published, and
	// elections won by a node that lagged while a caught-up candidate
	// published (each had to decline: checkLagging's sample).
	MaxLag          int64
	Freezes         int
	LeaderPositions int
	LaggingWins     int
	LaggingDeclined int // of LaggingWins, those the daemon logged it declined
	// Judged counts, per rule (violation kind), what the rule judged: a
	// rule that judged nothing passed vacuously (see Judgements).
	Judged map[string]int
	// The worst case of the demote budget (service.go): stand-downs of a
	// service after its term ended, measured at the service, how many had
	// a killed promote in front, and the smallest margin left before the
	// window the daemon's arithmetic keeps free of successors closed.
	StandDowns          int
	StandDownsAfterKill int
	MinStandDownMargin  time.Duration
	// Promotions at the service with another service stood down before,
	// and the smallest time between such a stand-down and the promotion.
	ServiceHandoffs     int
	MinServiceHandoff   time.Duration
	PauseWindows        int // paused windows judged (operator.go)
	WrongFenceAnswers   int // wrong answers a stub gave to an rpc fence
	WrongAnswerFellBack int // of those, fences that went on to the next method
}

// judge counts n judgements of rule.
func (r *Report) judge(rule string, n int) {
	if r.Judged == nil {
		r.Judged = map[string]int{}
	}
	r.Judged[rule] += n
}

// Count returns the number of violations of kind.
func (r Report) Count(kind string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == kind {
			n++
		}
	}
	return n
}

type sampleKey struct{ node, pid string }

// Check runs every property over h.
func Check(h History, cfg CheckConfig) Report {
	var r Report
	r.Judged = map[string]int{}
	if len(h) > 0 {
		r.Start, r.End = h[0].At, h[len(h)-1].At
	}
	add := func(kind string, at time.Time, f string, a ...any) {
		r.Violations = append(r.Violations, Violation{Kind: kind, At: at, Msg: fmt.Sprintf(f, a...)})
	}

	// Pre-pass: which promote events did the service refuse?
	refused := map[int]bool{}
	lastPromote := map[string]int{} // node|epoch -> index
	for i, e := range h {
		key := e.Get("node") + "|" + e.Get("epoch")
		switch e.Kind {
		case "promote":
			lastPromote[key] = i
		case "promote_refused":
			if j, ok := lastPromote[key]; ok {
				refused[j] = true
			}
		}
	}

	active := map[string]int64{}     // node -> epoch it is promoted at
	promotedAt := map[int64]string{} // epoch -> node promoted with it
	var maxPromoted int64
	var maxElected int64 // newest epoch a daemon was elected at
	var maxAccepted int64
	var acceptedTimes []time.Time
	var acceptedEpochs []int64

	faults := map[int]*FaultResult{}
	var order []int
	// Leadership intervals, for recovery: who was promoted when.
	type term struct {
		node       string
		epoch      int64
		start, end time.Time // end zero: still promoted at the end
	}
	var terms []*term
	open := map[string]*term{} // node -> its open term
	endTerm := func(node string, at time.Time) {
		if tm := open[node]; tm != nil {
			tm.end = at
			delete(open, node)
		}
	}
	type acceptedWrite struct {
		at    time.Time
		node  string
		epoch int64
		sole  *term // the writer's term if it was the only promoted node then
	}
	var accepted []acceptedWrite
	samples := map[sampleKey][][2]int64{}
	var sampleOrder []sampleKey

	for i, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case "promote":
			ep := e.Int("epoch")
			if refused[i] {
				r.RefusedPromotions++
				continue
			}
			r.Promotions++
			r.judge(VOverlap, 1)
			r.judge(VEpochOrder, 1)
			for other, oe := range active {
				if other != node {
					add(VOverlap, e.At, "%s promoted at epoch %d while %s (epoch %d) was neither demoted nor fenced", node, ep, other, oe)
				}
			}
			if ep <= maxPromoted {
				add(VEpochOrder, e.At, "%s promoted at epoch %d, not above the earlier promotion's epoch %d", node, ep, maxPromoted)
			}
			maxPromoted = max(maxPromoted, ep)
			active[node] = ep
			endTerm(node, e.At)
			tm := &term{node: node, epoch: ep, start: e.At}
			terms = append(terms, tm)
			open[node] = tm
			if prev, ok := promotedAt[ep]; ok && prev != node {
				add(VEpochOrder, e.At, "epoch %d promoted on %s and on %s", ep, prev, node)
			}
			promotedAt[ep] = node
		case KindElected:
			// Even a promotion the service refuses must not reuse an
			// epoch: the elector itself handed out an old one.
			r.judge(VEpochOrder, 1)
			if ep := e.Int("epoch"); ep <= maxElected {
				add(VEpochOrder, e.At, "%s elected at epoch %d, not above the earlier election's epoch %d", node, ep, maxElected)
			} else {
				maxElected = ep
			}
		case "promote_failed", "demote":
			delete(active, node)
			endTerm(node, e.At)
		case "fence":
			r.Fences++
			t := e.Get("target")
			if ep, ok := active[t]; ok && ep <= e.Int("target_epoch") {
				delete(active, t)
				endTerm(t, e.At)
			}
		case "fence_failed":
			r.FenceFailures++
		case KindWrite:
			ep := e.Int("epoch")
			if e.Get("accepted") != "true" {
				r.RejectedStale++
				continue
			}
			r.Accepted++
			r.judge(VStaleWrite, 1)
			r.judge(VWrongWriter, 1)
			r.judge(VUnpromoted, 1)
			if ep < maxAccepted {
				add(VStaleWrite, e.At, "store accepted %s's write seq %s at epoch %d after accepting epoch %d", node, e.Get("seq"), ep, maxAccepted)
			}
			maxAccepted = max(maxAccepted, ep)
			switch who, ok := promotedAt[ep]; {
			case !ok:
				add(VUnpromoted, e.At, "store accepted %s's write at epoch %d, but nobody was promoted at that epoch", node, ep)
			case who != node:
				add(VWrongWriter, e.At, "store accepted %s's write at epoch %d, which %s was promoted at", node, ep, who)
			}
			if aep, ok := active[node]; !ok || aep != ep {
				r.LateAccepted++
			}
			acceptedTimes = append(acceptedTimes, e.At)
			acceptedEpochs = append(acceptedEpochs, ep)
			w := acceptedWrite{at: e.At, node: node, epoch: ep}
			if aep, ok := active[node]; ok && aep == ep && len(active) == 1 {
				w.sole = open[node]
			}
			accepted = append(accepted, w)
		case KindFault:
			id := int(e.Int("id"))
			f := faults[id]
			if f == nil {
				f = &FaultResult{ID: id, Kind: e.Get("kind"), Target: e.Get("target"), Recovery: -1}
				faults[id] = f
				order = append(order, id)
			}
			switch e.Get("phase") {
			case "inject":
				f.Injected = e.At
				for _, o := range faults {
					if o != f && o.windowEnd.IsZero() {
						o.windowEnd = e.At
					}
				}
			case "heal":
				f.Healed = e.At
			}
		case KindRejoin:
			r.judge(VLockedOut, 1)
			if e.Get("ok") != "true" {
				add(VLockedOut, e.At, "after fault %s (%s), %s could not be made leader within %v (it cannot use ZooKeeper)",
					e.Get("fault"), e.Get("kind"), node, RejoinBound)
			}
		case KindDaemonExit:
			r.DaemonExits++
			r.judge(VExit, 1)
			if e.Get("expected") != "true" {
				add(VExit, e.At, "failoverd of %s (pid %s) exited unexpectedly: %s", node, e.Get("pid"), e.Get("err"))
			}
		case KindDaemonStart:
			r.judge(VCrash, 1) // its log is scanned at the end
		case KindCrash:
			if strings.HasPrefix(e.Get("what"), "known_race:") {
				r.KnownRaces = append(r.KnownRaces, node+": "+strings.TrimPrefix(e.Get("what"), "known_race:"))
				continue
			}
			add(VCrash, e.At, "%s in the log of %s: %s", e.Get("what"), node, e.Get("line"))
		case KindSample:
			r.Samples++
			k := sampleKey{node, e.Get("pid")}
			if _, ok := samples[k]; !ok {
				sampleOrder = append(sampleOrder, k)
			}
			samples[k] = append(samples[k], [2]int64{e.Int("goroutines"), e.Int("fds")})
		}
	}

	// Liveness and recovery per fault. A fault's window runs from its
	// heal to the next fault's injection (or the end). It has recovered at
	// the first write the store accepted in that window from the only
	// promoted node, at its epoch, whose leadership then lasted to the end
	// of the window: a write from a leader about to be demoted or fenced
	// (say, the service of a killed daemon, still primary until the
	// successor fences it) does not count.
	for _, id := range order {
		f := faults[id]
		r.judge(VUnhealedFaults, 1)
		if !f.Healed.IsZero() {
			r.judge(VLiveness, 1)
		}
		if f.windowEnd.IsZero() {
			f.windowEnd = r.End
		}
		if !f.Healed.IsZero() {
			i := sort.Search(len(accepted), func(i int) bool { return !accepted[i].at.Before(f.Healed) })
			for ; i < len(accepted) && !accepted[i].at.After(f.windowEnd); i++ {
				if tm := accepted[i].sole; tm != nil && (tm.end.IsZero() || !tm.end.Before(f.windowEnd)) {
					f.Recovered, f.RecoveredByEpoch = accepted[i].at, accepted[i].epoch
					break
				}
			}
		}
		switch {
		case f.Healed.IsZero():
			add(VUnhealedFaults, f.Injected, "fault %d (%s on %s) was injected but never healed", f.ID, f.Kind, f.Target)
		case f.Recovered.IsZero():
			if f.windowEnd.Sub(f.Healed) >= cfg.LivenessBound {
				add(VLiveness, f.Healed, "fault %d (%s on %s): no lasting promoted leader writing within %v of the heal (none before %s)", f.ID, f.Kind, f.Target, cfg.LivenessBound, f.windowEnd.Format("15:04:05.000"))
			}
		default:
			f.Recovery = f.Recovered.Sub(f.Healed)
			if f.Recovery > cfg.LivenessBound {
				add(VLiveness, f.Healed, "fault %d (%s on %s): a promoted leader wrote again only %v after the heal (bound %v)", f.ID, f.Kind, f.Target, f.Recovery.Round(time.Millisecond), cfg.LivenessBound)
			}
			f.WriteGap = maxGap(acceptedTimes, f.Injected, f.Recovered)
			// Did leadership change? Compare with the last epoch accepted before injection.
			k := sort.Search(len(acceptedTimes), func(i int) bool { return !acceptedTimes[i].Before(f.Injected) })
			f.ChangedLeadership = k == 0 || acceptedEpochs[k-1] != f.RecoveredByEpoch
		}
		r.Faults = append(r.Faults, *f)
	}

	// Resource growth per daemon process.
	for _, k := range sampleOrder {
		s := samples[k]
		if cfg.MinSamples <= 0 || len(s) < cfg.MinSamples {
			continue
		}
		r.judge(VGoroutines, 1)
		r.judge(VFDs, 1)
		third := len(s) / 3
		for dim, name := range []string{"goroutines", "fds"} {
			var head []int64
			tail := int64(-1)
			for i, v := range s {
				if i < third {
					head = append(head, v[dim])
				}
				if i >= len(s)-third && (tail < 0 || v[dim] < tail) {
					tail = v[dim]
				}
			}
			slices.Sort(head)
			base := head[len(head)/2]
			if dim == 0 {
				if limit := base + int64(float64(base)*cfg.GoroutineFactor) + cfg.GoroutineSlack; tail > limit {
					add(VGoroutines, r.End, "failoverd of %s (pid %s): goroutines grew from %d to at least %d over %d samples (limit %d)", k.node, k.pid, base, tail, len(s), limit)
				}
			} else if tail > base+cfg.FDSlack {
				add(VFDs, r.End, "failoverd of %s (pid %s): %s grew from %d to at least %d over %d samples", k.node, k.pid, name, base, tail, len(s))
			}
		}
	}
	revoked := revokedTerms(h)
	checkStaleLeaders(h, cfg, revoked, &r, add)
	checkPromoteAfterFailedFence(h, &r, add)
	checkTakeovers(r.Faults, h, &r, add)
	proved := checkFenceFirst(h, &r, add)
	checkZnodesDeleted(h, revoked, proved, &r, add)
	checkFollow(h, &r, add)
	checkPolicy(h, &r, add)
	checkLagging(h, &r, add)
	checkService(h, &r, add)
	checkStandDowns(h, &r, add)
	checkPaused(h, &r, add)
	checkWrongFenceAnswers(h, &r, add)
	checkBreadcrumbClears(h, &r, add)
	checkSwitched(h, &r, add)
	checkPinnedTerm(h, &r, add)
	checkQuietLeaseLoss(h, &r, add)
	checkFenceLies(h, &r, add)
	checkFenceSkips(h, &r, add)
	checkOperatorFailovers(h, &r, add)
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].At.Before(r.Violations[j].At) })
	return r
}

// leaderStates are the controller states of a node that holds leadership:
// it was elected and has not stood down yet.
var leaderStates = map[string]bool{"fencing": true, "promoting": true, "leader": true}

// A belief is one term of a node as its daemon saw it: from its "elected"
// to the first sign it stood down: a state transition out of fencing,
// promoting or leader (the controller saw the term end: a lost lease, an
// expired session, a cede, a failed promotion), the elector's "leadership
// ended", or the daemon's death.
type belief struct {
	node       string
	epoch      int64
	start, end time.Time // end zero: never stood down
	endReason  string    // the state transition's reason, "exit", or "leadership_ended"
}

// reasonFenced is the controller's reason for a demote it was asked for
// over its admin API: an operator's, or a successor's rpc fence.
const reasonFenced = "operator_demote"

// checkStaleLeaders: when a node is elected at epoch E, every other node
// elected at a lower epoch that has not stood down must do so within the
// slack. A daemon that was paused (SIGSTOP) when its successor was elected
// cannot act; it must stand down within the slack of being resumed.
// Fencing may have kept the store safe: a node that believes it leads
// after its successor won is a broken lease all the same.
func checkStaleLeaders(h History, cfg CheckConfig, revoked map[nodeEpoch]revocation, r *Report, add func(string, time.Time, string, ...any)) {
	// Pauses of daemons (pause-daemon faults), by node.
	type span struct{ from, to time.Time }
	paused := map[string][]span{}
	injected := map[string]Event{}
	for _, e := range h {
		if e.Kind != KindFault || !stoppedDaemonKinds[e.Get("kind")] {
			continue
		}
		id := e.Get("id")
		switch e.Get("phase") {
		case "inject", "strike": // a strike names the node a fault stopped
			injected[id] = e
		case "heal":
			if in, ok := injected[id]; ok {
				paused[in.Get("target")] = append(paused[in.Get("target")], span{in.At, e.At})
			}
		}
	}
	resumedAt := func(node string, at time.Time) time.Time {
		for _, s := range paused[node] {
			if !at.Before(s.from) && !at.After(s.to) {
				return s.to
			}
		}
		return at
	}

	type pending struct {
		b        *belief
		base     time.Time // the successor's election, or the end of a pause over it
		deadline time.Time
		succ     Event
	}
	latest := map[string]*belief{} // node -> its newest term
	judged := map[*belief]bool{}
	var checks []pending
	for _, e := range h {
		node := e.Get("node")
		b := latest[node]
		if b != nil && !b.end.IsZero() {
			b = nil // only an open term can end
		}
		switch e.Kind {
		case KindElected:
			if b != nil {
				b.end = e.At // a new term ends any earlier one
			}
			ep := e.Int("epoch")
			for other, ob := range latest {
				if other != node && !judged[ob] && ob.epoch < ep {
					judged[ob] = true
					base := resumedAt(other, e.At)
					checks = append(checks, pending{ob, base, base.Add(cfg.StaleLeaderSlack), e})
				}
			}
			latest[node] = &belief{node: node, epoch: ep, start: e.At}
		case KindState:
			if b != nil && leaderStates[e.Get("from")] && !leaderStates[e.Get("to")] {
				b.end, b.endReason = e.At, e.Get("reason")
			}
		case KindLeadershipEnd:
			if b != nil && b.epoch == e.Int("epoch") {
				b.end, b.endReason = e.At, KindLeadershipEnd
			}
		case KindDaemonExit:
			if b != nil {
				b.end, b.endReason = e.At, "exit"
			}
		}
	}
	for _, c := range checks {
		r.Handoffs++
		r.judge(VStaleLeader, 1)
		// The margin a correct lease keeps, where the lease ended the term
		// (a pause's wake-up is no lease; a graceful handover waits for
		// the stand-down by construction).
		if margin := c.succ.At.Sub(c.b.end); c.b.endReason == "lease_expired" && c.base.Equal(c.succ.At) {
			if r.LeaseHandoffs == 0 || margin < r.MinHandoffMargin {
				r.MinHandoffMargin = margin
			}
			r.LeaseHandoffs++
		}
		rv := revoked[nodeEpoch{c.b.node, c.b.epoch}]
		switch {
		case rv.near(c.succ.At) && !c.b.end.IsZero() && !c.b.end.After(rv.at.Add(cfg.StaleLeaderSlack)):
			// Its lease was taken away under it: the successor won when
			// the entry went, before the old leader's watch could tell
			// it; only fencing keeps them apart (checked by the rules on
			// promotion and writes). It must still have stood down by
			// the time its session saw the lease gone.
			r.RevokedHandoffs++
		case c.b.end.IsZero():
			add(VStaleLeader, c.deadline, "%s still believed it was leader at epoch %d (elected %s) after %s was elected at epoch %d at %s, and never stood down",
				c.b.node, c.b.epoch, c.b.start.Format("15:04:05.000"), c.succ.Get("node"), c.succ.Int("epoch"), c.succ.At.Format("15:04:05.000"))
		case c.b.endReason == reasonFenced && c.b.end.After(c.succ.At) && c.base.Equal(c.succ.At):
			// Not paused, still leading when its successor won, and it
			// stood down only when that successor's rpc fence told it to:
			// its own lease would not have ended it.
			add(VStaleLeader, c.b.end, "%s still believed it was leader at epoch %d when %s was elected at epoch %d at %s; it stood down only when fenced (%s, %v later)",
				c.b.node, c.b.epoch, c.succ.Get("node"), c.succ.Int("epoch"), c.succ.At.Format("15:04:05.000"),
				c.b.endReason, c.b.end.Sub(c.succ.At).Round(time.Millisecond))
		case c.b.end.After(c.deadline):
			add(VStaleLeader, c.deadline, "%s still believed it was leader at epoch %d until %s, %v after %s was elected at epoch %d (slack %v)",
				c.b.node, c.b.epoch, c.b.end.Format("15:04:05.000"), c.b.end.Sub(c.base).Round(time.Millisecond),
				c.succ.Get("node"), c.succ.Int("epoch"), cfg.StaleLeaderSlack)
		}
	}
}

// checkPromoteAfterFailedFence: within one term of a node (from its
// "elected"), once fencing a target failed (the shell fencer's fence_failed,
// the last method of the suite's chain, or the daemon's own "fencing
// failed"), the node must not promote unless that target was fenced after
// all (the fence hook's "fence" for it) or its service demoted (the
// target's demote hook, which is how an rpc fence succeeds). A new term starts
// clean: it reads the breadcrumb again.
func checkPromoteAfterFailedFence(h History, r *Report, add func(string, time.Time, string, ...any)) {
	failed := map[string]map[string]time.Time{} // fencer -> target -> when its fence failed
	clear := func(target string) {
		for _, ts := range failed {
			delete(ts, target)
		}
	}
	for _, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case KindElected:
			delete(failed, node)
		case "fence_failed", KindFenceFailed:
			r.judge(VPromoteAfterFailedFence, 1)
			if failed[node] == nil {
				failed[node] = map[string]time.Time{}
			}
			failed[node][e.Get("target")] = e.At
		case "fence":
			clear(e.Get("target"))
		case "demote":
			// An rpc fence (or a local one of an earlier term) succeeds
			// only through a demote hook of the target that succeeded.
			// The fencer daemon's own "fenced" is not evidence: a broken
			// build that promotes after a failed fence may well log it.
			clear(node)
		case "promote":
			for target, at := range failed[node] {
				add(VPromoteAfterFailedFence, e.At, "%s promoted at epoch %d although fencing %s failed at %s in the same term and never succeeded",
					node, e.Int("epoch"), target, at.Format("15:04:05.000"))
			}
		}
	}
}

// checkZnodesDeleted reports every leadership that ended because its
// election znode was deleted (see VZnodeDeleted), except one its own
// session's expiry explains: a daemon SIGSTOPped past its session timeout
// may read, on waking, the deletion notice of its own ephemeral znode
// (queued on the connection the server closed) before it learns that the
// session expired, and reports "znode deleted". That is the case when the
// poller saw the node's member record (an ephemeral of the same session)
// gone while the daemon was stopped, and the end came within
// ZnodeExpiredSlack of its waking. Those are counted, not failed.
//
// With fencing first, an end of a term that a proving fence proved out
// (proved: node and epoch -> the fence) is counted too: the successor
// ended it after the fence, which is the option's design; whether that
// fence was warranted is fenced_healthy_leader's judgement.
func checkZnodesDeleted(h History, revokedBy map[nodeEpoch]revocation, proved map[nodeEpoch]time.Time, r *Report, add func(string, time.Time, string, ...any)) {
	type span struct{ from, to time.Time }
	var (
		paused   = map[string][]span{} // node -> its pause-daemon spans
		injected = map[string]Event{}  // fault id -> its injection
		gone     = map[string][]time.Time{}
		revoked  = map[string][]span{}    // node -> its etcd-lease-revoke spans
		znodes   = map[nodeEpoch]string{} // a ZooKeeper term -> its election znode
		ownLost  = map[string][]Event{}   // node -> its lost replies to applied requests
	)
	for _, e := range h {
		switch {
		case e.Kind == KindElected && e.Get("znode") != "":
			znodes[nodeEpoch{e.Get("node"), e.Int("epoch")}] = e.Get("znode")
		case e.Kind == "reply_lost" && e.Get("dropped") == "false":
			ownLost[e.Get("node")] = append(ownLost[e.Get("node")], e)
		case e.Kind == KindFault && stoppedDaemonKinds[e.Get("kind")] && (e.Get("phase") == "inject" || e.Get("phase") == "strike"):
			injected[e.Get("id")] = e
		case e.Kind == KindFault && stoppedDaemonKinds[e.Get("kind")] && e.Get("phase") == "heal":
			if in, ok := injected[e.Get("id")]; ok {
				paused[in.Get("target")] = append(paused[in.Get("target")], span{in.At, e.At})
			}
		case e.Kind == KindMemberPosition && e.Get("position") == "none":
			gone[e.Get("node")] = append(gone[e.Get("node")], e.At)
		case e.Kind == KindFault && e.Get("kind") == EtcdLeaseRevoke && e.Get("phase") == "inject":
			injected[e.Get("id")] = e
		case e.Kind == KindFault && e.Get("kind") == EtcdLeaseRevoke && e.Get("phase") == "heal":
			if in, ok := injected[e.Get("id")]; ok {
				revoked[in.Get("target")] = append(revoked[in.Get("target")], span{in.At, e.At})
			}
		}
	}
	// The operator deleted it: the entry goes with the revoked lease.
	byOperator := func(node string, at time.Time) bool {
		for _, p := range revoked[node] {
			if !at.Before(p.from) && !at.After(p.to.Add(ZnodeExpiredSlack)) {
				return true
			}
		}
		return false
	}
	expired := func(node string, at time.Time) bool {
		for _, p := range paused[node] {
			if at.Before(p.to) || at.After(p.to.Add(ZnodeExpiredSlack)) {
				continue
			}
			for _, g := range gone[node] {
				if !g.Before(p.from) && !g.After(p.to) {
					return true
				}
			}
		}
		return false
	}
	// Its own Term.Finish deleted it: the multi that deletes the term's
	// znode was applied, its reply lost (lost-reply-lagging), and the
	// elector saw the deletion before it learnt the term had ended.
	byItself := func(node string, epoch int64, at time.Time) bool {
		z := znodes[nodeEpoch{node, epoch}]
		for _, l := range ownLost[node] {
			if z != "" && !l.At.After(at) && at.Sub(l.At) <= ZnodeExpiredSlack && strings.Contains(l.Get("path"), "delete_"+z) {
				return true
			}
		}
		return false
	}
	for _, e := range h {
		switch e.Kind {
		case KindTakeoverAtDeadline:
			r.TakeoversAtDeadline++
		case KindRemovedOwnEntry:
			r.OwnEntriesRemoved++
		}
		if e.Kind == KindLeadershipEnd {
			r.judge(VZnodeDeleted, 1)
		}
		if e.Kind != KindLeadershipEnd || !entryDeleted(e.Get("reason")) {
			continue
		}
		if expired(e.Get("node"), e.At) {
			r.ExpiredZnodeEnds++
			continue
		}
		if byOperator(e.Get("node"), e.At) {
			r.RevokedEnds++
			continue
		}
		if byItself(e.Get("node"), e.Int("epoch"), e.At) {
			r.OwnFinishEnds++
			continue
		}
		if at, ok := proved[nodeEpoch{e.Get("node"), e.Int("epoch")}]; ok && !at.After(e.At) {
			r.FencedFirstEnds++
			continue
		}
		if v := revokedBy[nodeEpoch{e.Get("node"), e.Int("epoch")}]; v.by == revokedOnResume && v.near(e.At) {
			r.EtcdResumeRevokes++
			continue
		}
		add(VZnodeDeleted, e.At, "%s's leadership at epoch %d ended because its election znode was deleted by another session (%s)",
			e.Get("node"), e.Int("epoch"), e.Get("reason"))
	}
}

type nodeEpoch struct {
	node  string
	epoch int64
}

// Why an etcd term's lease was revoked under it (revokedTerms).
const (
	revokedByOperator = "operator"  // etcd-lease-revoke
	revokedOnResume   = "on_resume" // etcd, after its stopped leader went on
)

// EtcdResumeSlack: how long after a stopped etcd leader is continued etcd
// may still revoke leases that expired in that member's view. The old
// leader's lessor checks every 500ms; its revoke then goes through raft.
const EtcdResumeSlack = 5 * time.Second

// revokedTerms finds the etcd terms whose lease etcd dropped while their
// daemon still renewed it: the session of the lease the term was elected
// with ended with "etcd lease X is gone" while its own deadline was still
// ahead (lease_left > 0; a lease we failed to renew ends at our deadline
// first). Two causes explain that, and only they are returned: an
// operator's revoke of that very lease (the harness's etcd_lease_revoke
// names it) and etcd's own revoke within EtcdResumeSlack of the heal of a
// stopped etcd leader (etcd-pause-leader): on waking, that member's
// lessor may still act as the primary and revoke every lease that expired
// in its view, although the new leader extended and renewed them (etcd
// issues 12528 and 15247; `make etcd-probe` measures it with etcd alone).
// Any other lease gone under a live term is left to the rules as before.
func revokedTerms(h History) map[nodeEpoch]revocation {
	leaseOf := map[string]nodeEpoch{} // node|lease id -> the term elected with it
	gone := map[string]time.Time{}    // node|lease id -> its session saw it gone early
	byOperator := map[string]bool{}   // node|lease id the operator revoked
	injected := map[string]Event{}
	var resumed []time.Time // heals of stopped etcd leaders
	for _, e := range h {
		key := e.Get("node") + "|" + e.Get("lease")
		switch {
		case e.Kind == KindElected && e.Get("lease_id") != "":
			leaseOf[e.Get("node")+"|"+e.Get("lease_id")] = nodeEpoch{e.Get("node"), e.Int("epoch")}
		case e.Kind == KindSessionEnded && strings.Contains(e.Get("err"), "is_gone"):
			if left, err := time.ParseDuration(e.Get("lease_left")); err == nil && left > 0 {
				gone[key] = e.At
			}
		case e.Kind == KindEtcdRevoke && e.Get("ok") == "true":
			byOperator[key] = true
		case e.Kind == KindFault && e.Get("phase") == "inject":
			injected[e.Get("id")] = e
		case e.Kind == KindFault && e.Get("phase") == "heal":
			in, ok := injected[e.Get("id")]
			if ok && (in.Get("kind") == EtcdPauseLeader || in.Get("kind") == EtcdPauseMember) && in.Get("role") == "leader" {
				resumed = append(resumed, e.At)
			}
		}
	}
	out := map[nodeEpoch]revocation{}
	for key, at := range gone {
		t, ok := leaseOf[key]
		if !ok {
			continue
		}
		if byOperator[key] {
			out[t] = revocation{revokedByOperator, at}
			continue
		}
		for _, r := range resumed {
			if !at.Before(r.Add(-time.Second)) && !at.After(r.Add(EtcdResumeSlack)) {
				out[t] = revocation{revokedOnResume, at}
			}
		}
	}
	return out
}

// revocation: who revoked a term's lease (revokedByOperator or
// revokedOnResume), and when its daemon's session learnt the lease was
// gone (shortly after the entry went; it checks at once).
type revocation struct {
	by string
	at time.Time
}

// near reports whether t is within EtcdResumeSlack of the revocation.
func (v revocation) near(t time.Time) bool {
	return v.by != "" && !t.Before(v.at.Add(-EtcdResumeSlack)) && !t.After(v.at.Add(EtcdResumeSlack))
}

// entryDeleted reports whether a leadership's end reason is the deletion
// of its election entry: ZooKeeper's znode_deleted, or etcd's "election
// entry was deleted" (cluster.ErrEntryDeleted, spaces as underscores).
func entryDeleted(reason string) bool {
	return strings.Contains(reason, "znode_deleted") || strings.Contains(reason, "election_entry_was_deleted")
}

// ZnodeExpiredSlack: how long after waking a paused daemon may still be
// ending its leadership for the deletion its own expired session caused
// (the demote hook runs first; "leadership ended" is logged after it).
const ZnodeExpiredSlack = 2 * time.Second

// checkTakeovers: for a fault of a TakeoverKinds kind, a node other than
// its target must be promoted (and not refused) between injection and heal.
func checkTakeovers(faults []FaultResult, h History, r *Report, add func(string, time.Time, string, ...any)) {
	for _, f := range faults {
		if !TakeoverKinds[f.Kind] || f.Healed.IsZero() {
			continue
		}
		r.judge(VNoTakeover, 1)
		took := false
		for _, e := range h {
			if e.At.Before(f.Injected) || e.At.After(f.Healed) {
				continue
			}
			if e.Kind == KindState && e.Get("to") == "leader" && e.Get("node") != f.Target {
				took = true
				break
			}
		}
		if !took {
			add(VNoTakeover, f.Healed, "fault %d (%s on %s): no other node became leader in the %v it lasted",
				f.ID, f.Kind, f.Target, f.Healed.Sub(f.Injected).Round(time.Millisecond))
		}
	}
}

// maxGap is the longest stretch within [from, to] without an accepted write
// (times is sorted).
func maxGap(times []time.Time, from, to time.Time) time.Duration {
	prev := from
	var gap time.Duration
	i := sort.Search(len(times), func(i int) bool { return times[i].After(from) })
	for ; i < len(times) && !times[i].After(to); i++ {
		gap = max(gap, times[i].Sub(prev))
		prev = times[i]
	}
	return gap
}

// Percentile returns the p-th percentile (0..100, nearest rank) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	rank = min(max(rank, 0), len(s)-1)
	return s[rank]
}

func itoa(n int) string { return strconv.Itoa(n) }
