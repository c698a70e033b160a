package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fencing first, then taking over (docs/safety.md, "Fencing first, then
// taking over"): the candidate next in line times the leader's heartbeat;
// once one heartbeat is overdue by SuspectAfter (it stood still for the
// renew interval the leader publishes plus SuspectAfter) it asks ProveOut to
// fence the leader with a method that proves it cannot act, and only
// when that succeeded it ends the leader's term with one guarded
// operation (EndTerm) that fails if the heartbeat moved or the entry was
// re-created. It then wins through the normal path.

// Beat is one heartbeat of an election entry as a candidate read it: the
// entry, and the version its heartbeat had (ZooKeeper: the znode's data
// version; etcd: the key's mod revision). Only the backend that read it
// interprets Version.
type Beat struct {
	// NodeID is the node the entry names.
	NodeID string
	Entry  Entry
	// Version is the heartbeat's version when it was read.
	Version int64
}

// Suspect is the leader a candidate next in line suspects: the heartbeat
// Beat stood still for Stood on the candidate's monotonic clock.
type Suspect struct {
	Beat  Beat
	Stood time.Duration
}

// ProveOut fences the node a Suspect names with a method that proves it
// can no longer act as leader, and returns nil only when it did. Any
// error leaves the suspect's term alone.
type ProveOut func(ctx context.Context, s Suspect) error

// FenceFirst configures an elector for fencing first: with ProveOut set,
// every renewal of every candidate is a heartbeat, and the candidate next
// in line suspects a leader whose heartbeat is overdue by SuspectAfter,
// and asks again at most every SuspectAfter (at least 0.5 s) while that
// heartbeat stands. ProveOut nil: off.
type FenceFirst struct {
	SuspectAfter time.Duration
	ProveOut     ProveOut
	// Ended, when set, is called by the elector once it ended the term b
	// names itself (its guarded removal succeeded), after ProveOut proved
	// that term out and before the elector looks at the candidates
	// again. Only then may the term the elector wins next skip its fence
	// of the term proved out (docs/safety.md, "Fencing first, then taking
	// over", step 5): a proof whose removal failed or was never tried
	// stands for nothing.
	Ended func(b Beat)
}

// On reports whether fencing first is configured.
func (f FenceFirst) On() bool { return f.ProveOut != nil }

// ErrBeatMoved is EndTerm's refusal: the entry's heartbeat moved since the
// Beat was read; nothing was removed.
var ErrBeatMoved = errors.New("cluster: the leader's heartbeat moved")

// TermEnder is a backend that can end another node's term once that term
// was proved out (see FenceFirst).
//
// Obligations (cluster/backendtest, EndTerm):
//   - It removes the entry b names only while the entry is the one named
//     (at b.Entry.Key, created at b.Entry.Created) and its heartbeat is
//     still at b.Version; otherwise it removes nothing and fails with
//     ErrBeatMoved (the heartbeat moved) or ErrEntryChanged (the entry is
//     gone or another), wrapped.
//   - It succeeds at most once for one Beat; of two callers racing with
//     the same Beat exactly one succeeds.
//   - Once it returned nil the named term is over for the coordination
//     service: the next candidate may win at once, and every guarded write
//     of the named term fails. etcd also revokes the entry's lease.
type TermEnder interface {
	EndTerm(ctx context.Context, b Beat) error
}

// ErrNoEndTerm: the backend cannot end another node's term.
var ErrNoEndTerm = errors.New("cluster: the backend cannot end another node's term")

// EndTerm ends the term b names if its heartbeat is still at b.Version
// (see TermEnder). The caller must have proved that the node b names can
// no longer act (ProveOut): the backend checks only that the heartbeat and
// the entry are unchanged.
func (s *Store) EndTerm(ctx context.Context, b Beat) error {
	e, ok := s.kv.(TermEnder)
	if !ok {
		return ErrNoEndTerm
	}
	if b.Entry.IsZero() {
		return fmt.Errorf("%w: no entry named", ErrEntryChanged)
	}
	return e.EndTerm(ctx, b)
}
