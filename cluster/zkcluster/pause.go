package zkcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/zk"
)

// --- maintenance mode (the pause record) ---
//
// The pause record is a persistent znode: a pause outlives every session
// (the CLI's, the admin API's) and every daemon restart, and only an
// operator's resume ends it.

// SetPause pauses the cluster with p unless it is paused already. It
// returns the pause in force afterwards (p, or the earlier one: pausing
// twice keeps who paused first, and since when) and whether this call
// created it.
func (s *Store) SetPause(ctx context.Context, p cluster.Pause) (cluster.Pause, bool, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return cluster.Pause{}, false, err
	}
	data, err := json.Marshal(p)
	if err != nil {
		return cluster.Pause{}, false, err
	}
	path := s.layout.Pause()
	for attempt := 0; ; attempt++ {
		if err := sess.EnsurePath(ctx, s.layout.Dir()); err != nil {
			return cluster.Pause{}, false, fmt.Errorf("creating %s: %w", s.layout.Dir(), err)
		}
		_, _, err := sess.Create(ctx, path, data, zk.Persistent)
		if err == nil {
			return p, true, nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return cluster.Pause{}, false, fmt.Errorf("writing the pause record %s: %w", path, err)
		}
		cur, err := s.ReadPause(ctx)
		if err != nil {
			return cluster.Pause{}, false, err
		}
		if cur != nil {
			return *cur, false, nil
		}
		if attempt >= 3 {
			return cluster.Pause{}, false, fmt.Errorf("writing the pause record %s: it comes and goes (another operator resumes)", path)
		}
	}
}

// ClearPause ends the pause. It reports whether the cluster was paused;
// resuming a cluster that is not paused is not an error.
func (s *Store) ClearPause(ctx context.Context) (bool, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return false, err
	}
	path := s.layout.Pause()
	err = sess.Delete(ctx, path, -1)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting the pause record %s: %w", path, err)
	}
	return true, nil
}

// ReadPause returns the pause in force (nil: the cluster is not paused).
func (s *Store) ReadPause(ctx context.Context) (*cluster.Pause, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.readPause(ctx, sess, nil)
}

// WatchPause calls fn with the pause in force (nil: none) now and after
// every change, until ctx ends; it returns ctx's error. It never polls: it
// re-arms its watch after every event and on every new session (watchReads),
// and a read that fails is retried without reaching fn, so while the
// connection is down the last value delivered stands. Consecutive equal
// values are delivered once.
func (s *Store) WatchPause(ctx context.Context, fn func(*cluster.Pause)) error {
	return watchReads(ctx, s, s.readPause, cluster.SamePause, fn)
}

// readPause reads the pause record; with w, it arms a watch on it (on its
// data, or on its creation when there is none) unless one is armed.
func (s *Store) readPause(ctx context.Context, sess *zk.Session, w *watchSet) (*cluster.Pause, error) {
	path := s.layout.Pause()
	var data []byte
	var err error
	if w == nil || w.armed["pause"] {
		data, _, err = sess.Get(ctx, path)
	} else {
		var ch <-chan zk.Event
		data, _, ch, err = sess.GetW(ctx, path)
		if err == nil {
			w.arm("pause", ch)
		}
	}
	if errors.Is(err, zk.ErrNoNode) {
		if w == nil || w.armed["pause"] {
			return nil, nil
		}
		ok, _, ch, err := sess.ExistsW(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("watching the pause record %s: %w", path, err)
		}
		w.arm("pause", ch)
		if ok {
			return s.readPause(ctx, sess, w) // created meanwhile; the exists watch sees its changes
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the pause record %s: %w", path, err)
	}
	return cluster.DecodePause(data), nil
}
