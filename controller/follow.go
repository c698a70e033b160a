package controller

import (
	"context"
	"errors"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/internal/ids"
)

// The follow hook points the local service at the promoted leader (a
// replica's REPLICAOF, a standby's primary_conninfo) on every node that is
// not the leader. It is a third hook in the one hook slot, so it never runs
// next to a promote or a demote, and only between terms: a node that wins
// the election while its follow runs stops it (SIGTERM, then SIGKILL after
// the kill grace) and its promote waits for the slot, as a promote waits
// for a demote; the lease is looked at again right before the promote
// starts (startNextHook), and a follow that outlives its SIGKILL blocks
// every hook and ends the leadership like any stuck hook.
//
// The leader comes from Records.WatchLeader (cluster.LeaderOf: a member in
// leader state whose id and epoch the breadcrumb names), so a node still
// fencing or promoting, or whose promote failed, is never followed. The
// watch only feeds leaderSeen events; the loop alone decides:
//   - a run is due once at start-up and after each demote of this node,
//     whenever the leader changes (cluster.Leader.Same), and when this
//     node's service turns healthy after a failed health check (a
//     restarted service may have forgotten whom it replicates from); it
//     runs as soon as a leader other than this node is known;
//   - a failed or timed-out run is retried after 1s, doubling to 30s,
//     until it succeeds or the leader changes (the newest wins; a run for
//     a leader that is no longer the leader is stopped);
//   - with no leader for NoLeaderAfter, it runs once with no leader
//     (reason no_leader), and again only after a leader was seen since.

// Follow hook reasons (FAILOVERD_REASON). A retry keeps its run's reason.
const (
	reasonFollowStartup = "startup"        // the first leader known after start
	reasonLeaderChanged = "leader_changed" // a new promoted leader
	reasonDemoted       = "demoted"        // after this node's own demote
	reasonNoLeader      = "no_leader"      // no leader for NoLeaderAfter
	reasonRecovered     = "recovered"      // this node's service is healthy again
)

// The follow hook's retry back-off.
const (
	followRetryMin = time.Second
	followRetryMax = 30 * time.Second
)

// followState is the loop's view of the leader and of the follow hook.
type followState struct {
	known     bool            // the watch reported at least once
	leader    *cluster.Leader // the promoted leader as last reported (nil: none)
	bad       string          // why leader cannot be handed to the hook ("": it can)
	noneSince time.Time       // when the leader was last seen to go (leader nil)
	due       bool            // a run towards the leader is due once there is one
	reason    string          // that run's FAILOVERD_REASON
	tried     bool            // a run with that reason started
	parked    bool            // the no-leader run succeeded since a leader was last seen
	failures  int             // failed runs of what is due now
	retryAt   time.Time       // not before
	following *cluster.Leader // the leader of the last successful run (nil: none, or parked)
	since     time.Time       // when the last successful run ended

	// The leader's position as its record showed it, and when this node
	// first saw it advance after its own position last changed (zero or
	// not after pos.at: not since), for the stall rule (notfollowing.go).
	leaderPos     *int64
	leaderPosSeen time.Time
}

