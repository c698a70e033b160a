package zkcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/zk"
)

// ReadLeaderPosition reads the last position a promoted leader published
// (nil, nil: none yet), outside any term: for status displays.
func (s *Store) ReadLeaderPosition(ctx context.Context) (*cluster.LeaderPosition, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	p, _, err := s.getLeaderPosition(ctx, sess)
	return p, err
}

// errUnreadablePosition marks a LeaderPosition record that cannot be
// decoded.
var errUnreadablePosition = errors.New("not a leader position")

// getLeaderPosition reads the LeaderPosition record on sess with its stat
// (nil: none). A record that cannot be decoded is an error, not "none": a
// candidate must not judge its lag against nothing when the leader's last
// position is merely unreadable.
func (s *Store) getLeaderPosition(ctx context.Context, sess *zk.Session) (*cluster.LeaderPosition, zk.Stat, error) {
	path := s.layout.LeaderPosition()
	data, st, err := sess.Get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, zk.Stat{}, nil
	}
	if err != nil {
		return nil, zk.Stat{}, fmt.Errorf("reading the leader position %s: %w", path, err)
	}
	var p cluster.LeaderPosition
	if err := json.Unmarshal(data, &p); err != nil || p.Position < 0 {
		return nil, st, fmt.Errorf("the leader position %s is unreadable (%q): %w", path, data, errUnreadablePosition)
	}
	return &p, st, nil
}

// ReadMembers reads every member record on the term's own session (see
// Store.members).
func (t *term) ReadMembers(ctx context.Context) ([]cluster.Member, error) {
	return t.s.members(ctx, t.l.Session, nil)
}

// ReadLeaderPosition reads the leader position on the term's own session:
// a winner sees what its predecessor wrote before its znode went.
func (t *term) ReadLeaderPosition(ctx context.Context) (*cluster.LeaderPosition, error) {
	p, _, err := t.s.getLeaderPosition(ctx, t.l.Session)
	return p, err
}

// WriteLeaderPosition stores p as the LeaderPosition record, a persistent
// znode, in one multi with the check that the term's election znode
// exists (as the breadcrumb write is guarded): a term that is over writes
// nothing. It is version-checked against the record it read, and refuses
// to replace a record of a later epoch (cluster.ErrStalePosition), so the
// record never goes back to an older leadership. A record that cannot be
// decoded is replaced.
func (t *term) WriteLeaderPosition(ctx context.Context, p cluster.LeaderPosition) error {
	path := t.s.layout.LeaderPosition()
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		var op zk.Op = zk.CreateOp{Path: path, Data: data, Mode: zk.Persistent}
		old, st, err := t.s.getLeaderPosition(ctx, t.l.Session)
		switch {
		case err != nil && !errors.Is(err, errUnreadablePosition):
			return fmt.Errorf("writing the leader position of epoch %d: %w", p.Epoch, err)
		case old != nil && old.Epoch > p.Epoch:
			return fmt.Errorf("writing the leader position %s of epoch %d: %w (epoch %d)", path, p.Epoch, cluster.ErrStalePosition, old.Epoch)
		case old != nil || err != nil: // ours, or unreadable: replace it at the version read
			op = zk.SetOp{Path: path, Data: data, Version: st.Version}
		}
		err = t.l.Session.Multi(ctx, zk.CheckOp{Path: t.l.Path, Version: -1}, op)
		if (errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists)) && attempt < 3 {
			continue // changed since we read it: judge again
		}
		if err != nil {
			return fmt.Errorf("writing the leader position %s (guarded by %s): %w", path, t.l.Path, err)
		}
		return nil
	}
}
