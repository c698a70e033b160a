package chaos

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary renders the report as the suite's summary table.
func Summary(r Report, seed uint64, replay string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos summary: seed=%d, history %s, %d faults injected, %d violations\n\n",
		seed, r.End.Sub(r.Start).Round(time.Second), len(r.Faults), len(r.Violations))

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault kind\tinjected\trecovered\tnew leader\trecovery p50\tp99\tmax\twrite gap p50\tp99\tmax\t")
	byKind := map[string][]FaultResult{}
	for _, f := range r.Faults {
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	var allRec, allGap []time.Duration
	total, totalRec, totalChanged := 0, 0, 0
	// Rows for the kinds the run injected, in schedule order (a backend's
	// run leaves the other backend's kinds out).
	kinds := append(append(append(append([]string(nil), AllKinds...), LostReplies), EtcdNemeses...), FenceFirstKinds...)
	kinds = slices.DeleteFunc(kinds, func(k string) bool { return len(byKind[k]) == 0 })
	for k := range byKind {
		if !contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	for _, k := range kinds {
		fs := byKind[k]
		var rec, gap []time.Duration
		changed := 0
		for _, f := range fs {
			if f.Recovery >= 0 {
				rec = append(rec, f.Recovery)
				gap = append(gap, f.WriteGap)
			}
			if f.ChangedLeadership {
				changed++
			}
		}
		total += len(fs)
		totalRec += len(rec)
		totalChanged += changed
		allRec, allGap = append(allRec, rec...), append(allGap, gap...)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", k, len(fs), len(rec), changed,
			ms(Percentile(rec, 50)), ms(Percentile(rec, 99)), ms(Percentile(rec, 100)),
			ms(Percentile(gap, 50)), ms(Percentile(gap, 99)), ms(Percentile(gap, 100)))
	}
	fmt.Fprintf(tw, "all\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", total, totalRec, totalChanged,
		ms(Percentile(allRec, 50)), ms(Percentile(allRec, 99)), ms(Percentile(allRec, 100)),
		ms(Percentile(allGap, 50)), ms(Percentile(allGap, 99)), ms(Percentile(allGap, 100)))
	tw.Flush()
	b.WriteString("\n(recovery: heal -> first write the store accepted from the sole promoted leader at its epoch;\n" +
		" write gap: longest stretch without an accepted write between injection and recovery;\n" +
		" new leader: faults after which the writing epoch changed)\n\n")

	b.WriteString(Judgements(r))
	fmt.Fprintf(&b, "\nstore: %d writes accepted, %d REJECTED as stale (fencing tokens at work), %d accepted in flight after the writer's term ended (epoch still newest)\n",
		r.Accepted, r.RejectedStale, r.LateAccepted)
	fmt.Fprintf(&b, "promotions: %d (+%d refused by the service as stale), fences: %d, failed fence attempts: %d, daemon exits: %d, resource samples: %d\n",
		r.Promotions, r.RefusedPromotions, r.Fences, r.FenceFailures, r.DaemonExits, r.Samples)
	fmt.Fprintf(&b, "follow hook runs: %d\n", r.Follows)
	zero := "none"
	if len(r.PriorityZero) > 0 {
		zero = fmt.Sprintf("%s (judged over %d elections won by the others)", strings.Join(r.PriorityZero, ", "), r.ElectionsWithoutZero)
	}
	fmt.Fprintf(&b, "priorities: %s; priority 0: %s\n", strings.Join(r.Priorities, " "), zero)
	fmt.Fprintf(&b, "pre_promote runs: %d, vetoes: %d (a veto was on during %d faults)\n", r.PrePromotes, r.Vetoes, r.VetoFaults)
	fmt.Fprintf(&b, "handovers asked by a node: %d for a higher priority, %d for a more advanced position (%d completed); won terms handed over: %d, declined: %d; preemptions: %d\n",
		r.Handovers["preferred_priority"], r.Handovers["preferred_position"], r.HandoversDone, r.HandoversAtWin, r.Declines, r.Preemptions)
	fmt.Fprintf(&b, "positions: max_lag %d, %d lagging nodes frozen, %d leader positions published, %d elections won by a lagging node (each must not promote; %d logged it declined)\n",
		r.MaxLag, r.Freezes, r.LeaderPositions, r.LaggingWins, r.LaggingDeclined)
	margin := "none"
	if r.LeaseHandoffs > 0 {
		margin = ms(r.MinHandoffMargin)
	}
	fmt.Fprintf(&b, "leader handoffs judged: %d (%d after a lease expiry), smallest margin from a lease expiry to the successor's election: %s (stale_leader slack %v)\n",
		r.Handoffs, r.LeaseHandoffs, margin, StaleLeaderSlack)
	fmt.Fprintf(&b, "demote budget at the service: %d stand-downs after a term ended (%d after a killed promote), smallest margin to the window the arithmetic keeps free of successors: %s (slack %v)\n",
		r.StandDowns, r.StandDownsAfterKill, fmtMargin(r.StandDowns, r.MinStandDownMargin), LateStandDownSlack)
	fmt.Fprintf(&b, "service handoffs: %d promotions after another service stood down, smallest gap from that stand-down to the promotion: %s\n",
		r.ServiceHandoffs, fmtMargin(r.ServiceHandoffs, r.MinServiceHandoff))
	fmt.Fprintf(&b, "pauses: %d windows with every node paused; wrong rpc fence answers: %d (%d went on to the next method)\n",
		r.PauseWindows, r.WrongFenceAnswers, r.WrongAnswerFellBack)
	if r.TakeoversAtDeadline > 0 {
		fmt.Fprintf(&b, "terms ended by a successor at the old leader's own deadline (election.take_over_at_deadline): %d\n", r.TakeoversAtDeadline)
	}
	b.WriteString(fenceFirstSummary(r))
	if r.OwnEntriesRemoved > 0 {
		fmt.Fprintf(&b, "previous processes' election entries removed by their restarted daemon (election.end_own_term_on_restart): %d\n", r.OwnEntriesRemoved)
	}
	if r.ExpiredZnodeEnds > 0 {
		fmt.Fprintf(&b, "leaderships ended for 'znode deleted' by the node's own session expiry while its daemon was paused (not failed): %d\n", r.ExpiredZnodeEnds)
	}
	if r.OwnFinishEnds > 0 {
		fmt.Fprintf(&b, "leaderships ended for 'znode deleted' by the node's own Term.Finish, its reply lost (not failed): %d\n", r.OwnFinishEnds)
	}
	if r.RevokedEnds > 0 {
		fmt.Fprintf(&b, "leaderships ended for a deleted election entry while the operator revoked the node's lease (not failed): %d\n", r.RevokedEnds)
	}
	if r.EtcdResumeRevokes > 0 {
		fmt.Fprintf(&b, "leaderships whose etcd lease etcd revoked while it was renewed, right after a stopped etcd leader went on (etcd's, not failed): %d\n", r.EtcdResumeRevokes)
	}
	if r.RevokedHandoffs > 0 {
		fmt.Fprintf(&b, "successors elected after the previous leader's lease was revoked under it (stand-down not bounded by the lease, fencing checked): %d\n", r.RevokedHandoffs)
	}
	if len(r.KnownRaces) > 0 {
		fmt.Fprintf(&b, "known dependency data races (reported, not failing): %s\n", strings.Join(r.KnownRaces, ", "))
		for _, k := range KnownRaces {
			fmt.Fprintf(&b, "  %s: %s\n", k.Name, k.Note)
		}
	}
	fmt.Fprintf(&b, "liveness bound: %v\nreplay: %s\n", LivenessBound, replay)
	return b.String()
}

