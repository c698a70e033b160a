package zkcluster

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// Entry names the term's election znode: its path, its owner (the
// session that created it, its ephemeralOwner) and its czxid, the epoch.
func (t *term) Entry() cluster.Entry {
	return cluster.Entry{Key: t.l.Path, Owner: t.l.Session.ID(), Created: t.l.Epoch}
}

// RemoveEntry deletes the election znode e names, only if it is still that
// znode: after a sync, it must exist with czxid e.Created and
// ephemeralOwner e.Owner, and it is deleted at the version read. ZooKeeper
// checks neither the owner nor the czxid on a delete, so they are read
// first; in the round trip between the read and the delete, the path could
// name another znode only if the znode went and one was created again at
// the same path, which a fair-mode name rules out: it carries the creating
// elector's GUID and a sequence number ZooKeeper never hands out twice
// under the election directory.
//
// The unfair lock is never removed (cluster.ErrNoRemove): its path is
// shared, and a lock created again has another czxid but version 0, as
// ours. A delete whose answer did not come in time is not over: the
// client resends it after a reconnect, when the lock may be the next
// leader's, and the versioned delete would then remove it. The restarted
// node waits out the old session instead.
func (k kv) RemoveEntry(ctx context.Context, e cluster.Entry) error {
	if election.IsUnfairLock(e.Key) {
		return fmt.Errorf("%w: %s is the unfair-mode lock, shared by every candidate", cluster.ErrNoRemove, e.Key)
	}
	sess, st, err := k.owned(ctx, e)
	if err != nil {
		return err
	}
	if err := sess.Delete(ctx, e.Key, st.Version); err != nil {
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
			return fmt.Errorf("%w: %s: %v", cluster.ErrEntryChanged, e, err)
		}
		return fmt.Errorf("deleting %s: %w", e.Key, err)
	}
	return nil
}

// owned reads e's znode on the node's session: an error wrapping
// ErrEntryChanged when it is gone, or another (creation or owner).
func (k kv) owned(ctx context.Context, e cluster.Entry) (*zk.Session, zk.Stat, error) {
	sess, err := k.s.session(ctx)
	if err != nil {
		return nil, zk.Stat{}, err
	}
	st, ok, err := election.StillOwned(ctx, sess, e.Key, e.Created, e.Owner)
	if err != nil {
		return nil, zk.Stat{}, fmt.Errorf("reading %s: %w", e.Key, err)
	}
	if !ok {
		now := "gone"
		if st.Czxid != 0 {
			now = fmt.Sprintf("czxid %d, owner %x", st.Czxid, st.EphemeralOwner)
		}
		return nil, zk.Stat{}, fmt.Errorf("%w: %s is %s", cluster.ErrEntryChanged, e, now)
	}
	return sess, st, nil
}

// EndTerm (cluster.TermEnder) deletes the election znode b names at the
// data version b.Version, one write that ZooKeeper refuses once a
// heartbeat moved the version or the znode is gone. Fair-mode names carry
// a sequence number and are never reused; the czxid read before tells a
// wrong Created apart.
func (k kv) EndTerm(ctx context.Context, b cluster.Beat) error {
	if election.IsUnfairLock(b.Entry.Key) {
		return fmt.Errorf("%w: %s is the unfair-mode lock, shared by every candidate", cluster.ErrNoEndTerm, b.Entry.Key)
	}
	e := b.Entry
	if b.Version < 0 || b.Version > math.MaxInt32 {
		return fmt.Errorf("%w: version %d of %s", cluster.ErrBeatMoved, b.Version, e.Key)
	}
	sess, st, err := k.owned(ctx, e)
	if err != nil {
		return err
	}
	if int64(st.Version) != b.Version {
		return fmt.Errorf("%w: %s is at version %d, not %d", cluster.ErrBeatMoved, e, st.Version, b.Version)
	}
	switch err := sess.Delete(ctx, e.Key, int32(b.Version)); {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrBadVersion):
		return fmt.Errorf("%w: %s moved past version %d", cluster.ErrBeatMoved, e, b.Version)
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("%w: %s: %v", cluster.ErrEntryChanged, e, err)
	default:
		return fmt.Errorf("deleting %s: %w", e.Key, err)
	}
}