// watchLeader feeds the leader watch's reports to the loop until ctx ends.
func (c *Controller) watchLeader(ctx context.Context) {
	for ctx.Err() == nil {
		err := c.rec.WatchLeader(ctx, func(ld *cluster.Leader) { c.send(leaderSeen{leader: ld}) })
		if ctx.Err() == nil {
			c.log.Debug("leader watch ended; watching again", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

// onLeaderSeen records the leader as the watch reports it.
func (c *Controller) onLeaderSeen(ld *cluster.Leader) {
	f := &c.l.follow
	first := !f.known
	f.known = true
	c.trackLeaderPosition(ld, !first && ld.Same(f.leader))
	if !first && ld.Same(f.leader) {
		f.leader = ld // the same leadership; keep its freshest fields
		if ld != nil && ld.NodeID != c.cfg.NodeID {
			f.bad = ""
			if err := checkLeader(ld); err != nil {
				f.bad = err.Error()
			}
		}
		return
	}
	// A run that waited for a leader (start-up, after a demote) keeps its
	// reason; otherwise the leader changed.
	keepReason := f.due && !f.tried && (f.reason == reasonFollowStartup || f.reason == reasonDemoted)
	f.leader, f.bad = ld, ""
	f.failures, f.retryAt = 0, time.Time{} // only the newest is followed
	switch {
	case ld == nil:
		f.noneSince = time.Now()
		c.log.Info("no promoted leader")
		return
	case ld.NodeID == c.cfg.NodeID:
		// This node leads (or a record of its earlier run does): nothing
		// to follow until it demotes (followAfterDemote).
		f.parked, f.due = false, false
		return
	}
	f.parked = false
	if err := checkLeader(ld); err != nil {
		f.bad = err.Error()
		if c.cfg.Follow == nil {
			return // watched for the stall rule only
		}
		c.log.Error("the promoted leader's member record cannot be handed to the follow hook; not following it", "leader", ld.NodeID, "leader_epoch", ld.Epoch, "err", err)
	} else {
		c.log.Info("promoted leader seen", "leader", ld.NodeID, "leader_epoch", ld.Epoch, "leader_address", ld.ServiceAddress)
	}
	if !keepReason {
		f.reason, f.tried = reasonLeaderChanged, false
	}
	f.due = true
}

// checkLeader applies the rules the breadcrumb applies to the same values
// (internal/ids): a member record is read from the coordination service,
// and what the hook gets must be safe in an environment variable.
func checkLeader(ld *cluster.Leader) error {
	switch {
	case ids.CheckName(ld.NodeID) != nil:
		return errors.New("node id is not a valid node id")
	case !ids.ValidHost(ld.Host):
		return errors.New("host is not a host name or IP address")
	case ld.ServiceAddress != "" && ids.CheckHostPort(ld.ServiceAddress) != nil:
		return errors.New("service_address is not host:port")
	}
	return nil
}

// followAfterDemote: this node's demote changed the service's role, so it
// follows the leader again as soon as one (other than itself) is known.
func (c *Controller) followAfterDemote() {
	f := &c.l.follow
	f.due, f.reason, f.tried, f.failures, f.retryAt = true, reasonDemoted, false, 0, time.Time{}
}

// followAfterRecovery makes a run due when the service is healthy again
// after it was not: a service restarted under a running failoverd (a
// Redis whose REPLICAOF was not persisted, a PostgreSQL standby rebuilt)
// comes back pointed at nobody, or at whom its own config names. A run
// already due keeps its reason.
func (c *Controller) followAfterRecovery() {
	f := &c.l.follow
	if f.due && !f.tried {
		return
	}
	f.due, f.reason, f.tried, f.failures, f.retryAt = true, reasonRecovered, false, 0, time.Time{}
}

// followWanted returns the run the follow hook should make now, if any:
// towards the leader (target non-nil), or the no-leader run (target nil).
// It does not look at whether this node may run a hook now.
func (c *Controller) followWanted(now time.Time) (target *cluster.Leader, reason string, ok bool) {
	f := &c.l.follow
	if c.cfg.Follow == nil || !f.known {
		return nil, "", false
	}
	switch ld := f.leader; {
	case ld != nil:
		if ld.NodeID == c.cfg.NodeID || f.bad != "" || !f.due {
			return nil, "", false
		}
		return ld, f.reason, true
	case c.cfg.Follow.NoLeaderAfter > 0 && !f.parked && !now.Before(f.noneSince.Add(c.cfg.Follow.NoLeaderAfter)):
		return nil, reasonNoLeader, true
	}
	return nil, "", false
}

// followMayRun reports whether this node may run the follow hook now:
// between terms (never while elected, fencing, promoting, leading or
// demoting), after the startup demote, with no stuck hook, no demote
// request waiting and no graceful stop under way. While the cluster is
// paused it runs towards a promoted leader only (startFollow): after a
// failover --to during the pause the replicas follow the new primary, but
// no service is parked for want of a leader. A node whose startup demote
// the pause deferred (its service may still be the old primary) never
// follows before that demote ran.
func (c *Controller) followMayRun() bool {
	l := &c.l
	return l.term == nil && l.startup.done && l.stuck == nil && !l.stopping && !c.waitersNeedHook()
}

// startFollow starts the follow hook in the free hook slot if a run is
// due and its back-off is over.
func (c *Controller) startFollow(now time.Time) {
	target, reason, ok := c.followWanted(now)
	if !ok || !c.followMayRun() || now.Before(c.l.follow.retryAt) || target == nil && c.paused() {
		return
	}
	if target != nil {
		c.l.follow.tried = true
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	c.startHook(&hookRun{name: "follow", purpose: forFollow, cancel: cancel, env: HookEnv{Reason: reason, Leader: target}}, ctx)
}

// errFollowStopped is the cause a follow is stopped with.
var errFollowStopped = errors.New("controller: follow no longer wanted")

// stopUnwantedFollow stops a running follow that this node no longer
// wants: it was elected (the promote must not wait for a whole follow
// timeout), a demote request or a graceful stop waits for the slot, or
// the leader changed (only the newest is followed).
func (c *Controller) stopUnwantedFollow(now time.Time) {
	h := c.l.hook
	if h == nil || h.purpose != forFollow || h.cancelled {
		return
	}
	why := ""
	target, _, ok := c.followWanted(now)
	switch {
	case c.l.term != nil:
		why = "elected"
	case c.l.stopping:
		why = "shutdown"
	case c.waitersNeedHook():
		why = "demote requested"
	case !ok || !target.Same(h.env.Leader):
		why = "leader changed"
	default:
		return
	}
	c.log.Info("stopping the follow hook", "why", why, "leader", leaderID(h.env.Leader), "leader_epoch", leaderEpoch(h.env.Leader))
	h.cancelled = true
	h.cancel(errFollowStopped)
}

// onFollowDone records a follow run's end.
func (c *Controller) onFollowDone(h *hookRun, err error) {
	f := &c.l.follow
	h.cancel(nil)
	if err != nil && h.cancelled {
		return // stopped by us: not a failure; whatever is wanted now runs next
	}
	result := "success"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		result = "timeout"
	case err != nil:
		result = "failure"
	}
	c.metrics.FollowRun(result)
	target, _, ok := c.followWanted(time.Now())
	current := ok && target.Same(h.env.Leader)
	if err != nil {
		if current {
			f.failures++
			d := min(followRetryMin<<min(f.failures-1, 16), followRetryMax)
			f.retryAt = time.Now().Add(d)
			c.log.Error("follow hook failed; retrying", "reason", h.env.Reason, "leader", leaderID(h.env.Leader), "leader_epoch", leaderEpoch(h.env.Leader),
				"err", err, "retry_in", d.String(), "failures", f.failures)
		}
		return
	}
	f.failures, f.retryAt = 0, time.Time{}
	f.following, f.since = h.env.Leader, time.Now()
	c.metrics.Following(leaderEpoch(h.env.Leader))
	if !current {
		return // the leader changed meanwhile: that run is still due
	}
	if h.env.Leader == nil {
		f.parked = true
		c.log.Info("no promoted leader: the follow hook ran without one")
		return
	}
	f.due = false
	c.log.Info("following the promoted leader", "leader", h.env.Leader.NodeID, "leader_epoch", h.env.Leader.Epoch)
}

// considerFollow adds the follow hook's next deadline to the loop's timer:
// the end of its back-off, or the moment no leader has lasted long enough.
func (c *Controller) considerFollow(consider func(time.Time)) {
	f := &c.l.follow
	if c.cfg.Follow == nil || !f.known {
		return
	}
	consider(f.retryAt)
	if f.leader == nil && c.cfg.Follow.NoLeaderAfter > 0 && !f.parked {
		consider(f.noneSince.Add(c.cfg.Follow.NoLeaderAfter))
	}
}

func leaderID(ld *cluster.Leader) string {
	if ld == nil {
		return ""
	}
	return ld.NodeID
}

func leaderEpoch(ld *cluster.Leader) int64 {
	if ld == nil {
		return 0
	}
	return ld.Epoch
}

// stopFollowing forgets the leader this node followed: it is being elected
// itself, and status, its member record and the metric must not show it
// following another node while it leads.
func (c *Controller) stopFollowing() {
	f := &c.l.follow
	if f.following == nil {
		return
	}
	f.following, f.since = nil, time.Time{}
	c.metrics.Following(0)
}