// Unexercised says which rules a run of kinds had to exercise and did
// not judge even once: such a rule passed vacuously, and the run fails.
// Every run must judge promotions (hook and service overlap); the rules
// of the policy, the pause, the wrong fence answers and the demote budget
// must judge something whenever the kinds made for them ran.
func Unexercised(kinds []string, r Report) []string {
	var out []string
	need := func(rule, why string) {
		if r.Judged[rule] == 0 {
			out = append(out, fmt.Sprintf("the %s rule judged nothing although %s ran: it passed vacuously", rule, why))
		}
	}
	need(VOverlap, "the schedule")
	need(VServiceOverlap, "the schedule")
	for _, k := range kinds {
		switch {
		case k == LaggingFailover && r.MaxLag > 0:
			need(VPromotedLagging, k)
		case k == VetoTakeover:
			need(VPromotedAfterVeto, k)
		case k == PauseCluster:
			need(VPausedAction, k)
		case k == FenceWrongAnswer:
			need(VFencedByWrongAnswer, k)
		case k == BreadcrumbClear:
			need(VClearAccepted, k)
		case k == FenceLies:
			need(VFenceLieBound, k)
		case k == FenceRefusedThenCrash:
			need(VFenceSkipped, k)
		case k == FailoverAfterFailover:
			need(VOperatorCooldown, k)
		case contains(SlowHookKinds, k):
			need(VLateStandDown, k)
			if r.StandDownsAfterKill == 0 && r.Judged[VLateStandDown] > 0 {
				out = append(out, fmt.Sprintf("no stand-down followed a killed promote although %s ran: the worst case of the demote budget was never exercised", k))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Judgements renders how many times each rule judged something.
func Judgements(r Report) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rule\tjudged\tviolations\t")
	for _, k := range AllViolationKinds {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", k, r.Judged[k], r.Count(k))
	}
	tw.Flush()
	return b.String()
}

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Combine adds up two reports (the fair and unfair parts of a long run)
// for one summary table.
func Combine(a, b Report) Report {
	r := a
	r.Violations = append(append([]Violation(nil), a.Violations...), b.Violations...)
	r.Faults = append(append([]FaultResult(nil), a.Faults...), b.Faults...)
	r.KnownRaces = append(append([]string(nil), a.KnownRaces...), b.KnownRaces...)
	r.Promotions += b.Promotions
	r.RefusedPromotions += b.RefusedPromotions
	r.Accepted += b.Accepted
	r.RejectedStale += b.RejectedStale
	r.LateAccepted += b.LateAccepted
	r.Fences += b.Fences
	r.FenceFailures += b.FenceFailures
	r.DaemonExits += b.DaemonExits
	r.Samples += b.Samples
	r.Follows += b.Follows
	r.Priorities = append(append([]string(nil), a.Priorities...), b.Priorities...)
	r.PriorityZero = append(append([]string(nil), a.PriorityZero...), b.PriorityZero...)
	r.ElectionsWithoutZero += b.ElectionsWithoutZero
	r.PrePromotes += b.PrePromotes
	r.Vetoes += b.Vetoes
	r.VetoFaults += b.VetoFaults
	r.Handovers = map[string]int{}
	for _, m := range []map[string]int{a.Handovers, b.Handovers} {
		for k, v := range m {
			r.Handovers[k] += v
		}
	}
	r.HandoversDone += b.HandoversDone
	r.HandoversAtWin += b.HandoversAtWin
	r.Declines += b.Declines
	r.Preemptions += b.Preemptions
	r.MaxLag = max(r.MaxLag, b.MaxLag)
	r.Freezes += b.Freezes
	r.LeaderPositions += b.LeaderPositions
	r.LaggingWins += b.LaggingWins
	r.ExpiredZnodeEnds += b.ExpiredZnodeEnds
	r.TakeoversAtDeadline += b.TakeoversAtDeadline
	r.OwnEntriesRemoved += b.OwnEntriesRemoved
	r.SuspectsUnanswered += b.SuspectsUnanswered
	r.ProvingFences += b.ProvingFences
	r.TakeoversAfterFence += b.TakeoversAfterFence
	r.ProvedOutSkips += b.ProvedOutSkips
	r.FencedFirstEnds += b.FencedFirstEnds
	r.FenceFirstInCoordFaults += b.FenceFirstInCoordFaults
	r.FenceFirstInCoordFaultsUnreached += b.FenceFirstInCoordFaultsUnreached
	r.RemovalsRefused += b.RemovalsRefused
	r.HeldFences += b.HeldFences
	r.FenceRefusedCrashes += b.FenceRefusedCrashes
	r.OperatorFailovers += b.OperatorFailovers
	r.Cooldowns += b.Cooldowns
	r.FenceLies = append(append([]LieResult(nil), a.FenceLies...), b.FenceLies...)
	r.LieViolationsMeasured += b.LieViolationsMeasured
	r.RevokedEnds += b.RevokedEnds
	r.EtcdResumeRevokes += b.EtcdResumeRevokes
	r.RevokedHandoffs += b.RevokedHandoffs
	r.LaggingDeclined += b.LaggingDeclined
	r.Judged = map[string]int{}
	for _, m := range []map[string]int{a.Judged, b.Judged} {
		for k, v := range m {
			r.Judged[k] += v
		}
	}
	if b.StandDowns > 0 && (a.StandDowns == 0 || b.MinStandDownMargin < a.MinStandDownMargin) {
		r.MinStandDownMargin = b.MinStandDownMargin
	}
	r.StandDowns += b.StandDowns
	r.StandDownsAfterKill += b.StandDownsAfterKill
	if b.ServiceHandoffs > 0 && (a.ServiceHandoffs == 0 || b.MinServiceHandoff < a.MinServiceHandoff) {
		r.MinServiceHandoff = b.MinServiceHandoff
	}
	r.ServiceHandoffs += b.ServiceHandoffs
	r.PauseWindows += b.PauseWindows
	r.WrongFenceAnswers += b.WrongFenceAnswers
	r.WrongAnswerFellBack += b.WrongAnswerFellBack
	if b.LeaseHandoffs > 0 && (a.LeaseHandoffs == 0 || b.MinHandoffMargin < a.MinHandoffMargin) {
		r.MinHandoffMargin = b.MinHandoffMargin
	}
	r.LeaseHandoffs += b.LeaseHandoffs
	r.Handoffs += b.Handoffs
	if b.End.After(r.End) {
		r.End = b.End
	}
	return r
}
