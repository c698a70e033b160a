package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/zk"
)

// setJoinVerdict records the outcome of the join checks; Run campaigns only
// after a nil verdict.
func (c *Controller) setJoinVerdict(err error) {
	c.mu.Lock()
	changed := !c.joinChecked || fmt.Sprint(c.joinErr) != fmt.Sprint(err)
	c.joinChecked, c.joinErr = true, err
	c.setJoinProblemLocked(err)
	c.mu.Unlock()
	if !changed {
		return
	}
	if err != nil {
		c.log.Error("not joining the election", "err", err)
	} else {
		c.log.Info("cluster checks passed: node id unique, election mode matches")
	}
	c.poke(c.wake)
	c.poke(c.memberChanged)
}

// setJoinProblemLocked shows err (the join checks' refusal, or why they
// could not run) as the last error, and once the problem is gone (err nil)
// clears the last error if it still shows it. Call it with c.mu held.
func (c *Controller) setJoinProblemLocked(err error) {
	if err == nil {
		if c.joinProblem != "" && c.lastErr == c.joinProblem {
			c.lastErr = ""
		}
		c.joinProblem = ""
		return
	}
	c.joinProblem = err.Error()
	c.lastErr = c.joinProblem
}

// memberFailure reports a failure to publish the member record or to run
// the join checks (not a verdict: the last verdict stands). Until the first
// verdict it is why this node is not joining, so operators must see it: in
// the last error, and in a warning at most every memberWarnEvery unless the
// error changes.
func (c *Controller) memberFailure(err error, lastWarn *time.Time, lastMsg *string) {
	c.mu.Lock()
	joined := c.joinChecked && c.joinErr == nil
	c.setJoinProblemLocked(fmt.Errorf("cannot publish the member record or check the cluster: %w", err))
	c.mu.Unlock()
	if msg := err.Error(); msg != *lastMsg || time.Since(*lastWarn) >= memberWarnEvery {
		*lastWarn, *lastMsg = time.Now(), msg
		if joined {
			c.log.Warn("publishing member status failed; staying in the election", "err", err)
		} else {
			c.log.Warn("publishing member status failed: not joining the election until it works", "err", err)
		}
		return
	}
	c.log.Debug("publishing member status failed", "err", err)
}

// memberWarnEvery bounds how often a repeated member failure is logged.
const memberWarnEvery = 30 * time.Second

// joinVerdict reports whether err is a verdict (nil or a refusal) rather
// than a failure to check (ZooKeeper unavailable: keep the last verdict).
func joinVerdict(err error) bool {
	var d *cluster.DuplicateIDError
	var m *cluster.ModeMismatchError
	return err == nil || errors.As(err, &d) || errors.As(err, &m)
}

// memberDebounce delays a member status write after a change.
const memberDebounce = 25 * time.Millisecond

// publishMember keeps members/<node-id> up to date: an ephemeral znode of
// the current session, rewritten on every change. On every session it also
// checks the cluster record, and before every write that no other process
// holds our member record; the verdict gates joining the election.
func (c *Controller) publishMember(ctx context.Context) {
	dir := c.layout().MembersDir()
	path := c.layout().Member(c.cfg.NodeID)
	var modeChecked *zk.Session
	var lastWarn time.Time
	var lastMsg string
	for ctx.Err() == nil {
		sess, err := c.client.Session(ctx)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		err = c.writeMember(ctx, sess, dir, path)
		if err == nil {
			// The directory first: a node must not record its mode over
			// a cluster whose nodes of the other mode are campaigning.
			err = c.checkElectionDir(ctx, sess)
		}
		if err == nil && modeChecked != sess {
			if err = c.checkClusterRecord(ctx, sess); err == nil {
				modeChecked = sess
			}
		}
		if joinVerdict(err) {
			c.setJoinVerdict(err)
		}
		if err != nil {
			if ctx.Err() == nil {
				if !joinVerdict(err) {
					c.memberFailure(err, &lastWarn, &lastMsg)
				}
				sleepCtx(ctx, time.Second) // a duplicate is polled for too
			}
			continue
		}
		_, changed := sess.State()
		select {
		case <-ctx.Done():
		case <-c.memberChanged:
			// Coalesce bursts (standby → fencing → promoting → leader) and keep
			// this write off the session while a takeover reads and writes:
			// ZooKeeper answers a session's requests in order.
			sleepCtx(ctx, memberDebounce)
		case <-changed:
		case <-sess.Done():
		case <-time.After(30 * time.Second):
		}
	}
}

