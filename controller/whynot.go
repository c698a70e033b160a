package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/failoverd/failoverd/healthcheck"
)

// Why a node is not leading. Status.NotLeading (and the member record,
// so `failoverd status` shows it for every node) says why this node does
// not lead now: one of the NotLeading* codes, a colon and the details.
//
// The reason is not derived for status: it is the loop's own decision.
// decide, which reconcile runs at every step (after every event, timer and
// health change) and onTermWon runs at a win, says whether the node
// campaigns, the cause a candidacy ends with when it does not, and why not
// leading, all from one ordered list of grounds; reconcile keeps that
// decision in the loop's state and publish shows it. Only what the node is
// doing in a term is shown from the term itself (taking_over: elected,
// fencing or promoting; demoting: the term ended), and a few reasons only
// the Status call can see (the coordination session, the elector's
// refusal) override it there. The grounds, the first that holds:
//
//   - stopping: the daemon is stopping (or stopped);
//   - hook_unkillable: a hook outlived SIGKILL, no hook runs until it goes;
//   - out_startup_demote: the startup demote failed; it is retried, and
//     until it succeeds the service may still act as primary (these two
//     first: they say the service may still act as primary, which matters
//     more than why the node would not campaign anyway);
//   - priority_zero: node.priority is 0, it never campaigns;
//   - unhealthy: the health check fails (since when, and its error);
//   - join_refused: the join checks refused (duplicate node id, another
//     election mode) or the elector stays out (the lease does not fit);
//   - ceded, fencing_failed, lagging or backoff: out until a time after
//     an operator's cede or a demote request (an operator's, or a
//     successor's fence), or after a failed takeover: a fence (which,
//     since when, the error), a won term declined because this node lags,
//     or another failure (promote, pre_promote veto, breadcrumb);
//   - standing_aside: a failover request to another node stands;
//   - paused: the cluster is paused: no automatic promotion;
//   - initializing: the startup demote, the first read of the pause
//     record or the join checks are still to come, or the node is about to
//     join the election;
//
// and once the node campaigns:
//
//   - lagging: more than election.max_lag behind the promoted leader's
//     position (or its own is unknown): a win would decline to promote;
//   - fencing_failed: as long as the streak of failed fences stands (no
//     takeover of this node fenced or promoted since, no newer leader
//     seen), "trying again" (not a plain standby: between attempts no
//     member record is written during the takeovers, so the snapshot
//     status reads must still show why there is no leader);
//   - initializing: joining the election;
//   - standby: in the election; says which node leads, when known.
//
// held_out is never set by a node: the hold after a failed handover is
// known by the nodes that saw the handover fail (the leader that handed
// over), not by the held node. Every node publishes the holds it applies
// in Status.Holds; `failoverd status` shows a standby the leader holds as
// held_out, with the leader's until and why.
//
// The text changes only when the decision does (times in it are fixed
// instants, no durations): every change rewrites the member record. A
// lagging standby's shows both positions, so its record is rewritten as
// they change (at most once per position interval each).

// Codes of Status.NotLeading (its first word).
const (
	NotLeadingStopping       = "stopping"
	NotLeadingDisconnected   = "disconnected"
	NotLeadingInitializing   = "initializing"
	NotLeadingTakingOver     = "taking_over"
	NotLeadingDemoting       = "demoting"
	NotLeadingPriorityZero   = "priority_zero"
	NotLeadingHookUnkillable = "hook_unkillable"
	NotLeadingStartupDemote  = "out_startup_demote"
	NotLeadingJoinRefused    = "join_refused"
	NotLeadingUnhealthy      = "unhealthy"
	NotLeadingFencingFailed  = "fencing_failed"
	NotLeadingLagging        = "lagging"
	NotLeadingBackoff        = "backoff"
	NotLeadingCeded          = "ceded"
	NotLeadingStandingAside  = "standing_aside"
	NotLeadingPaused         = "paused"
	NotLeadingStandby        = "standby"
	// NotLeadingHeldOut is shown by `failoverd status` for a standby the
	// leader holds out of its candidates after a failed handover.
	NotLeadingHeldOut = "held_out"
)

