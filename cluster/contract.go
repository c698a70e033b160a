package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
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
	// ErrStopped: the election stopped without a cause.
	ErrStopped = errors.New("cluster: the election stopped")
	// ErrReleased: the callback that held the term returned.
	ErrReleased = errors.New("cluster: the term was released")
	// ErrLeaseTooShort: the elector stays out of the election: the lease
	// the coordination service granted leaves no room for the demote
	// budget (Elector.Refusal).
	ErrLeaseTooShort = errors.New("cluster: lease too short")
)

// Reason is one of this package's sentinels in a backend's own words:
// errors.Is matches it (and the value Reason returns), its message is
// msg. Backends define their reasons with it, so that there is one set of
// sentinels and no translation between two.
func Reason(is error, msg string) error { return &reason{is: is, msg: msg} }

type reason struct {
	is  error
	msg string
}

func (r *reason) Error() string { return r.msg }
func (r *reason) Unwrap() error { return r.is }

// ElectionMode is how the candidates of an election wait: Fair, in a
// queue in the order they joined; Unfair, all racing for one lock.
type ElectionMode int

// Election modes.
const (
	Fair ElectionMode = iota
	Unfair
)

func (m ElectionMode) String() string {
	if m == Unfair {
		return "unfair"
	}
	return "fair"
}

// ErrStalePosition is WriteLeaderPosition's refusal to replace the leader
// position of a later epoch: a term that is over must not move back what
// its successor published.
var ErrStalePosition = errors.New("cluster: the leader position is of a later epoch")

// The contract between the controller and a coordination backend: an
// Elector hands out Terms, Records keeps every other cluster-wide record.
// A backend is one package that implements all three and passes the
// conformance suite (cluster/backendtest), which runs each obligation
// written below against every backend. Backends translate their own
// vocabulary (znodes, keys, versions, sessions, leases) into this one; the
// controller never sees it.
//
// Obligations every backend meets (each is a test in cluster/backendtest):
//
//   - Epochs: every term's Epoch is positive and greater than the epoch of
//     every term of the cluster won before it, whichever node won it, also
//     across lost replies, reconnects and the loss of a node's session.
//   - Exclusion: while a term is valid (Expiry in the future), no other
//     term of the cluster is won.
//   - Guarded writes: every write a Term offers fails, and changes
//     nothing, once the term's election entry is gone (deleted, or its
//     session or lease over).
//   - Compare-and-set: a write at a Revision fails when the record is no
//     longer at that Revision; a write at the zero Revision fails when the
//     record exists.
//   - Succession: a new term's reads see everything its predecessors wrote
//     before their entries went.
//   - Watches: a watch delivers the current value first, then every value
//     that differs from the last one delivered, never an older one, and
//     it misses no change made after a read it delivered, also when the
//     connection is lost and comes back meanwhile (the last value stands
//     while the service is unreachable; it is not "none").
//   - Leader view: WatchLeader names a node only once its member record
//     says it is promoted at the breadcrumb's epoch, and never after a
//     successor wrote its breadcrumb.
//   - Term end: once a term's renewals stop (its node cut off, its
//     session lost), its context ends, with a cause wrapping
//     ErrLeaseExpired or ErrSessionExpired, no later than its Expiry less
//     the demote budget the backend's elector was configured with (the
//     daemon gives it the controller's DemoteBudget), up to the host's
//     scheduling; Expiry fails from then on. Both backends end it at that
//     instant by their own clock (ZooKeeper: the lease's end; etcd: the
//     session's deadline less the budget), whatever any call is doing.
//   - Deadline: Term.Expiry is never later than the instant the backend
//     can guarantee no other term begins before (for ZooKeeper: a leader on
//     a server cut off from its quorum; for etcd: one whose member is cut
//     off from its peers).
//   - Shortcuts: a cached value or a prefetched read returns what the
//     plain read would.
//   - Join: CheckJoin creates the cluster record only for a node with no
//     home, and admits a node only to its home's record or to one moved
//     from it (Admit); a record of an earlier version gets an ID once.
//   - Known members: a known-member record outlives its node's session
//     (its member record goes, it stays) until ForgetMember deletes it,
//     which is refused while the node's member record exists.
//   - Operator: the operator's operations (Operator) keep their rules:
//     a second pause keeps the first, a request of an operator is never
//     replaced by a node's proposal and withdrawn only by its own
//     session, a breadcrumb is cleared and a cluster record rewritten
//     only at the revision read.
//   - Primitives: the record store under every record rule (Backend,
//     TermKV, see kv.go) meets its own obligations, tested directly.
//   - Removal: a term names its election entry (EntryOf), and a backend
//     that is an EntryRemover (entry.go) removes that entry for a later
//     process of the same node only while it is unchanged; removed, the
//     term is over and the next candidate wins at once.
//   - Fencing first: with electors configured for it (FenceFirst), only
//     the candidate next in line suspects, and only a leader whose
//     heartbeat stood still for SuspectAfter at least (never while it
//     moves): it calls ProveOut naming the leader's node and entry, and
//     while that version stands asks again no sooner than every
//     SuspectAfter (0.5 s at least). ProveOut returning nil ends the
//     leader's term at once: the candidate wins, with a greater epoch,
//     long before the leader's session or lease could run out, and the
//     old term's guarded writes fail. ProveOut failing removes nothing:
//     the candidate wins only once the entry went by itself. EndTerm (a
//     TermEnder) removes the entry only while it is the one named and its
//     heartbeat is still at the Beat's version (ErrEntryChanged,
//     ErrBeatMoved otherwise); of two callers with one Beat, exactly one
//     succeeds.

