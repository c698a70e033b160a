package cluster

import (
	"context"
	"errors"
	"time"
)

// The primitives a backend provides. Everything a record means (members,
// failover requests and their rules, pause, history, positions, the
// breadcrumb's encoding, the leader view, JSON) is written once in this
// package on top of them (Store, and the Term NewTerm makes); a backend
// keeps only what truly differs between coordination services: its
// election and a small record store. The conformance suite
// (cluster/backendtest) runs every obligation below against every backend.
//
// Keys are the paths of the cluster's Layout. A directory is a key below
// which records live (Layout.MembersDir); it is never a record itself.

// ErrConflict means a compare-and-set found a record at another revision
// than the one given (or present where the zero Revision wanted none):
// nothing was written. Backends wrap it.
var ErrConflict = errors.New("cluster: the record changed since it was read")

// Owner says whose session a record lives with.
type Owner int

const (
	// Persistent: the record outlives every session.
	Persistent Owner = iota
	// OwnSession: the record goes with this node's current session (a
	// ZooKeeper ephemeral of the session, an etcd key of its lease).
	OwnSession
	// OtherSession: the record goes with another session, or an earlier
	// one of this node.
	OtherSession
)

// Item is one record as read.
type Item struct {
	Name  string // the key's last element (a directory's entry name)
	Data  []byte
	Rev   Revision
	Owner Owner
}

// Query is one thing a read returns: the record at Key, or with Dir every
// record directly below the directory Key, ordered by name (with
// NamesOnly, their names alone: no data, no revision).
type Query struct {
	Key       string
	Dir       bool
	NamesOnly bool
}

// One is the Query of a single record; Below that of a directory; Names
// that of the names below a directory.
func One(key string) Query   { return Query{Key: key} }
func Below(dir string) Query { return Query{Key: dir, Dir: true} }
func Names(dir string) Query { return Query{Key: dir, Dir: true, NamesOnly: true} }

// Result is what a Query read: for a record, Items has at most one
// element (none: absent); for a directory, every record below it.
type Result struct {
	Items []Item
}

// Item returns the record a single-record Query read (nil: absent).
func (r Result) Item() *Item {
	if len(r.Items) == 0 {
		return nil
	}
	return &r.Items[0]
}

// OpKind is what an Op does.
type OpKind int

const (
	OpPut OpKind = iota + 1
	OpPutSession
	OpDelete
	OpAbsent
)

// Op is one write of a Commit.
type Op struct {
	Kind OpKind
	Key  string
	Data []byte
	// Rev is the revision the record must be at (the zero Revision: it
	// must not exist; AnyRevision: whatever it is, also absent). A delete
	// needs a revision read or AnyRevision, never the zero Revision.
	// AnyRevision is for a Commit of one op outside a term.
	Rev Revision
}

// Put writes data at key if the record is at rev (zero: creates it).
func Put(key string, data []byte, rev Revision) Op {
	return Op{Kind: OpPut, Key: key, Data: data, Rev: rev}
}

// PutSession writes data at key as a record of this node's current session
// (it goes with the session), replacing what is there at rev.
func PutSession(key string, data []byte, rev Revision) Op {
	return Op{Kind: OpPutSession, Key: key, Data: data, Rev: rev}
}

// Delete deletes key if it is at rev (AnyRevision: whatever it is; absent
// then is not a conflict).
func Delete(key string, rev Revision) Op { return Op{Kind: OpDelete, Key: key, Rev: rev} }

// Absent writes nothing: the Commit fails with ErrConflict if key exists.
// etcd and the in-memory world check it in the commit itself; ZooKeeper,
// which cannot make a write depend on a znode's absence, checks right
// before it (a record created in between is not seen).
func Absent(key string) Op { return Op{Kind: OpAbsent, Key: key} }

// Committed is what a Commit wrote: the new revision of each put, in the
// order of the ops (the zero Revision for a delete or Absent), and the backend's
// write stamp of the commit (ZooKeeper: its zxid; etcd: its revision),
// greater than every epoch the backend handed out before it.
type Committed struct {
	Revs  []Revision
	Stamp int64
}

// Reader reads records.
type Reader interface {
	// Read reads qs. A backend that can reads them in one snapshot (etcd);
	// else in order, each read seeing at least what the ones before it
	// saw (ZooKeeper's session order). A record gone between listing a
	// directory and reading it is left out.
	Read(ctx context.Context, qs ...Query) ([]Result, error)
}

// KV is a backend's record store, on the node's connection to the
// coordination service.
//
// Obligations (each a test in cluster/backendtest):
//   - Compare-and-set: Commit applies all its ops or none; it fails with
//     ErrConflict (wrapped) when a record is not at its op's revision.
//   - Sessions: a PutSession record reads as OwnSession while this node's
//     session lives, and goes when the session ends, not before.
//   - Watches: see Watcher.
type KV interface {
	Reader
	// Commit applies ops atomically (see Op). Parents are created as
	// needed.
	Commit(ctx context.Context, ops ...Op) (Committed, error)
	// Watch starts a watch loop's reader: see Watcher.
	Watch(ctx context.Context) Watcher
	// Fresh returns once the backend proved it is in touch with its
	// quorum now (ZooKeeper: a sync; etcd: a linearizable read).
	Fresh(ctx context.Context) error
	// SessionChanged is closed when a new session begins (the session's
	// records must be written again).
	SessionChanged() <-chan struct{}
	// Connected reports, without I/O, whether the service is reachable.
	Connected() bool
}

// Watcher reads records and then waits until one of them may have
// changed. One goroutine uses it.
//
// Obligation: after Wait returned nil or an error, the next Read sees
// every change made after the reads of the previous round (Wait returns
// at the first change of anything read since the last Wait, nil also
// when a new session begins, and an error when it cannot tell: a lost
// connection, a compaction).
type Watcher interface {
	Reader
	// Wait blocks until a record read since the last Wait may have
	// changed (nil), until it cannot tell (an error: read everything
	// again), or until ctx ends.
	Wait(ctx context.Context) error
	Close()
}

// TermKV is a backend's term: the leadership's epoch and deadline, and
// the record store in the term's own view with every write guarded by the
// term. NewTerm makes the controller's Term of it.
//
// Obligations: as Term's (epoch, exclusion, deadline, guarded writes:
// Commit and Finish fail, and change nothing, once the term's election
// entry is gone).
type TermKV interface {
	Reader
	Epoch() int64
	Expiry() (time.Time, error)
	SessionTimeout() time.Duration
	// NodeID is the node that holds the term.
	NodeID() string
	// Commit applies ops as KV.Commit does, guarded by the term.
	Commit(ctx context.Context, ops ...Op) (Committed, error)
	// Finish applies ops and deletes the term's election entry, all or
	// nothing, guarded by the term.
	Finish(ctx context.Context, ops ...Op) error
}

// AnyRevision is the Revision of an Op that does not compare.
var AnyRevision = Revision{any: true}

// IsAny reports whether r is AnyRevision.
func (r Revision) IsAny() bool { return r.any }
