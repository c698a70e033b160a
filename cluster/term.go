package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/internal/lease"
)

// Why a term ended when its backend ended it: context.Cause of the term's
// context, and Term.Valid's error, wrap one of these (a backend translates
// its own reasons), so that the controller names the reason
// (FAILOVERD_REASON, metric labels) without knowing the backend. A term
// ended because the controller cancelled its candidacy carries the
// controller's cause instead.
var (
	// ErrLeaseExpired: the lease ran out before a renewal extended it, or
	// the backend's session changed so that the lease no longer fits.
	ErrLeaseExpired = errors.New("cluster: the term's lease expired")
	// ErrSessionExpired: the session the term was won on is over.
	ErrSessionExpired = errors.New("cluster: the term's session expired")
	// ErrEntryDeleted: the term's election entry (in ZooKeeper, its
	// election znode) was deleted by someone else.
	ErrEntryDeleted = errors.New("cluster: the term's election entry was deleted")
	// ErrResigned: the elector was told to resign or cede.
	ErrResigned = errors.New("cluster: the term was resigned")
	// ErrStopped: the election stopped without a cause.
	ErrStopped = errors.New("cluster: the election stopped")
	// ErrReleased: the callback that held the term returned.
	ErrReleased = errors.New("cluster: the term was released")
)

// ErrStalePosition is WriteLeaderPosition's refusal to replace the leader
// position of a later epoch: a term that is over must not move back what
// its successor published.
var ErrStalePosition = errors.New("cluster: the leader position is of a later epoch")

// Term is one leadership as a backend's elector hands it to the controller.
// It lives in this package rather than with its consumer because it appears
// in the elector callback's type: a backend must name it without importing
// the controller.
//
// Every write is guarded by the leadership itself (in ZooKeeper: the
// election znode exists), so a node whose term is over can never change
// what its successor relies on.
type Term interface {
	// Epoch is the term's fencing token; it strictly increases.
	Epoch() int64
	// Valid reports, without I/O, whether the term can still be assumed
	// (the session is alive and the lease has not run out: else an error
	// wrapping ErrSessionExpired or ErrLeaseExpired). Call it right before
	// acting.
	Valid() error
	// LeaseRemaining is how much of the lease is left (0: none).
	LeaseRemaining() time.Duration
	// Timing is the lease arithmetic of the term (Grace, Session, Lease),
	// for the demote budget check.
	Timing() lease.Timing
	// ReadBreadcrumb returns the breadcrumb and its version; ErrAbsent
	// (version -1) when there is none, a *breadcrumb.CorruptError when it
	// cannot be trusted.
	ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, int32, error)
	// WriteBreadcrumb stores r if the breadcrumb is still at version (-1:
	// it must not exist), guarded by the term; it returns the new version.
	WriteBreadcrumb(ctx context.Context, r breadcrumb.Record, version int32) (int32, error)
	// ReadFailover returns the standing failover request (nil: none), read
	// in the term's own view so that a winner sees every request its
	// predecessor saw before leaving.
	ReadFailover(ctx context.Context) (*FailoverRequest, error)
	// CompleteFailover marks a request to this node done with the term's
	// epoch, if there is one and it is not done yet.
	CompleteFailover(ctx context.Context) error
	// ReadMembers reads every member record, in the term's own view (the
	// candidates' positions at the win).
	ReadMembers(ctx context.Context) ([]Member, error)
	// ReadLeaderPosition reads the last position a leader published (nil,
	// nil: none yet).
	ReadLeaderPosition(ctx context.Context) (*LeaderPosition, error)
	// WriteLeaderPosition stores p, guarded by the term; it refuses
	// (ErrStalePosition) to replace a record of a later epoch.
	WriteLeaderPosition(ctx context.Context, p LeaderPosition) error
	// AppendHistory appends e to the cluster's history (see AppendHistory
	// for what it fills in and the bounds), guarded by the term: a term
	// that is over appends nothing. A concurrent change of the history is
	// read again and retried; an unreadable history is replaced by a list
	// that starts with e.
	AppendHistory(ctx context.Context, e HistoryEntry) error
	// Finish ends the term gracefully, after a successful demote: it
	// removes this node from the breadcrumb (if still at bcVersion) and
	// deletes the term's election entry, in one atomic step. If the term
	// is already over nothing changes, so the successor fences this node.
	Finish(ctx context.Context, bcVersion int32) error
}