// Revision is a record's version as its backend reports it, for
// compare-and-set. It is opaque: only the backend that returned it
// interprets it (ZooKeeper: a znode version; etcd: a key's mod revision),
// and nobody computes with it. The zero Revision means "absent": a write
// at it creates the record and fails if the record exists.
type Revision struct {
	n   int64
	ok  bool
	any bool // AnyRevision
}

// RevisionOf is a backend's revision n of an existing record.
func RevisionOf(n int64) Revision { return Revision{n: n, ok: true} }

// Exists reports whether r names a state of an existing record (false:
// the zero Revision, "absent").
func (r Revision) Exists() bool { return r.ok }

// Backend returns the backend's own number (ok false: absent). Only the
// backend that made r may use it.
func (r Revision) Backend() (n int64, ok bool) { return r.n, r.ok }

func (r Revision) String() string {
	switch {
	case r.any:
		return "any"
	case !r.ok:
		return "absent"
	}
	return fmt.Sprint(r.n)
}

// Elector campaigns for leadership.
type Elector interface {
	// Campaign joins the election until ctx ends. won runs once per term
	// won, in its own goroutine; its ctx ends when the term can no longer
	// be assumed, and context.Cause says why (the cause of ctx itself when
	// the controller ended the candidacy; else one of the Err* reasons of
	// this package, wrapped). It ends at the latest at the term's Expiry
	// less the elector's demote budget (the Term end obligation): a
	// promoted leader at rest stops only then, and its demote needs that
	// budget before a successor may begin. (The controller keeps its own
	// timer at that instant too, so that a backend that misses it is
	// still safe.) The term's election entry stays until won returned.
	// Campaign returns after the last won returned and the candidacy's
	// entry is gone.
	Campaign(ctx context.Context, won func(ctx context.Context, t Term)) error
	// Refusal says why the elector stays out of the election now (its
	// lease cannot fit what the coordination service granted), or nil.
	Refusal() error
}

// Warmer is implemented by electors that can get ready to lead at once
// while they wait (the target of a manual failover asks for it). A hint:
// an elector without it leads as quickly as it can anyway.
type Warmer interface {
	Warm(on bool)
}