// writeMember writes our member record. A record owned by another session
// is replaced only when it carries our instance id (an earlier session of
// this very process); one of another live process is a duplicate node id.
func (c *Controller) writeMember(ctx context.Context, sess *zk.Session, dir, path string) error {
	data := c.member()
	old, st, err := sess.Get(ctx, path)
	switch {
	case err == nil && st.EphemeralOwner == sess.ID():
		_, err = sess.Set(ctx, path, data, -1)
		return err
	case err == nil:
		var other Status
		_ = json.Unmarshal(old, &other)
		if st.EphemeralOwner != 0 && other.Instance != c.instance {
			return &cluster.DuplicateIDError{NodeID: c.cfg.NodeID, Host: other.Host, Instance: other.Instance}
		}
		// Ours from an earlier session, or not ephemeral (no live owner).
		if err := sess.Delete(ctx, path, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	case !errors.Is(err, zk.ErrNoNode):
		return err
	}
	if err := sess.EnsurePath(ctx, dir); err != nil {
		return err
	}
	_, _, err = sess.Create(ctx, path, data, zk.Ephemeral)
	if errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("member record %s created meanwhile: %w", path, err) // looked at on the next round
	}
	return err
}

// checkClusterRecord creates the cluster record if there is none, and
// checks that our election mode is the cluster's.
func (c *Controller) checkClusterRecord(ctx context.Context, sess *zk.Session) error {
	if c.cfg.ElectionMode == "" {
		return nil
	}
	path := c.layout().Config()
	for attempt := 0; ; attempt++ {
		b, _, err := sess.Get(ctx, path)
		if errors.Is(err, zk.ErrNoNode) && attempt < 3 {
			if err := sess.EnsurePath(ctx, c.layout().Dir()); err != nil {
				return err
			}
			rec, _ := json.Marshal(cluster.ClusterRecord{ElectionMode: c.cfg.ElectionMode})
			_, _, err = sess.Create(ctx, path, rec, zk.Persistent)
			if err == nil {
				c.log.Info("cluster record created", "path", path, "election_mode", c.cfg.ElectionMode)
				return nil
			}
			if !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
			continue // another node was first: read its record
		}
		if err != nil {
			return err
		}
		var rec cluster.ClusterRecord
		if err := json.Unmarshal(b, &rec); err != nil || rec.ElectionMode == "" {
			return &cluster.ModeMismatchError{Mode: c.cfg.ElectionMode, Cluster: path, Why: fmt.Sprintf("the cluster record %s is unreadable (%q)", path, b)}
		}
		if rec.ElectionMode != c.cfg.ElectionMode {
			return &cluster.ModeMismatchError{Mode: c.cfg.ElectionMode, Cluster: path, Why: fmt.Sprintf("the cluster record %s says %q", path, rec.ElectionMode)}
		}
		return nil
	}
}

// checkElectionDir refuses to join when the election directory holds
// znodes of the other mode (a node of another mode, or of a version that
// does not know the cluster record, is campaigning).
func (c *Controller) checkElectionDir(ctx context.Context, sess *zk.Session) error {
	if c.cfg.ElectionMode == "" {
		return nil
	}
	dir := c.layout().ElectionDir()
	kids, err := sess.Children(ctx, dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		fair := strings.HasPrefix(k, "c_")
		unfair := k == "lock"
		if (c.cfg.ElectionMode == "fair" && unfair) || (c.cfg.ElectionMode == "unfair" && fair) {
			return &cluster.ModeMismatchError{Mode: c.cfg.ElectionMode, Cluster: c.layout().Config(),
				Why: fmt.Sprintf("the election directory %s holds %s, a znode of the other mode", dir, k)}
		}
	}
	return nil
}
