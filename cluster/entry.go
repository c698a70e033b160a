package cluster

import (
	"context"
	"errors"
	"fmt"
)

// Entry names one election entry as its backend created it: enough for
// the same node's next process to remove that entry, and only that entry,
// once it proved that the process which held it is gone and its service
// is no longer primary (see docs/safety.md, "A restarted daemon ends its
// own old term"). Only the backend that made it interprets it.
type Entry struct {
	// Key is the entry's path (ZooKeeper: the election znode; etcd: the
	// election key).
	Key string `json:"key"`
	// Owner is the session it lives with (ZooKeeper: the session id, the
	// znode's ephemeralOwner; etcd: the lease id).
	Owner int64 `json:"owner"`
	// Created tells this entry from a later one at the same key
	// (ZooKeeper: its czxid; etcd: its create revision). For a term it is
	// the term's backend epoch.
	Created int64 `json:"created"`
}

// IsZero reports whether e names nothing.
func (e Entry) IsZero() bool { return e == Entry{} }

func (e Entry) String() string {
	return fmt.Sprintf("%s (owner %x, created %d)", e.Key, e.Owner, e.Created)
}

// EntryNamer is a backend's TermKV that names its election entry.
type EntryNamer interface {
	Entry() Entry
}

// EntryOf returns the election entry of a term made by a Store's NewTerm,
// when its backend names it (ok false: it does not).
func EntryOf(t Term) (Entry, bool) {
	if n, ok := Primitive(t).(EntryNamer); ok {
		return n.Entry(), true
	}
	return Entry{}, false
}

// ErrEntryChanged is RemoveEntry's refusal: the entry at Key is not the
// one named (another owner or another creation) or is gone; nothing was
// removed.
var ErrEntryChanged = errors.New("cluster: the election entry is not the one named")

// ErrNoRemove: the backend cannot remove an entry.
var ErrNoRemove = errors.New("cluster: the backend cannot remove an election entry")

// EntryRemover is a backend (the Backend a Store is made on) that can end
// an earlier process's term of this node.
//
// Obligations (cluster/backendtest, RemoveEntry):
//   - It removes the entry only if it is still the one named: at Key,
//     created at Created, owned by Owner. Otherwise it removes nothing and
//     fails with ErrEntryChanged (wrapped); an entry already gone is
//     ErrEntryChanged too.
//   - Once it returned nil, the named term is over for the coordination
//     service: the next candidate may win at once, and every guarded write
//     of the named term fails.
//   - etcd also revokes the lease named (Owner), so that the earlier
//     process's member record goes with it.
type EntryRemover interface {
	RemoveEntry(ctx context.Context, e Entry) error
}

// RemoveEntry removes the election entry e if it is still the one named
// (see EntryRemover). The caller must have proved that the process that
// held e can no longer act and that its service is not primary: the
// backend checks only that e is unchanged.
func (s *Store) RemoveEntry(ctx context.Context, e Entry) error {
	r, ok := s.kv.(EntryRemover)
	if !ok {
		return ErrNoRemove
	}
	if e.IsZero() {
		return fmt.Errorf("%w: no entry named", ErrEntryChanged)
	}
	return r.RemoveEntry(ctx, e)
}
