package zkcluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/zk"
)

// Leader reads the promoted leader once (see cluster.LeaderOf; nil: none).
// An unreadable breadcrumb names nobody: no node promotes past it until an
// operator clears it, so there is no promoted leader either.
func (s *Store) Leader(ctx context.Context) (*cluster.Leader, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.leader(ctx, sess, nil)
}

// WatchLeader calls fn with the promoted leader (nil: none) now and after
// every change of it (another leadership, or any field of the same one),
// until ctx ends; it returns ctx's error. It watches the member records and
// the breadcrumb, and follows the client to new sessions by reading both
// again. Read failures are retried and do not reach fn: a lost connection
// is not "no leader", the last value stands until a read succeeds again.
func (s *Store) WatchLeader(ctx context.Context, fn func(*cluster.Leader)) error {
	return watchReads(ctx, s, s.leader, (*cluster.Leader).Equal, fn)
}

// leader reads the member records, then the breadcrumb, on sess (arming
// w's watches on both when w is set), and picks the promoted leader. The
// breadcrumb is read last because a successor's takeover begins with its
// breadcrumb write, long before its member record says leader: a member
// record in leader state followed by a breadcrumb still naming it means no
// successor had begun when the read ended, so a leader already being fenced
// is not returned (in the other order, the old leader's record could be
// read after the successor wrote its breadcrumb).
func (s *Store) leader(ctx context.Context, sess *zk.Session, w *watchSet) (*cluster.Leader, error) {
	ms, err := s.members(ctx, sess, w)
	if err != nil {
		return nil, err
	}
	bc, err := s.breadcrumbRecord(ctx, sess, w)
	if err != nil {
		return nil, err
	}
	return cluster.LeaderOf(bc, ms), nil
}

// breadcrumbRecord reads the breadcrumb on sess (nil: absent or unreadable).
// With w, it arms w's breadcrumb watch if w does not hold it: on the data
// or, when there is none, on its creation.
func (s *Store) breadcrumbRecord(ctx context.Context, sess *zk.Session, w *watchSet) (*breadcrumb.Record, error) {
	const key = "breadcrumb"
	path := s.layout.Breadcrumb()
	var data []byte
	var err error
	if w == nil || w.armed[key] {
		data, _, err = sess.Get(ctx, path)
	} else {
		var ch <-chan zk.Event
		data, _, ch, err = sess.GetW(ctx, path)
		if err == nil {
			w.arm(key, ch)
		} else if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = sess.ExistsW(ctx, path)
			if err == nil {
				w.arm(key, ch)
				if ok {
					return s.breadcrumbRecord(ctx, sess, w) // created meanwhile
				}
				err = zk.ErrNoNode
			}
		}
	}
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading breadcrumb %s: %w", path, err)
	}
	r, err := breadcrumb.Decode(data)
	if err != nil {
		s.log.Debug("unreadable breadcrumb: no promoted leader", "path", path, "err", err)
		return nil, nil
	}
	return &r, nil
}