// Records are the cluster-wide records other than the election. Every
// method works outside any term, on the node's current connection to the
// coordination service.
type Records interface {
	// PublishMember writes this node's member record, which goes when this
	// node's session with the coordination service ends. A
	// *DuplicateIDError means another live process publishes our node id.
	PublishMember(ctx context.Context, m Member) error
	// CheckJoin checks that this node may campaign in election mode mode
	// (no candidates of the other mode; the cluster record admits mode and
	// home, see Admit) and returns the cluster record. home is the ID of
	// the cluster record this node last ran in ("": none): only then is a
	// missing record created (with a new ID), and a record of an earlier
	// version without an ID is given one. A *ModeMismatchError or a
	// *MovedError is a refusal, any other error a failure to check.
	CheckJoin(ctx context.Context, mode, home string) (ClusterRecord, error)
	// WatchFailover calls fn with the manual failover request (nil: none
	// or unreadable) now and every time it changes, until ctx ends.
	WatchFailover(ctx context.Context, fn func(*FailoverRequest)) error
	// ReadFailover reads the standing request (nil: none, or unreadable).
	// Issued after a write of this node was answered, it sees that write
	// or a later state.
	ReadFailover(ctx context.Context) (*FailoverRequest, error)
	// ExpireFailover deletes the failover request with key id if it is
	// still there and not done.
	ExpireFailover(ctx context.Context, id string) error
	// ProposeFailover writes a failover request as the CLI's failover --to
	// does (this node hands over to a better one), but fails when a
	// request that is not done stands: it never replaces an operator's.
	ProposeFailover(ctx context.Context, r FailoverRequest) error
	// WithdrawFailover deletes the request with key id if this node's
	// current session wrote it.
	WithdrawFailover(ctx context.Context, id string) error
	// RememberMember writes k as node k.NodeID's known-member record,
	// which outlives the node's session (the node rewrites it every
	// RememberEvery, so that its LastSeen stays recent while it lives). It
	// replaces the record by compare-and-set against what it read (a
	// concurrent change is read again).
	RememberMember(ctx context.Context, k KnownMember) error
	// KnownMembers lists the known-member records, ordered by node id.
	KnownMembers(ctx context.Context) ([]KnownMember, error)
	// ForgetMember deletes node id's known-member record, reporting
	// whether there was one; it refuses with ErrMemberLive (wrapped), and
	// deletes nothing, while node id's member record exists.
	ForgetMember(ctx context.Context, id string) (bool, error)
	// WatchMembers calls fn with every member record now and after every
	// change of any field of any record (cluster.SameMembers), until ctx
	// ends.
	WatchMembers(ctx context.Context, fn func([]Member)) error
	// WatchLeader calls fn with the promoted leader (LeaderOf; nil: none),
	// first at once and then every time it changes, until ctx ends.
	WatchLeader(ctx context.Context, fn func(*Leader)) error
	// WatchPause calls fn with the pause in force (nil: none) now and after
	// every change, until ctx ends.
	WatchPause(ctx context.Context, fn func(*Pause)) error
	// ReadBreadcrumb reads the breadcrumb outside any term: ErrAbsent
	// (the zero Revision) when there is none, a *breadcrumb.CorruptError
	// when it cannot be trusted.
	ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, Revision, error)
	// SessionChanged is closed when a new session with the coordination
	// service begins (the member record must be written again).
	SessionChanged() <-chan struct{}
	// Connected reports, without I/O, whether the coordination service is
	// reachable now.
	Connected() bool
}

