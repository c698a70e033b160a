package controller

import (
	"fmt"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// Not following. A standby (state standby or out) whose service does not
// replicate from the current promoted leader is shown in Status.
// NotFollowing (and its member record, so `failoverd status` shows it for
// every node), exported as failoverd_standby_not_following, and answered
// 503 on /standby. It does not follow when, a promoted leader other than
// this node being known:
//
//   - with a follow hook: the hook's last successful run pointed the
//     service at another node or an earlier epoch, or none succeeded yet
//     (NotFollowingTarget), its runs towards the leader fail
//     (NotFollowingFailing), or the leader's member record cannot be
//     handed to the hook (NotFollowingUnusable);
//   - with a position command (with or without a follow hook): the stall
//     rule (NotFollowingStalled). The leader's position advanced (as this
//     node saw the leader's member record) after this node's own last
//     changed, StallAfter went by since that first advance, this node's
//     position still has not changed, and it is behind the leader's. An
//     idle leader (its position still) makes no standby stalled; a
//     standby that moves is not stalled either, only maybe behind (GET
//     /standby?max_lag=N tells).
//
// No leader known, or this node leads or is taking over: nothing to
// follow, so it is not "not following".

// Reasons of Status.NotFollowing (its first word).
const (
	NotFollowingTarget   = "follow_target"
	NotFollowingFailing  = "follow_failing"
	NotFollowingUnusable = "leader_unusable"
	NotFollowingStalled  = "position_stalled"
)

// defaultStallAfter is Config.StallAfter's default.
const defaultStallAfter = 30 * time.Second

// stallAfter is how long an unchanged position makes a standby stalled.
func (c *Controller) stallAfter() time.Duration {
	d := c.cfg.StallAfter
	if d <= 0 {
		d = defaultStallAfter
	}
	return max(d, 3*c.positionInterval())
}

// trackLeaderPosition records the leader's position from its record, and
// when it first advanced after this node's own position last changed;
// same says ld is the leadership seen before.
func (c *Controller) trackLeaderPosition(ld *cluster.Leader, same bool) {
	f := &c.l.follow
	var pos *int64
	if ld != nil {
		pos = ld.Position
	}
	switch {
	case !same || f.leaderPos == nil:
		// A new leadership, or its position just became known: when it
		// last moved is not known.
		f.leaderPos, f.leaderPosSeen = pos, time.Time{}
	case pos == nil:
		f.leaderPos, f.leaderPosSeen = nil, time.Time{}
	case *pos != *f.leaderPos:
		f.leaderPos = pos
		// The stall clock starts at the first advance after this node's
		// own position last changed.
		if !f.leaderPosSeen.After(c.l.pos.at) {
			f.leaderPosSeen = time.Now()
		}
	}
}

// notFollowing is Status.NotFollowing at now. Its text changes only when
// the verdict does (no durations or leader positions in it): every change
// rewrites the member record.
func (c *Controller) notFollowing(now time.Time) string {
	l := &c.l
	f := &l.follow
	ld := f.leader
	if l.state != StateStandby && l.state != StateOut || !f.known || ld == nil || ld.NodeID == c.cfg.NodeID || l.term != nil {
		return ""
	}
	if c.cfg.Follow != nil {
		switch {
		case f.bad != "":
			return fmt.Sprintf("%s: the leader %s@%d cannot be handed to the follow hook: %s", NotFollowingUnusable, ld.NodeID, ld.Epoch, f.bad)
		case f.following.Same(ld):
		case f.failures > 0:
			return fmt.Sprintf("%s: %d failed follow hook runs towards the leader %s@%d (following %s)", NotFollowingFailing,
				f.failures, ld.NodeID, ld.Epoch, followingName(f.following))
		default:
			return fmt.Sprintf("%s: following %s, the leader is %s@%d", NotFollowingTarget, followingName(f.following), ld.NodeID, ld.Epoch)
		}
	}
	if at, ok := c.stallsAt(); ok && !now.Before(at) {
		p := l.pos
		return fmt.Sprintf("%s: position %d unchanged since %s while the leader's advanced", NotFollowingStalled,
			*p.value, p.at.UTC().Format(time.RFC3339))
	}
	return ""
}

// stallsAt is when this node counts as stalled if nothing changes (ok
// false: the stall rule does not apply now).
func (c *Controller) stallsAt() (time.Time, bool) {
	l := &c.l
	f := &l.follow
	p := l.pos
	if p.value == nil || f.leaderPos == nil || *f.leaderPos <= *p.value || !f.leaderPosSeen.After(p.at) {
		return time.Time{}, false
	}
	return f.leaderPosSeen.Add(c.stallAfter()), true
}

// considerStall adds the moment the stall rule starts to hold to the
// loop's timer, so that the status shows it then.
func (c *Controller) considerStall(consider func(time.Time)) {
	if at, ok := c.stallsAt(); ok {
		consider(at)
	}
}

func followingName(ld *cluster.Leader) string {
	if ld == nil {
		return "none"
	}
	return fmt.Sprintf("%s@%d", ld.NodeID, ld.Epoch)
}
