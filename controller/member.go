package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// memberDebounce delays a member record write after a change: bursts
// coalesce, and the write stays off the session while a takeover reads and
// writes (a session's requests are answered in order).
const memberDebounce = 25 * time.Millisecond

// memberWarnEvery bounds how often a repeated member failure is logged.
const memberWarnEvery = 30 * time.Second

// memberOf is the published record of a status: its Member, with the
// typed State and Priority, and ZKConnected the same as Connected.
func memberOf(s Status) cluster.Member {
	m := s.Member
	p := s.Priority
	m.State, m.Priority, m.ZKConnected = string(s.State), &p, s.Connected
	return m
}

// busy reports whether s is in the middle of a takeover or a term's end:
// no member record is written then, so that nothing queues ahead of the
// breadcrumb write or the Finish on the session; the state after it is
// written once.
func busy(s State) bool {
	return s == StateFencing || s == StatePromoting || s == StateDemoting
}

// publishMembers keeps this node's member record up to date, and after
// every write runs the join checks (duplicate node id, election mode),
// whose verdict gates joining the election.
func (c *Controller) publishMembers(ctx context.Context) {
	var lastWarn time.Time
	var lastMsg string
	var remembered time.Time // when the known-member record was last written
	var rememberMsg string
	for ctx.Err() == nil {
		changed := c.rec.SessionChanged()
		st := c.Status()
		if busy(st.State) {
			select {
			case <-ctx.Done():
			case <-c.memberPoke:
			case <-time.After(memberWarnEvery):
			}
			continue
		}
		err := c.rec.PublishMember(ctx, memberOf(st))
		var rec cluster.ClusterRecord
		if err == nil {
			rec, err = c.checkJoin(ctx)
		}
		verdict := joinVerdict(err)
		if ctx.Err() != nil {
			return
		}
		c.send(joinChecked{err: err, verdict: verdict, floor: rec.EpochFloor})
		if err == nil && time.Since(remembered) >= cluster.RememberEvery {
			remembered = c.remember(ctx, st, &rememberMsg)
		}
		if err != nil {
			if !verdict {
				c.warnMember(err, &lastWarn, &lastMsg)
			}
			sleepCtx(ctx, time.Second) // a duplicate is polled for too
			continue
		}
		select {
		case <-ctx.Done():
		case <-c.memberPoke:
			sleepCtx(ctx, memberDebounce)
		case <-changed:
		case <-time.After(memberWarnEvery):
		}
	}
}

// checkJoin runs the join checks for this node's home, and remembers the
// record that admitted it as its home before it may campaign: a node that
// cannot remember where it ran must not join (its next start could join
// another cluster's election unchecked).
func (c *Controller) checkJoin(ctx context.Context) (cluster.ClusterRecord, error) {
	home, _ := c.home.Load()
	rec, err := c.rec.CheckJoin(ctx, c.cfg.ElectionMode, home)
	if err != nil || rec.ID == "" || rec.ID == home {
		return rec, err
	}
	if err := c.home.Joined(rec.ID); err != nil {
		return cluster.ClusterRecord{}, fmt.Errorf("cannot remember the cluster record %s this node joins: %w", rec.ID, err)
	}
	if home != "" {
		c.log.Warn("joined the cluster record this node's cluster was moved to", "record_id", rec.ID, "moved_from", home, "epoch_floor", rec.EpochFloor)
	}
	return rec, nil
}

// remember writes this node's known-member record, which outlives its
// session (a node that went away stays listed as down, with this last
// seen time); it returns when it succeeded (zero: failed, tried again on
// the next round). A failure costs the listing only, never the election:
// it is logged when new, at warn level.
func (c *Controller) remember(ctx context.Context, st Status, lastMsg *string) time.Time {
	now := time.Now()
	err := c.rec.RememberMember(ctx, cluster.KnownMember{NodeID: st.NodeID, Host: st.Host, AdminURL: st.AdminURL,
		Instance: st.Instance, LastSeen: now.UTC()})
	if err != nil {
		if msg := err.Error(); msg != *lastMsg && ctx.Err() == nil {
			*lastMsg = msg
			c.log.Warn("cannot write the known-member record; status may not list this node as down if it goes", "err", err)
		}
		return time.Time{}
	}
	*lastMsg = ""
	return now
}

// warnMember logs a failure to publish the member record or to run the
// join checks: until the first verdict it is why this node is not
// joining, so operators must see it, at most every memberWarnEvery unless
// the error changes.
func (c *Controller) warnMember(err error, lastWarn *time.Time, lastMsg *string) {
	if msg := err.Error(); msg != *lastMsg || time.Since(*lastWarn) >= memberWarnEvery {
		*lastWarn, *lastMsg = time.Now(), msg
		c.log.Warn("publishing member status or checking the cluster failed; not joining the election until a check passed, staying in it if it did", "err", err)
		return
	}
	c.log.Debug("publishing member status failed", "err", err)
}