// setback is the last failed takeover, for status.
type setback struct {
	label  string // backoff's why: "fencing_failed", "promote_failed"...
	err    string // the last error it showed
	target string // fencing_failed: the leader it could not fence, id@epoch
	// fencing_failed: that leader's node id and epoch
	targetID string
	epoch    int64
	since    time.Time // the first of the failures in a row with this label and target
}

// noteSetback records a failed takeover with label (backoffWith); the term
// is still held, and lastErr says what failed.
func (c *Controller) noteSetback(label string, now time.Time) {
	l := &c.l
	sb := &l.setback
	target, targetID, epoch := "", "", int64(0)
	if tm := l.term; label == "fencing_failed" && tm != nil && tm.prev != nil {
		target, targetID, epoch = fmt.Sprintf("%s@%d", tm.prev.NodeID, tm.prev.Epoch), tm.prev.NodeID, tm.prev.Epoch
	}
	if l.failures == 1 || sb.label != label || sb.target != target {
		sb.since = now
	}
	sb.label, sb.err, sb.target, sb.targetID, sb.epoch = label, l.lastErr, target, targetID, epoch
}

// fenceSucceeded ends a streak of failed fences: a takeover of this node
// fenced (or needed no fence), so that streak no longer says why it does
// not lead.
func (c *Controller) fenceSucceeded() {
	if sb := &c.l.setback; sb.label == "fencing_failed" {
		*sb = setback{}
	}
}

// fencingStreak is the reason of a node out of a takeover while the
// streak of failed fences stands: failures in a row since the last
// promotion of this node, the last of them a fence of the same target,
// and no promoted leader other than that target seen since (when the
// leader is watched): another leader is a new target ("": no such streak).
// joined says whether the node is back in the election.
func (c *Controller) fencingStreak(joined bool) string {
	l := &c.l
	sb := l.setback
	if l.failures == 0 || sb.label != "fencing_failed" {
		return ""
	}
	if ld := l.follow.leader; ld != nil && (ld.NodeID != sb.targetID || ld.Epoch != sb.epoch) {
		return "" // someone else took over since: a new target
	}
	next := "joining the election again"
	if joined {
		next = "in the election again, trying again"
	}
	return why(NotLeadingFencingFailed, "fencing %s failing since %s: %s; %s", sb.target, stamp(sb.since), sb.err, next)
}

// readHealth takes the health monitor's last change.
func (c *Controller) readHealth() {
	l := &c.l
	h := healthcheck.State(c.healthNow.Load())
	msg := ""
	if p := c.healthErr.Load(); p != nil {
		msg = *p
	}
	if h != l.health || l.healthAt.IsZero() {
		l.healthAt = time.Now()
	}
	l.health, l.healthErr = h, msg
}