// Term is one leadership as a backend's elector hands it to the controller.
//
// Every write is guarded by the leadership itself (its election entry
// still exists), so a node whose term is over can never change what its
// successor relies on.
type Term interface {
	// Epoch is the term's fencing token: positive, and greater than every
	// earlier term's of the cluster.
	Epoch() int64
	// Expiry reports, without I/O, until when the term can be assumed:
	// the instant, on this host's monotonic clock, before which the
	// backend guarantees that no other term of the cluster begins. The
	// controller stops acting its demote budget before it, and the
	// term's context ends by then (Elector.Campaign). err is set
	// once the term is known to be over (it wraps ErrSessionExpired,
	// ErrEntryDeleted or ErrLeaseExpired). Call it right before acting.
	Expiry() (time.Time, error)
	// SessionTimeout is how long after a node stopped answering its
	// election entry and member record may remain (ZooKeeper: the
	// negotiated session timeout; etcd: the lease TTL).
	SessionTimeout() time.Duration
	// ReadBreadcrumb returns the breadcrumb and its revision; ErrAbsent
	// (zero revision) when there is none, a *breadcrumb.CorruptError when
	// it cannot be trusted.
	ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, Revision, error)
	// WriteBreadcrumb stores r if the breadcrumb is still at rev (zero:
	// it must not exist), guarded by the term; it returns the new
	// revision.
	WriteBreadcrumb(ctx context.Context, r breadcrumb.Record, rev Revision) (Revision, error)
	// ReadFailover returns the standing failover request (nil: none), read
	// in the term's own view so that a winner sees every request its
	// predecessor saw before leaving.
	ReadFailover(ctx context.Context) (*FailoverRequest, error)
	// CompleteFailover marks a request to this node done with epoch (the
	// term's epoch as the controller publishes it: Epoch plus the cluster
	// record's EpochFloor), if there is one and it is not done yet, guarded
	// by the term.
	CompleteFailover(ctx context.Context, epoch int64) error
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
	// that starts with e. It returns the entry as stored (old leader and
	// reason filled in; the one already there for a retried append).
	AppendHistory(ctx context.Context, e HistoryEntry) (HistoryEntry, error)
	// Finish ends the term gracefully, after a successful demote: it
	// deletes the breadcrumb (if still at rev) and the term's election
	// entry, in one atomic step. If the term is already over, or the
	// breadcrumb changed, nothing changes, so the successor fences this
	// node.
	Finish(ctx context.Context, rev Revision) error
}

// Operator is what the CLI commands and the admin API use of a cluster's
// records beyond Records: status, failover --to, pause and resume,
// forget, breadcrumb clear, history, and the move of a cluster
// (failoverd migrate). Store implements it, once for every backend, and
// the conformance suite runs it against each.
type Operator interface {
	Members(ctx context.Context) ([]Member, error)
	WatchMembers(ctx context.Context, fn func([]Member)) error
	Queue(ctx context.Context) ([]string, error)
	Leader(ctx context.Context) (*Leader, error)
	WatchLeader(ctx context.Context, fn func(*Leader)) error
	// Fresh returns once the backend proved it is in touch with its
	// quorum now.
	Fresh(ctx context.Context) error
	ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, Revision, error)
	ReadBreadcrumbData(ctx context.Context) ([]byte, Revision, error)
	// ClearBreadcrumb deletes the breadcrumb only if it is still at rev:
	// breadcrumb.ErrChanged when it was rewritten, ErrAbsent when gone.
	ClearBreadcrumb(ctx context.Context, rev Revision) error
	ReadLeaderPosition(ctx context.Context) (*LeaderPosition, error)
	ReadPause(ctx context.Context) (*Pause, error)
	SetPause(ctx context.Context, p Pause) (Pause, bool, error)
	ClearPause(ctx context.Context) (bool, error)
	History(ctx context.Context) ([]HistoryEntry, error)
	KnownMembers(ctx context.Context) ([]KnownMember, error)
	ForgetMember(ctx context.Context, id string) (bool, error)
	RequestFailover(ctx context.Context, r FailoverRequest) error
	WithdrawFailover(ctx context.Context, id string) error
	ClusterRecord(ctx context.Context) (*ClusterRecord, Revision, error)
	WriteClusterRecord(ctx context.Context, rec ClusterRecord, rev Revision) (newRev Revision, stamp int64, err error)
	ReadCarried(ctx context.Context) (Carried, error)
	WriteCarried(ctx context.Context, c Carried) error
}
