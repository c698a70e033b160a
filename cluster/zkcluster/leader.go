package zkcluster

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	return watchReads(ctx, s, s.leader, sameLeader, fn)
}

// leader reads the member records, then the breadcrumb, on sess (arming
// w's watches on both when w is set), and picks the promoted leader. The
// breadcrumb is read last because a successor's takeover begins with its
// breadcrumb write, long before its member record says leader: a member
// record in leader state followed by a breadcrumb still naming it means no
// successor had begun when the read ended, so a leader already being fenced
// is not returned (in the other order, the old leader's record could be
// read after the successor wrote its breadcrumb).
//
// With w, a member record read afresh in this pass (not from w's cache)
// makes the breadcrumb be read afresh after it as well: its cached value
// is as old as the read that armed its watch, and paired with a newer
// member record it would reverse that order.
func (s *Store) leader(ctx context.Context, sess *zk.Session, w *watchSet) (*cluster.Leader, error) {
	seen := 0
	if w != nil {
		seen = w.fresh
	}
	ms, err := s.members(ctx, sess, w)
	if err != nil {
		return nil, err
	}
	if w != nil && w.fresh != seen {
		delete(w.cache, "breadcrumb")
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
	if c, ok := w.cached(key); ok {
		data = c.data
		if c.absent {
			err = zk.ErrNoNode
		}
	} else if w == nil || w.armed[key] {
		r := s.startBreadcrumbRead(sess)
		var st zk.Stat
		data, st, err = sess.Get(ctx, path)
		r.finish(data, st.Version, err)
	} else {
		var ch <-chan zk.Event
		var st zk.Stat
		mark := sess.EventMark()
		r := s.startBreadcrumbRead(sess)
		data, st, ch, err = sess.GetW(ctx, path)
		r.finish(data, st.Version, err)
		if err == nil {
			w.arm(key, ch)
			s.viewArmed.Store(&armedView{sess: sess, mark: mark})
			w.cache[key] = cachedRead{data: data}
		} else if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = sess.ExistsW(ctx, path)
			if err == nil {
				w.arm(key, ch)
				s.viewArmed.Store(&armedView{sess: sess, mark: mark})
				if ok {
					return s.breadcrumbRecord(ctx, sess, w) // created meanwhile (read uncached: the exists watch stands for it)
				}
				w.cache[key] = cachedRead{absent: true}
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

// sameLeader reports whether a and b are equal in every field (nil: none).
func sameLeader(a, b *cluster.Leader) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Same(b) && a.Host == b.Host && a.ServiceAddress == b.ServiceAddress &&
		a.AdminURL == b.AdminURL && a.Since.Equal(b.Since)
}

// bcRead is a read of the breadcrumb by the leader view, under way or done:
// a new leader's first read may take its answer (prefetchReads).
type bcRead struct {
	sess    *zk.Session
	at      time.Time // when it was sent
	done    chan struct{}
	data    []byte
	version int32
	err     error
}

// startBreadcrumbRead notes a read of the breadcrumb about to be sent on
// sess; finish it with its answer.
func (s *Store) startBreadcrumbRead(sess *zk.Session) *bcRead {
	r := &bcRead{sess: sess, at: time.Now(), done: make(chan struct{})}
	s.bcRead.Store(r)
	s.bcMu.Lock()
	if s.bcPosted != nil {
		close(s.bcPosted)
	}
	s.bcPosted = make(chan struct{})
	s.bcMu.Unlock()
	return r
}

// armedView is a leader view's watch on the breadcrumb, set on sess by a
// read sent after mark.
type armedView struct {
	sess *zk.Session
	mark uint64
}

// viewReadWait bounds how long a new leader's first read waits for the
// read the leader view is about to send (comingBreadcrumbRead); after
// it, the new leader reads itself.
var viewReadWait = 5 * time.Millisecond // a variable for tests

// comingBreadcrumbRead returns the read of the breadcrumb the leader view
// posts on sess after since, when the view's watch on the breadcrumb has
// fired (the session received its event) but the view had not sent its
// read yet: a graceful handover's transaction fires that watch and the
// new leader's one on its predecessor together, and the goroutine that
// hears the second often runs first. It waits at most viewReadWait (nil:
// no such read, none coming, or not in time).
func (s *Store) comingBreadcrumbRead(ctx context.Context, sess *zk.Session, since time.Time) *bcRead {
	a := s.viewArmed.Load()
	if a == nil || a.sess != sess || sess.QuietSince(s.layout.Breadcrumb(), a.mark) {
		return nil // no view watching on sess, or its watch has not fired: no read coming
	}
	t := time.NewTimer(viewReadWait)
	defer t.Stop()
	for {
		s.bcMu.Lock()
		posted := s.bcPosted
		s.bcMu.Unlock()
		if r := s.bcRead.Load(); r != nil && r.sess == sess && r.at.After(since) {
			return r
		}
		if posted == nil {
			return nil
		}
		select {
		case <-posted:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

func (r *bcRead) finish(data []byte, version int32, err error) {
	r.data, r.version, r.err = data, version, err
	close(r.done)
}

// namesTerm decodes r's answer (r must be done) and reports whether it
// names node at epoch. Such an answer may stand for a fresh read at the
// start of that term even if r was sent before the term's predecessor's
// znode went: no state older than that deletion can name node at epoch
// (the czxid of the znode that leads only from then on), since only the
// predecessor's graceful handover (Term.Finish, one transaction with the
// deletion) or the term itself writes that record; and nobody but that
// term can write the breadcrumb after the deletion (every write is guarded
// by the writer's election znode, and the term's is first). So when a
// graceful handover changes the breadcrumb, the leader view's read that
// its watch starts, which travels just ahead of the successor's own
// reads, saves the successor its own.
func (r *bcRead) namesTerm(node string, epoch int64) (breadcrumb.Record, bool) {
	if r.err != nil || epoch <= 0 {
		return breadcrumb.Record{}, false
	}
	rec, err := breadcrumb.Decode(r.data)
	if err != nil || rec.NodeID != node || rec.Epoch != epoch {
		return breadcrumb.Record{}, false
	}
	return rec, true
}

// recentBreadcrumbRead returns the newest read of the breadcrumb sent on
// sess less than prefetchMaxAge ago (nil: none).
func (s *Store) recentBreadcrumbRead(sess *zk.Session) *bcRead {
	r := s.bcRead.Load()
	if r == nil || r.sess != sess || time.Since(r.at) > prefetchMaxAge {
		return nil
	}
	return r
}