// stamp formats an instant of a NotLeading text.
// mayBePrimary reports whether a NotLeading reason says the service may
// still act as primary (a hook outlived SIGKILL, the startup demote
// failed): no other reason replaces it.
func mayBePrimary(reason string) bool {
	code, _, _ := strings.Cut(reason, ":")
	return code == NotLeadingHookUnkillable || code == NotLeadingStartupDemote
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func why(code, format string, args ...any) string {
	return code + ": " + fmt.Sprintf(format, args...)
}

// decision is the loop's decision about the election at one step.
type decision struct {
	join  bool      // campaign
	cause *endCause // !join: the cause a candidacy ends with (nil: none ends)
	why   string    // Status.NotLeading when the node is in no term
}

// want reports whether this node may campaign now, and if not, why (the
// cause a candidacy is ended with).
func (c *Controller) want(now time.Time) (bool, *endCause) {
	v := c.decide(now)
	return v.join, v.cause
}

// decide is the loop's decision at now: whether this node campaigns, and
// why it does not lead (see the top of this file for the grounds).
func (c *Controller) decide(now time.Time) decision {
	l := &c.l
	out := func(cause *endCause, code, format string, args ...any) decision {
		return decision{cause: cause, why: why(code, format, args...)}
	}
	switch {
	case l.stopping:
		return out(causeShutdown, NotLeadingStopping, "the daemon is stopping")
	case l.stuck != nil:
		return out(causeStuck, NotLeadingHookUnkillable, "since %s: %s", stamp(l.stuck.since), l.stuck.msg)
	case !l.startup.done && l.startup.failures > 0:
		return out(nil, NotLeadingStartupDemote, "%s; next try at %s", l.startup.msg, stamp(l.startup.retryAt))
	case c.priority == 0 && !c.keepsWhilePaused():
		return out(causeNeverLead, NotLeadingPriorityZero, "node.priority is 0: this node never campaigns")
	case l.health != healthcheck.Healthy && !c.keepsUnhealthy(now):
		v := out(causeUnhealthy, NotLeadingUnhealthy, "health %s since %s", l.health, stamp(l.healthAt))
		if l.healthErr != "" {
			v.why += ": " + l.healthErr
		}
		return v
	case l.joinChecked && l.joinErr != nil:
		return out(causeRefused, NotLeadingJoinRefused, "%v", l.joinErr)
	case now.Before(l.cededUntil):
		return decision{cause: causeCeded, why: c.ceded()}
	case now.Before(l.standAside.until):
		to := "another node"
		if r := l.choice.standing; r != nil && r.Key() == l.standAside.key {
			to = r.To
		}
		return out(causeFailover, NotLeadingStandingAside, "a failover request to %s stands; out of the election until %s", to, stamp(l.standAside.until))
	case c.pausedOut(now):
		p := l.pause.cur
		v := out(causePaused, NotLeadingPaused, "the cluster is paused (by %s at %s", p.By, stamp(p.At))
		if p.Reason != "" {
			v.why += ": " + p.Reason
		}
		v.why += "): no automatic promotion"
		return v
	// Not yet: no candidacy was ever started (none of these comes back).
	case !l.startup.done && !l.pause.known:
		return out(nil, NotLeadingInitializing, "waiting for the pause record before the startup demote")
	case !l.startup.done:
		return out(nil, NotLeadingInitializing, "the startup demote has not succeeded yet")
	case !l.pause.known:
		return out(nil, NotLeadingInitializing, "waiting for the pause record")
	case !l.joinChecked && l.joinProblem != "":
		return out(causeRefused, NotLeadingInitializing, "the join checks could not run yet: %s", l.joinProblem)
	case !l.joinChecked:
		return out(causeRefused, NotLeadingInitializing, "waiting for the join checks (unique node id, election mode)")
	case now.Before(l.candRetry):
		return out(nil, NotLeadingInitializing, "joining the election")
	}
	// It campaigns; a lagging node's win would decline to promote.
	joined := l.cand != nil && !l.cand.cancelled
	v := decision{join: true}
	f := &l.follow
	switch ld, lag, streak := f.leader, c.lagging(), c.fencingStreak(joined); {
	case lag != "":
		v.why = why(NotLeadingLagging, "%s", lag)
	case streak != "":
		v.why = streak
	case !joined:
		v.why = why(NotLeadingInitializing, "joining the election")
	case ld != nil && ld.NodeID != c.cfg.NodeID:
		v.why = why(NotLeadingStandby, "in the election; %s leads (epoch %d)", ld.NodeID, ld.Epoch)
	case f.known && ld == nil:
		v.why = why(NotLeadingStandby, "in the election; no promoted leader seen")
	default:
		v.why = why(NotLeadingStandby, "in the election")
	}
	return v
}

// notLeading is Status.NotLeading: what the node does in a term, or else
// the loop's last decision.
func (c *Controller) notLeading() string {
	l := &c.l
	switch {
	case l.state == StateLeader:
		return ""
	case l.state == StateStopped:
		return why(NotLeadingStopping, "the daemon is stopping")
	case l.decision.cause == causeShutdown:
		return l.decision.why
	case l.state == StateInitializing:
		return why(NotLeadingInitializing, "starting")
	case l.state == StateFencing || l.state == StatePromoting:
		return c.takingOver()
	case l.state == StateDemoting && l.term != nil:
		return why(NotLeadingDemoting, "its term (epoch %d) ended (%s): the demote hook runs", l.term.epoch, l.term.endReason)
	}
	return l.decision.why
}

// takingOver is the reason of a node in a takeover: elected, not promoted
// yet.
func (c *Controller) takingOver() string {
	l := &c.l
	tm := l.term
	if tm == nil {
		return why(NotLeadingTakingOver, "elected")
	}
	step := "reading the breadcrumb"
	switch tm.phase {
	case phFencePrev, phFencingPrev, phFencing:
		step = fmt.Sprintf("fencing %s@%d", tm.prev.NodeID, tm.prev.Epoch)
		if sb := l.setback; l.failures > 0 && sb.label == "fencing_failed" && sb.target == step[len("fencing "):] {
			step += fmt.Sprintf(" (failing since %s: %s)", stamp(sb.since), sb.err)
		}
	case phPrePromote, phPrePromoting:
		step = "the pre_promote hook runs"
	case phWriting:
		step = "writing the breadcrumb"
	case phWaitPromote, phPromoting:
		step = "the promote hook runs"
	case phEndDemote, phEndDemoting, phFinishing, phRelease:
		step = "giving the term back"
	}
	return why(NotLeadingTakingOver, "elected at %s (epoch %d): %s", stamp(tm.wonAt), tm.epoch, step)
}

// ceded is the reason of a node kept out until cededUntil.
func (c *Controller) ceded() string {
	l := &c.l
	until := stamp(l.cededUntil)
	sb := l.setback
	switch l.cededBy {
	case causeBackoff, causeVeto:
		switch sb.label {
		case "fencing_failed":
			return why(NotLeadingFencingFailed, "fencing %s failing since %s: %s; out of the election until %s", sb.target, stamp(sb.since), sb.err, until)
		case declineLagging:
			return why(NotLeadingLagging, "%s; out of the election until %s", strings.TrimPrefix(sb.err, "not promoting: this node is lagging: "), until)
		}
		return why(NotLeadingBackoff, "%s since %s: %s; out of the election until %s", sb.label, stamp(sb.since), sb.err, until)
	case causeOperator:
		return why(NotLeadingCeded, "demoted on request (an operator's demote or a successor's fence); out of the election until %s", until)
	}
	return why(NotLeadingCeded, "ceded the leadership; out of the election until %s", until)
}

// lagging says why this node is not eligible under election.max_lag
// against the promoted leader's position, as the leader's preemption
// judges it ("": it is, or it cannot be judged).
func (c *Controller) lagging() string {
	ld := c.l.follow.leader
	if c.cfg.MaxLag == nil || ld == nil || ld.NodeID == c.cfg.NodeID || ld.Position == nil {
		return ""
	}
	own, limit := c.l.pos.value, *c.cfg.MaxLag
	switch {
	case own == nil:
		return fmt.Sprintf("its position is unknown while election.max_lag is set (%d)", limit)
	case *ld.Position-*own > limit:
		return fmt.Sprintf("position %d is %d behind the leader %s's %d (election.max_lag %d)", *own, *ld.Position-*own, ld.NodeID, *ld.Position, limit)
	}
	return ""
}

// holds is Status.Holds at now: the nodes held out of this node's
// candidates after a failed handover, "<node> until <time>: <why>", by
// node id, joined by "; ".
func (c *Controller) holds(now time.Time) string {
	var out []string
	for id, h := range c.l.choice.failed {
		if now.Before(h.until) {
			out = append(out, fmt.Sprintf("%s until %s: %s", id, stamp(h.until), strings.ReplaceAll(h.why, ";", ",")))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
