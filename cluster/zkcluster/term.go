package zkcluster

import (
	"context"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// Elector is the election as the controller sees it: terms are
// cluster.Term values whose records live in the Store's layout.
type Elector struct {
	el *election.Elector
	s  *Store
}

// Elector wraps el, which must campaign in s's layout
// (election.Config.Dir = Layout().ElectionDir()).
func (s *Store) Elector(el *election.Elector) *Elector {
	return &Elector{el: el, s: s}
}

// Campaign joins the election until ctx ends (see election.Elector.Run):
// won runs once per term, its ctx ends when the term can no longer be
// assumed, and context.Cause says why: ctx's own cause, or the elector's
// reason, one of cluster's (election's errors are cluster.Reason values).
func (e *Elector) Campaign(ctx context.Context, won func(ctx context.Context, t cluster.Term)) error {
	return e.el.Run(ctx, func(ctx context.Context, l election.Leadership) {
		won(ctx, e.s.NewTerm(&term{l: l, s: e.s, ctx: ctx}))
	})
}

// Warm asks the elector to keep a credit chain while it waits (true), as a
// failover target should, so that it leads at once when it wins; false goes
// back to the configured rule (see election.Elector.Warm).
func (e *Elector) Warm(on bool) { e.el.Warm(on) }

// Refusal says why the elector stays out of the election (the lease does
// not fit the negotiated session timeout), or nil.
func (e *Elector) Refusal() error { return e.el.Refusal() }

// term is one election.Leadership as a cluster.TermKV. Every read runs on
// the leadership's own session (ZooKeeper's per-session view is
// monotonic, so a winner that saw its predecessor's znode go sees what
// the predecessor wrote before), and every write is one multi with the
// check that the term's election znode exists, so a term that is over
// (session gone, znode deleted) writes nothing.
type term struct {
	l election.Leadership
	s *Store
	// ctx is the leadership's context: it ends, with the reason as its
	// cause, as soon as the elector knows the term is over (its znode
	// deleted, its session or lease over, the term released).
	ctx context.Context
}

var _ cluster.TermKV = (*term)(nil)

func (t *term) Epoch() int64   { return t.l.Epoch }
func (t *term) NodeID() string { return t.l.NodeID }

// Expiry is when the term stops being safe to assume: the lease's end
// (its anchor, the send time of the newest write the ZooKeeper leader
// provably credited, plus the lease) plus the demote budget the elector
// was configured with. The elector sizes the lease so that this is never
// later than anchor + session timeout - margin, before which the session
// cannot expire and no successor can be elected (election's doc comment:
// the credit chain); with election.Config.TakeOverAtDeadline a successor
// waits out exactly this deadline instead, timed from the heartbeat the
// anchor comes from. The controller stops acting its own demote budget
// before it, which is the same budget: so it acts until the lease's end.
//
// It fails once the term is known to be over: by the clock and the session
// (Leadership.Valid, no goroutine involved), or because the elector ended
// the leadership (its context's cause: the znode deleted, say).
func (t *term) Expiry() (time.Time, error) {
	if err := t.l.Valid(); err != nil {
		return time.Time{}, err
	}
	if t.ctx != nil && t.ctx.Err() != nil {
		return time.Time{}, context.Cause(t.ctx)
	}
	return time.Now().Add(t.l.LeaseRemaining() + t.l.Timing.Budget), nil
}

// SessionTimeout is the session timeout ZooKeeper negotiated for the
// term's session.
func (t *term) SessionTimeout() time.Duration { return t.l.SessionTimeout }

// Read reads on the term's own session.
func (t *term) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	return read(ctx, t.l.Session, nil, qs)
}

// Commit applies ops in one multi with the check of the term's election
// znode.
func (t *term) Commit(ctx context.Context, ops ...cluster.Op) (cluster.Committed, error) {
	return commit(ctx, t.l.Session, t.l.Path, ops)
}

// Finish applies ops and deletes the term's election znode in one multi.
// If the znode is gone (the session expired, or it was deleted), the multi
// fails as a whole and nothing changes (the breadcrumb stays, so the
// successor fences this node). The elector's own leave then finds the
// znode gone, which it ignores.
//
// The znode delete must take only ours. In fair mode its name is unique
// to this term (our elector's GUID and a sequence number), and the elector
// creates no other znode before the term is released, after Finish: so
// version -1 deletes ours or fails with NoNode. The unfair lock's name is
// shared: if an operator deleted ours and another node took the lock
// before we noticed, a delete by name would remove their lock. So we read
// it first (after a sync, as the elector's own leave does) and delete it
// at the version read, only if its czxid is our epoch and its owner our
// session; that costs the unfair handoff a sync and a read. A window of
// one round trip remains (an unfair lock is never rewritten, so a lock
// created between our read and the multi has our version): it needs an
// operator's delete of a live leader's lock, and then costs the new
// holder its term before it could promote, never safety (we demoted
// already, and it would find no breadcrumb to fence).
func (t *term) Finish(ctx context.Context, ops ...cluster.Op) error {
	entryVersion := int32(-1)
	if t.l.Mode == election.Unfair {
		st, ok, err := election.StillOwned(ctx, t.l.Session, t.l.Path, t.l.Epoch, t.l.Session.ID())
		if err != nil {
			return fmt.Errorf("reading %s: %w", t.l.Path, err)
		}
		if !ok {
			now := "gone"
			if st.Czxid != 0 {
				now = fmt.Sprintf("another lock now (czxid %d, owner 0x%x)", st.Czxid, st.EphemeralOwner)
			}
			return fmt.Errorf("the lock %s this term created is %s: %w", t.l.Path, now, zk.ErrNoNode)
		}
		entryVersion = st.Version
	}
	var zops []zk.Op
	for _, o := range ops {
		if o.Kind != cluster.OpDelete {
			return fmt.Errorf("zkcluster: Finish takes deletes only (op %d)", o.Kind)
		}
		zops = append(zops, zk.DeleteOp{Path: o.Key, Version: version(o.Rev)})
	}
	t.l.Finishing(true)
	err := t.l.Session.Multi(ctx, append(zops, zk.DeleteOp{Path: t.l.Path, Version: entryVersion})...)
	if err != nil {
		t.l.Finishing(false)
		return fmt.Errorf("deleting %s: %w", t.l.Path, err)
	}
	t.l.Deleted()
	return nil
}
