package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
)

// NewTerm makes the controller's Term of a backend's term: the record rules
// of a leadership, written once on the backend's guarded primitives. Every
// write goes through t.Commit, so a term that is over writes nothing.
func (s *Store) NewTerm(t TermKV) Term { return &term{t: t, s: s} }

type term struct {
	t TermKV
	s *Store
}

func (t *term) Epoch() int64                  { return t.t.Epoch() }
func (t *term) Expiry() (time.Time, error)    { return t.t.Expiry() }
func (t *term) SessionTimeout() time.Duration { return t.t.SessionTimeout() }

// ReadBreadcrumb reads the breadcrumb in the term's own view.
func (t *term) ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, Revision, error) {
	return readBreadcrumb(ctx, t.t, t.s.layout.Breadcrumb())
}

// WriteBreadcrumb stores r if the breadcrumb is still at rev (zero: it
// must not exist), guarded by the term.
func (t *term) WriteBreadcrumb(ctx context.Context, r breadcrumb.Record, rev Revision) (Revision, error) {
	b, err := breadcrumb.Encode(r)
	if err != nil {
		return Revision{}, err
	}
	key := t.s.layout.Breadcrumb()
	c, err := t.t.Commit(ctx, Put(key, b, rev))
	if err != nil {
		return Revision{}, fmt.Errorf("writing breadcrumb %s: %w", key, err)
	}
	return c.Revs[0], nil
}

// ReadFailover reads the request in the term's own view, so that a winner
// sees every request its predecessor saw before its entry went. nil: none,
// or unreadable (which keeps nobody out).
func (t *term) ReadFailover(ctx context.Context) (*FailoverRequest, error) {
	r, _, err := t.s.readFailover(ctx, t.t)
	return r, err
}

// CompleteFailover marks a pending failover request to this node done
// (with epoch, the term's as published) once promoted, so the other nodes
// stop standing aside: they are the candidates if we die now. The write
// is compared against the request read (a request replaced meanwhile is
// left alone), keeps the request's session (the requester's: it goes when
// the requester does), and is guarded by the term: a term that is over
// must not tell the others that the failover to it is done.
func (t *term) CompleteFailover(ctx context.Context, epoch int64) error {
	req, item, err := t.s.readFailover(ctx, t.t)
	if err != nil || req == nil || req.To != t.t.NodeID() || req.Done {
		return err
	}
	req.Done, req.Epoch = true, epoch
	b, _ := json.Marshal(req)
	key := t.s.layout.Failover()
	if _, err := t.t.Commit(ctx, Put(key, b, item.Rev)); err != nil {
		return fmt.Errorf("marking the failover request %s done: %w", key, err)
	}
	return nil
}

// ReadMembers reads every member record in the term's own view.
func (t *term) ReadMembers(ctx context.Context) ([]Member, error) { return t.s.members(ctx, t.t) }

// ReadLeaderPosition reads the leader position in the term's own view: a
// winner sees what its predecessor wrote before its entry went.
func (t *term) ReadLeaderPosition(ctx context.Context) (*LeaderPosition, error) {
	p, _, err := readLeaderPosition(ctx, t.t, t.s.layout.LeaderPosition())
	return p, err
}

// WriteLeaderPosition stores p as the LeaderPosition record (persistent:
// it outlives the leader), guarded by the term and compared against the
// record read; it refuses to replace a record of a later epoch
// (ErrStalePosition), so the record never goes back to an older
// leadership. A record that cannot be decoded is replaced.
func (t *term) WriteLeaderPosition(ctx context.Context, p LeaderPosition) error {
	key := t.s.layout.LeaderPosition()
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		old, item, err := readLeaderPosition(ctx, t.t, key)
		switch {
		case err != nil && !errors.Is(err, errUnreadablePosition):
			return fmt.Errorf("writing the leader position of epoch %d: %w", p.Epoch, err)
		case old != nil && old.Epoch > p.Epoch:
			return fmt.Errorf("writing the leader position %s of epoch %d: %w (epoch %d)", key, p.Epoch, ErrStalePosition, old.Epoch)
		}
		rev := Revision{}
		if item != nil {
			rev = item.Rev
		}
		_, err = t.t.Commit(ctx, Put(key, data, rev))
		if errors.Is(err, ErrConflict) && attempt < 3 {
			continue // changed since we read it: judge again
		}
		if err != nil {
			return fmt.Errorf("writing the leader position %s: %w", key, err)
		}
		return nil
	}
}

// historyAttempts bounds AppendHistory's rounds on a concurrent change of
// the history. Each lost round means another writer's append went
// through; only a leader's append, an operator, or a test races it, so
// one retry nearly always does.
const historyAttempts = 10

// AppendHistory appends e to the history record: read, append
// (AppendHistory), and write back at the revision read, guarded by the
// term, so that a term that is over appends nothing. A concurrent change
// reads again and retries. An unreadable record is logged with its first
// bytes and replaced by a fresh list: the history informs operators and
// decides nothing, so a record something else wrote must not stop every
// later change from being recorded; the log line keeps what it held.
func (t *term) AppendHistory(ctx context.Context, e HistoryEntry) (HistoryEntry, error) {
	key := t.s.layout.History()
	for attempt := 1; ; attempt++ {
		cur, err := readOne(ctx, t.t, key)
		if err != nil {
			return e, fmt.Errorf("reading the history %s: %w", key, err)
		}
		var h []HistoryEntry
		rev := Revision{}
		if cur != nil {
			rev = cur.Rev
			if h, err = DecodeHistory(cur.Data); err != nil {
				t.s.log.Error("history unreadable: starting a fresh list", "key", key, "err", err)
			}
		}
		out, stored, added := AppendHistory(h, e)
		if !added {
			return stored, nil // an earlier attempt of ours went through
		}
		b, err := json.Marshal(out)
		if err != nil {
			return e, fmt.Errorf("encoding the history: %w", err)
		}
		if f := t.s.BeforeHistoryWrite; f != nil {
			f()
		}
		_, err = t.t.Commit(ctx, Put(key, b, rev))
		if errors.Is(err, ErrConflict) && attempt < historyAttempts {
			continue // changed meanwhile: append to what is there now
		}
		if err != nil {
			return e, fmt.Errorf("appending to the history %s: %w", key, err)
		}
		return stored, nil
	}
}

// Finish ends the term gracefully: the breadcrumb (at rev, the revision
// WriteBreadcrumb returned) and the term's election entry are deleted
// together. If the term is already over, or the breadcrumb changed,
// nothing changes, so the successor fences this node.
func (t *term) Finish(ctx context.Context, rev Revision) error {
	if !rev.Exists() {
		return fmt.Errorf("finishing term %d: no breadcrumb revision (%s): nothing of ours to delete", t.t.Epoch(), rev)
	}
	if err := t.t.Finish(ctx, Delete(t.s.layout.Breadcrumb(), rev)); err != nil {
		return fmt.Errorf("finishing term %d (deleting the breadcrumb and the election entry): %w", t.t.Epoch(), err)
	}
	return nil
}

// Primitive returns the backend's term a Term made by NewTerm wraps (nil:
// another Term), for a backend's own tests.
func Primitive(t Term) TermKV {
	if t, ok := t.(*term); ok {
		return t.t
	}
	return nil
}
