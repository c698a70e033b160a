package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
)

// Backend is what a coordination service provides for a cluster's
// records: the record store (KV) and, for status displays, the election's
// queue. Everything else Store does is written here, once.
type Backend interface {
	KV
	// Queue lists the candidates' node ids in election order.
	Queue(ctx context.Context) ([]string, error)
}

// StoreConfig says whose records a Store keeps.
type StoreConfig struct {
	Layout Layout
	// NodeID and Instance identify this process; only PublishMember
	// needs them (a CLI leaves them empty). Instance is the random id of
	// the failoverd process, new at every start: it tells a member record
	// of our own earlier session from one of another live process using
	// the same node id.
	NodeID, Instance string
	Logger           *slog.Logger // nil: discard
}

// Store keeps one cluster's records on a backend's primitives: the
// controller's Records and every operator operation (status, failover
// --to, pause and resume, forget, breadcrumb clear, history, migrate). It
// keeps no copy of any record; its methods are safe for concurrent use.
type Store struct {
	kv     Backend
	layout Layout
	nodeID string
	inst   string
	log    *slog.Logger
	// previous is the instance of this node's previous process, proven
	// gone (SetPrevious): its member record is ours to replace.
	previous atomicString

	// Set by tests only: BeforeHistoryWrite runs in a term's AppendHistory
	// between its read and its write (where a concurrent change lands).
	BeforeHistoryWrite func()
}

var (
	_ Records  = (*Store)(nil)
	_ Operator = (*Store)(nil)
)

// NewStore makes a Store on kv.
func NewStore(kv Backend, cfg StoreConfig) *Store {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{kv: kv, layout: cfg.Layout, nodeID: cfg.NodeID, inst: cfg.Instance, log: cfg.Logger}
}

// SetPrevious names the instance of this node's previous process, which
// the caller proved has exited (the lock beside the node state file): a
// member record of that instance is replaced as one of our own earlier
// session, instead of being refused as a duplicate node id until its
// session ends.
func (s *Store) SetPrevious(instance string) { s.previous.Store(instance) }

type atomicString struct{ v atomic.Value }

func (a *atomicString) Store(s string) { a.v.Store(s) }
func (a *atomicString) Load() string {
	s, _ := a.v.Load().(string)
	return s
}

// Layout is where the Store's records live.
func (s *Store) Layout() Layout { return s.layout }

// Connected reports, without I/O, whether the coordination service is
// reachable now.
func (s *Store) Connected() bool { return s.kv.Connected() }

// SessionChanged is closed when a new session begins.
func (s *Store) SessionChanged() <-chan struct{} { return s.kv.SessionChanged() }

// Fresh returns once the backend proved it is in touch with its quorum.
func (s *Store) Fresh(ctx context.Context) error { return s.kv.Fresh(ctx) }

// Queue lists the candidates' node ids in election order.
func (s *Store) Queue(ctx context.Context) ([]string, error) { return s.kv.Queue(ctx) }

// readOne reads the record at key (nil: absent).
func readOne(ctx context.Context, r Reader, key string) (*Item, error) {
	res, err := r.Read(ctx, One(key))
	if err != nil {
		return nil, err
	}
	return res[0].Item(), nil
}

// --- members ---

// PublishMember writes our member record, a record of the current
// session, so it goes when the node does. A record of another session is
// replaced only when it carries our instance id (an earlier session of
// this very process) or lives with no session; one of another live
// process is a duplicate node id (*DuplicateIDError), and nothing is
// written.
func (s *Store) PublishMember(ctx context.Context, m Member) error {
	if s.nodeID == "" || s.inst == "" {
		return errors.New("cluster: publishing a member record needs the node id and instance")
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	key := s.layout.Member(s.nodeID)
	cur, err := readOne(ctx, s.kv, key)
	if err != nil {
		return fmt.Errorf("reading member record %s: %w", key, err)
	}
	op := PutSession(key, data, Revision{})
	switch {
	case cur != nil && cur.Owner == OwnSession:
		op = Put(key, data, cur.Rev) // in place: it stays our session's
	case cur != nil:
		var other Member
		_ = json.Unmarshal(cur.Data, &other)
		if cur.Owner == OtherSession && other.Instance != s.inst && (other.Instance == "" || other.Instance != s.previous.Load()) {
			return &DuplicateIDError{NodeID: s.nodeID, Host: other.Host, Instance: other.Instance}
		}
		op = PutSession(key, data, cur.Rev) // ours from an earlier session, or with no session
	}
	if _, err := s.kv.Commit(ctx, op); err != nil {
		return fmt.Errorf("writing member record %s: %w", key, err) // a conflict is looked at on the next round
	}
	return nil
}

// decodeMembers parses member records; one that cannot be decoded is
// listed with State "unreadable".
func decodeMembers(items []Item) []Member {
	var out []Member
	for _, it := range items {
		var m Member
		if json.Unmarshal(it.Data, &m) != nil {
			m = Member{NodeID: it.Name, State: "unreadable"}
		}
		out = append(out, m)
	}
	return out
}

func (s *Store) members(ctx context.Context, r Reader) ([]Member, error) {
	res, err := r.Read(ctx, Below(s.layout.MembersDir()))
	if err != nil {
		return nil, fmt.Errorf("reading the member records: %w", err)
	}
	return decodeMembers(res[0].Items), nil
}

// Members lists the member records, ordered by node id.
func (s *Store) Members(ctx context.Context) ([]Member, error) { return s.members(ctx, s.kv) }

// WatchMembers calls fn with the member records now and after every
// change, until ctx ends (see watchReads).
func (s *Store) WatchMembers(ctx context.Context, fn func([]Member)) error {
	return watchReads(ctx, s, s.members, slices.Equal[[]Member], fn)
}

// watchReads calls fn with read's value now and every time it differs
// from the last one delivered (equal), until ctx ends; it returns ctx's
// error. read runs on a Watcher, which then waits for a change of what it
// read (and reads again on any doubt: Watcher's obligation). A failed read
// is retried every half second and never reaches fn: while the service is
// out of reach the last value delivered stands. One goroutine, the
// caller's, owns the value.
func watchReads[T any](ctx context.Context, s *Store, read func(context.Context, Reader) (T, error), equal func(a, b T) bool, fn func(T)) error {
	w := s.kv.Watch(ctx)
	defer w.Close()
	var last T
	first := true
	for ctx.Err() == nil {
		v, err := read(ctx, w)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("watch read failed; retrying", "err", err)
			}
			Sleep(ctx, 500*time.Millisecond)
			continue
		}
		if first || !equal(v, last) {
			first, last = false, v
			fn(v)
		}
		if err := w.Wait(ctx); err != nil && ctx.Err() == nil {
			s.log.Debug("watch interrupted; reading again", "err", err)
			Sleep(ctx, 100*time.Millisecond) // no tight loop if it persists
		}
	}
	return ctx.Err()
}

// Sleep waits d or until ctx ends, whichever comes first.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// --- known members ---

// rememberAttempts bounds RememberMember's rounds on a concurrent change.
const rememberAttempts = 5

// RememberMember writes k's known-member record at the revision read
// (created when absent); a concurrent change is read again.
func (s *Store) RememberMember(ctx context.Context, k KnownMember) error {
	if k.NodeID == "" {
		return errors.New("cluster: remembering a member needs its node id")
	}
	data, err := json.Marshal(k)
	if err != nil {
		return err
	}
	key := s.layout.Known(k.NodeID)
	for attempt := 1; ; attempt++ {
		cur, err := readOne(ctx, s.kv, key)
		if err != nil {
			return fmt.Errorf("reading the known-member record %s: %w", key, err)
		}
		rev := Revision{}
		if cur != nil {
			rev = cur.Rev
		}
		_, err = s.kv.Commit(ctx, Put(key, data, rev))
		if errors.Is(err, ErrConflict) && attempt < rememberAttempts {
			continue // changed (or forgotten) meanwhile
		}
		if err != nil {
			return fmt.Errorf("writing the known-member record %s: %w", key, err)
		}
		return nil
	}
}

// KnownMembers lists the known-member records, ordered by node id.
func (s *Store) KnownMembers(ctx context.Context) ([]KnownMember, error) {
	res, err := s.kv.Read(ctx, Below(s.layout.KnownDir()))
	if err != nil {
		return nil, fmt.Errorf("listing the known members %s: %w", s.layout.KnownDir(), err)
	}
	out := make([]KnownMember, 0, len(res[0].Items))
	for _, it := range res[0].Items {
		out = append(out, DecodeKnown(it.Name, it.Data))
	}
	return out, nil
}

// ForgetMember deletes id's known-member record, at the revision read, in
// a commit that requires id's member record to be absent (see Absent: on
// ZooKeeper a node that comes back in between writes its record again
// within RememberEvery).
func (s *Store) ForgetMember(ctx context.Context, id string) (bool, error) {
	key, member := s.layout.Known(id), s.layout.Member(id)
	for attempt := 0; ; attempt++ {
		res, err := s.kv.Read(ctx, One(member), One(key))
		if err != nil {
			return false, fmt.Errorf("reading the records of %s: %w", id, err)
		}
		if res[0].Item() != nil {
			return false, fmt.Errorf("forgetting %s: %w", id, ErrMemberLive)
		}
		cur := res[1].Item()
		if cur == nil {
			return false, nil
		}
		_, err = s.kv.Commit(ctx, Absent(member), Delete(key, cur.Rev))
		if errors.Is(err, ErrConflict) && attempt < 3 {
			continue // the node came back, or its record changed: judge again
		}
		if err != nil {
			return false, fmt.Errorf("deleting the known-member record %s: %w", key, err)
		}
		return true, nil
	}
}

// --- join checks ---

// CheckJoin runs the checks that must pass before this node campaigns in
// election mode mode ("" skips them): the election holds no entry of the
// other mode, and the cluster record admits mode and home (Admit; it is
// created, by a node with no home only, when there is none). A refusal is
// a *ModeMismatchError or a *MovedError; any other error means the checks
// could not run. The cluster record is read every time (it is small): a
// record marked moved refuses at once.
func (s *Store) CheckJoin(ctx context.Context, mode, home string) (ClusterRecord, error) {
	if mode == "" {
		return ClusterRecord{}, nil
	}
	// The election first: a node must not record its mode over a cluster
	// whose nodes of the other mode are campaigning.
	if err := s.checkElection(ctx, mode); err != nil {
		return ClusterRecord{}, err
	}
	r, err := s.joinRecord(ctx, mode, home)
	if err != nil {
		return ClusterRecord{}, err
	}
	// r is nil only for a node with a home, which Admit then refuses.
	if err := Admit(r, s.layout.Config(), mode, home); err != nil {
		return ClusterRecord{}, err
	}
	return *r, nil
}

// checkElection refuses to join when the election holds entries of the
// other mode (a node of another mode, or of a version that does not know
// the cluster record, is campaigning).
func (s *Store) checkElection(ctx context.Context, mode string) error {
	dir := s.layout.ElectionDir()
	res, err := s.kv.Read(ctx, Names(dir))
	if err != nil {
		return fmt.Errorf("listing the election %s: %w", dir, err)
	}
	for _, it := range res[0].Items {
		if foreignCandidate(it.Name, mode) {
			return &ModeMismatchError{Mode: mode, Cluster: s.layout.Config(),
				Why: fmt.Sprintf("the election %s holds %s, an entry of the other mode", dir, it.Name)}
		}
	}
	return nil
}

// Names of the election's entries, as both backends' electors make them:
// fair candidates are FairPrefix and a unique suffix, the unfair lock is
// LockName.
const (
	FairPrefix = "c_"
	LockName   = "lock"
)

// foreignCandidate reports whether the election entry name belongs to the
// other mode than mode.
func foreignCandidate(name, mode string) bool {
	fair := strings.HasPrefix(name, FairPrefix)
	unfair := name == LockName
	return (mode == "fair" && unfair) || (mode == "unfair" && fair)
}

// joinRecord reads the cluster record (nil: there is none and home is
// set, so none is created), creating it when there is none and home is
// "", and giving a record of an earlier version its ID. An unreadable
// record is a *ModeMismatchError.
func (s *Store) joinRecord(ctx context.Context, mode, home string) (*ClusterRecord, error) {
	key := s.layout.Config()
	for attempt := 0; ; attempt++ {
		cur, err := readOne(ctx, s.kv, key)
		if err != nil {
			return nil, fmt.Errorf("reading the cluster record %s: %w", key, err)
		}
		if cur == nil {
			if home != "" {
				return nil, nil
			}
			if attempt >= 3 {
				return nil, fmt.Errorf("reading the cluster record %s: neither created nor found", key)
			}
			rec := ClusterRecord{ElectionMode: mode, ID: NewRecordID()}
			data, _ := json.Marshal(rec)
			_, err := s.kv.Commit(ctx, Put(key, data, Revision{}))
			if err == nil {
				s.log.Info("cluster record created", "key", key, "election_mode", mode, "record_id", rec.ID)
				return &rec, nil
			}
			if !errors.Is(err, ErrConflict) {
				return nil, fmt.Errorf("creating the cluster record %s: %w", key, err)
			}
			continue // another node was first: read its record
		}
		var rec ClusterRecord
		if err := json.Unmarshal(cur.Data, &rec); err != nil {
			return nil, &ModeMismatchError{Mode: mode, Cluster: key, Why: fmt.Sprintf("the cluster record %s is unreadable (%q)", key, cur.Data)}
		}
		if rec.ID != "" || rec.ElectionMode == "" {
			return &rec, nil
		}
		if attempt >= 3 {
			return nil, fmt.Errorf("giving the cluster record %s its id: it changed at every try", key)
		}
		// A record of an earlier version: give it its ID, once (a node
		// that wrote first wins; read its ID).
		rec.ID = NewRecordID()
		data, _ := json.Marshal(rec)
		_, err = s.kv.Commit(ctx, Put(key, data, cur.Rev))
		if err == nil {
			s.log.Info("cluster record given its id", "key", key, "record_id", rec.ID)
			return &rec, nil
		}
		if !errors.Is(err, ErrConflict) {
			return nil, fmt.Errorf("giving the cluster record %s its id: %w", key, err)
		}
	}
}

// --- failover request ---

// readFailover reads the failover request (nil: none or unreadable, see
// DecodeFailover) with the record read.
func (s *Store) readFailover(ctx context.Context, r Reader) (*FailoverRequest, *Item, error) {
	key := s.layout.Failover()
	cur, err := readOne(ctx, r, key)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the failover request %s: %w", key, err)
	}
	if cur == nil {
		return nil, nil, nil
	}
	return DecodeFailover(cur.Data), cur, nil
}

// ReadFailover reads the standing failover request (nil: none or
// unreadable). Issued after a write of this node was answered, it sees
// that write or a later state.
func (s *Store) ReadFailover(ctx context.Context) (*FailoverRequest, error) {
	r, _, err := s.readFailover(ctx, s.kv)
	return r, err
}

// WatchFailover calls fn with the standing failover request (nil: none or
// unreadable) now and after every change, until ctx ends.
func (s *Store) WatchFailover(ctx context.Context, fn func(*FailoverRequest)) error {
	read := func(ctx context.Context, r Reader) (*FailoverRequest, error) {
		req, _, err := s.readFailover(ctx, r)
		return req, err
	}
	return watchReads(ctx, s, read, SameRequest, fn)
}

// RequestFailover replaces whatever request is there (an earlier one's
// requester gave up on it) with r, as a record of the current session:
// the request lives only while the requester waits for its outcome. If
// the requester dies, the request goes with its session, and the nodes
// standing aside for it rejoin the election. (Requests of earlier CLIs
// are persistent: the nodes delete one that is not done by its timeout,
// see ExpireFailover.)
func (s *Store) RequestFailover(ctx context.Context, r FailoverRequest) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := s.layout.Failover()
	if _, err := s.kv.Commit(ctx, PutSession(key, data, AnyRevision)); err != nil {
		return fmt.Errorf("writing the failover request %s: %w", key, err)
	}
	return nil
}

// ErrFailoverStands is ProposeFailover's refusal: a request that is not
// done stands already.
var ErrFailoverStands = errors.New("a failover request stands already")

// ProposeFailover writes r, a request a node makes by itself (a handover
// to a better candidate), as RequestFailover does, but only when no
// request stands: none, or one that is done or unreadable, replaced at
// the revision read. It never replaces a standing request (an operator's
// failover --to, or another node's handover), which it reports with
// ErrFailoverStands: the operator is in charge, and the request read
// before deciding may be older than one written since.
func (s *Store) ProposeFailover(ctx context.Context, r FailoverRequest) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := s.layout.Failover()
	for attempt := 0; ; attempt++ {
		cur, item, err := s.readFailover(ctx, s.kv)
		if err != nil {
			return err
		}
		if cur != nil && !cur.Done {
			return fmt.Errorf("not writing the failover request to %s: %w (to %s, by %s)", r.To, ErrFailoverStands, cur.To, cur.By)
		}
		rev := Revision{}
		if item != nil {
			rev = item.Rev
		}
		_, err = s.kv.Commit(ctx, PutSession(key, data, rev))
		if errors.Is(err, ErrConflict) && attempt < 3 {
			continue // changed since we read it: judge again
		}
		if err != nil {
			return fmt.Errorf("writing the failover request %s: %w", key, err)
		}
		return nil
	}
}

// WithdrawFailover deletes the failover request whose Key is id, and only
// if it is a record of our current session: another requester may have
// replaced it meanwhile. Nothing there (or not ours) is not an error.
func (s *Store) WithdrawFailover(ctx context.Context, id string) error {
	if !s.kv.Connected() {
		return nil // our request goes with our session, or went with it
	}
	r, item, err := s.readFailover(ctx, s.kv)
	if err != nil || r == nil || item.Owner != OwnSession || r.Key() != id {
		return err
	}
	key := s.layout.Failover()
	if _, err := s.kv.Commit(ctx, Delete(key, item.Rev)); err != nil && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("withdrawing the failover request %s: %w", key, err)
	}
	return nil
}

// ExpireFailover deletes the failover request whose Key is id if it is
// still there, unchanged, and not done: its timeout ran out (as measured
// by the caller) without the target being promoted, so that a request
// whose requester died does not hold nodes that start later. A request
// withdrawn, replaced or marked done meanwhile is left alone.
func (s *Store) ExpireFailover(ctx context.Context, id string) error {
	r, item, err := s.readFailover(ctx, s.kv)
	if err != nil || r == nil || r.Key() != id || r.Done {
		return err
	}
	key := s.layout.Failover()
	_, err = s.kv.Commit(ctx, Delete(key, item.Rev))
	if errors.Is(err, ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting the expired failover request %s: %w", key, err)
	}
	s.log.Warn("manual failover request timed out without the target being promoted; deleted it", "to", r.To)
	return nil
}

// --- pause ---
//
// The pause record is persistent: a pause outlives every session (the
// CLI's, the admin API's) and every daemon restart, and only an
// operator's resume ends it.

// SetPause pauses the cluster with p unless it is paused already. It
// returns the pause in force afterwards (p, or the earlier one: pausing
// twice keeps who paused first, and since when) and whether this call
// created it.
func (s *Store) SetPause(ctx context.Context, p Pause) (Pause, bool, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return Pause{}, false, err
	}
	key := s.layout.Pause()
	for attempt := 0; ; attempt++ {
		_, err := s.kv.Commit(ctx, Put(key, data, Revision{}))
		if err == nil {
			return p, true, nil
		}
		if !errors.Is(err, ErrConflict) {
			return Pause{}, false, fmt.Errorf("writing the pause record %s: %w", key, err)
		}
		cur, err := s.ReadPause(ctx)
		if err != nil {
			return Pause{}, false, err
		}
		if cur != nil {
			return *cur, false, nil
		}
		if attempt >= 3 {
			return Pause{}, false, fmt.Errorf("writing the pause record %s: it comes and goes (another operator resumes)", key)
		}
	}
}

// ClearPause ends the pause. It reports whether the cluster was paused;
// resuming a cluster that is not paused is not an error.
func (s *Store) ClearPause(ctx context.Context) (bool, error) {
	key := s.layout.Pause()
	cur, err := readOne(ctx, s.kv, key)
	if err != nil {
		return false, fmt.Errorf("reading the pause record %s: %w", key, err)
	}
	if _, err := s.kv.Commit(ctx, Delete(key, AnyRevision)); err != nil {
		return false, fmt.Errorf("deleting the pause record %s: %w", key, err)
	}
	return cur != nil, nil
}

func (s *Store) readPause(ctx context.Context, r Reader) (*Pause, error) {
	key := s.layout.Pause()
	cur, err := readOne(ctx, r, key)
	if err != nil {
		return nil, fmt.Errorf("reading the pause record %s: %w", key, err)
	}
	if cur == nil {
		return nil, nil
	}
	return DecodePause(cur.Data), nil
}

// ReadPause returns the pause in force (nil: the cluster is not paused).
func (s *Store) ReadPause(ctx context.Context) (*Pause, error) { return s.readPause(ctx, s.kv) }

// WatchPause calls fn with the pause in force (nil: none) now and after
// every change, until ctx ends.
func (s *Store) WatchPause(ctx context.Context, fn func(*Pause)) error {
	return watchReads(ctx, s, s.readPause, SamePause, fn)
}

// --- breadcrumb, outside a term ---

// readBreadcrumb reads the breadcrumb: breadcrumb.ErrAbsent with the zero
// revision when there is none, a *breadcrumb.CorruptError when it cannot
// be trusted.
func readBreadcrumb(ctx context.Context, r Reader, key string) (breadcrumb.Record, Revision, error) {
	cur, err := readOne(ctx, r, key)
	if err != nil {
		return breadcrumb.Record{}, Revision{}, fmt.Errorf("reading breadcrumb %s: %w", key, err)
	}
	if cur == nil {
		return breadcrumb.Record{}, Revision{}, breadcrumb.ErrAbsent
	}
	rec, err := breadcrumb.Decode(cur.Data)
	return rec, cur.Rev, err
}

// ReadBreadcrumb reads the breadcrumb outside any term.
func (s *Store) ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, Revision, error) {
	return readBreadcrumb(ctx, s.kv, s.layout.Breadcrumb())
}

// ReadBreadcrumbData returns the breadcrumb's raw data and its revision
// (nil, the zero revision, ErrAbsent when there is none), for operators who
// must see what an unreadable one holds.
func (s *Store) ReadBreadcrumbData(ctx context.Context) ([]byte, Revision, error) {
	key := s.layout.Breadcrumb()
	cur, err := readOne(ctx, s.kv, key)
	if err != nil {
		return nil, Revision{}, fmt.Errorf("reading breadcrumb %s: %w", key, err)
	}
	if cur == nil {
		return nil, Revision{}, breadcrumb.ErrAbsent
	}
	return cur.Data, cur.Rev, nil
}

// ClearBreadcrumb deletes the breadcrumb if it is still at rev, whatever
// it holds: the operator's tool, once the old leader is known to be down.
// A breadcrumb a leader rewrote since the read stays: an error wrapping
// breadcrumb.ErrChanged; one that is gone is an error wrapping
// breadcrumb.ErrAbsent. (A ZooKeeper znode's version starts again at 0
// when it is deleted and created anew, so a breadcrumb deleted and written
// from scratch in between, within the command's few milliseconds, would go
// unseen there; etcd's revisions never repeat.)
func (s *Store) ClearBreadcrumb(ctx context.Context, rev Revision) error {
	key := s.layout.Breadcrumb()
	if !rev.Exists() {
		// Anything else would delete whatever is there: never unconditional.
		return fmt.Errorf("clearing breadcrumb %s: no revision read (%v)", key, rev)
	}
	_, err := s.kv.Commit(ctx, Delete(key, rev))
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrConflict) {
		return fmt.Errorf("clearing breadcrumb %s: %w", key, err)
	}
	cur, rerr := readOne(ctx, s.kv, key)
	if rerr == nil && cur == nil {
		return fmt.Errorf("clearing breadcrumb %s: %w", key, breadcrumb.ErrAbsent)
	}
	return fmt.Errorf("clearing breadcrumb %s at revision %v: %w", key, rev, breadcrumb.ErrChanged)
}

// --- history and leader position, outside a term ---

// History returns the cluster's history, oldest first (nil: none yet). An
// unreadable record is a *HistoryCorruptError.
func (s *Store) History(ctx context.Context) ([]HistoryEntry, error) {
	key := s.layout.History()
	cur, err := readOne(ctx, s.kv, key)
	if err != nil {
		return nil, fmt.Errorf("reading the history %s: %w", key, err)
	}
	if cur == nil {
		return nil, nil
	}
	return DecodeHistory(cur.Data)
}

// errUnreadablePosition marks a LeaderPosition record that cannot be
// decoded.
var errUnreadablePosition = errors.New("not a leader position")

// readLeaderPosition reads the LeaderPosition record (nil: none) with the
// record read. A record that cannot be decoded is an error wrapping
// errUnreadablePosition, not "none": a candidate must not judge its lag
// against nothing when the leader's last position is merely unreadable.
func readLeaderPosition(ctx context.Context, r Reader, key string) (*LeaderPosition, *Item, error) {
	cur, err := readOne(ctx, r, key)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the leader position %s: %w", key, err)
	}
	if cur == nil {
		return nil, nil, nil
	}
	var p LeaderPosition
	if err := json.Unmarshal(cur.Data, &p); err != nil || p.Position < 0 {
		return nil, cur, fmt.Errorf("the leader position %s is unreadable (%q): %w", key, cur.Data, errUnreadablePosition)
	}
	return &p, cur, nil
}

// ReadLeaderPosition reads the last position a promoted leader published
// (nil, nil: none yet), outside any term: for status displays.
func (s *Store) ReadLeaderPosition(ctx context.Context) (*LeaderPosition, error) {
	p, _, err := readLeaderPosition(ctx, s.kv, s.layout.LeaderPosition())
	return p, err
}

// --- the leader view ---

// Leader reads the promoted leader once (see LeaderOf; nil: none).
func (s *Store) Leader(ctx context.Context) (*Leader, error) { return s.leader(ctx, s.kv) }

// WatchLeader calls fn with the promoted leader (nil: none) now and after
// every change of it (another leadership, or any field of the same one),
// until ctx ends. Read failures are retried and do not reach fn: a lost
// connection is not "no leader", the last value stands until a read
// succeeds again.
//
// Between leadership changes a round reads only the breadcrumb and the
// member record of the node it names (leaderNamed), so a change of
// another member's record (a standby's position, every second on a busy
// cluster) wakes no leader view: LeaderOf looks at no other record.
func (s *Store) WatchLeader(ctx context.Context, fn func(*Leader)) error {
	var named string // the node the last breadcrumb read named
	read := func(ctx context.Context, r Reader) (*Leader, error) { return s.leaderNamed(ctx, r, &named) }
	return watchReads(ctx, s, read, (*Leader).Equal, fn)
}

// leaderNamed is leader reading only what LeaderOf looks at when it can:
// *named is the node the previous round's breadcrumb named, and a round
// reads that node's member record, then the breadcrumb (in one Read, one
// snapshot where the backend can, in leader's order). When the breadcrumb
// still names that node, or none, that is all LeaderOf needs. The first
// round, and a round whose breadcrumb names another node (a successor
// wrote its own), read what leader reads instead and remember whom the
// breadcrumb names. So a round is one Read, but a leadership change's,
// and it returns what leader would have: LeaderOf picks no member but the
// breadcrumb's, at the key that node publishes its record under.
func (s *Store) leaderNamed(ctx context.Context, r Reader, named *string) (*Leader, error) {
	bcKey := s.layout.Breadcrumb()
	if *named != "" {
		res, err := r.Read(ctx, One(s.layout.Member(*named)), One(bcKey))
		if err != nil {
			return nil, fmt.Errorf("reading the leader's member record and the breadcrumb: %w", err)
		}
		bc, ok := s.crumbOf(res[1])
		if !ok || bc == nil {
			return nil, nil // none, or unreadable: nobody is promoted
		}
		if bc.NodeID == *named {
			var ms []Member
			if m := res[0].Item(); m != nil {
				ms = decodeMembers([]Item{*m})
			}
			return LeaderOf(bc, ms), nil
		}
	}
	ld, bc, err := s.leaderAndCrumb(ctx, r)
	if err != nil {
		return nil, err
	}
	*named = ""
	if bc != nil && plainName(bc.NodeID) {
		*named = bc.NodeID
	}
	return ld, nil
}

// plainName reports whether id names a member record of its own under
// the members directory (a node id the config accepts always does).
func plainName(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}

// leader reads the member records, then the breadcrumb (in one snapshot
// where the backend can), and picks the promoted leader. The breadcrumb
// is read last because a successor's takeover begins with its breadcrumb
// write, long before its member record says leader: a member record in
// leader state followed by a breadcrumb still naming it means no
// successor had begun when the read ended, so a leader already being
// fenced is not returned. An unreadable breadcrumb names nobody: no node
// promotes past it until an operator clears it, so there is no promoted
// leader either.
func (s *Store) leader(ctx context.Context, r Reader) (*Leader, error) {
	ld, _, err := s.leaderAndCrumb(ctx, r)
	return ld, err
}

// leaderAndCrumb is leader, also returning the breadcrumb it read (nil:
// none, or unreadable).
func (s *Store) leaderAndCrumb(ctx context.Context, r Reader) (*Leader, *breadcrumb.Record, error) {
	res, err := r.Read(ctx, Below(s.layout.MembersDir()), One(s.layout.Breadcrumb()))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the member records and the breadcrumb: %w", err)
	}
	bc, _ := s.crumbOf(res[1])
	return LeaderOf(bc, decodeMembers(res[0].Items)), bc, nil
}

// crumbOf decodes the breadcrumb a Read returned: nil and true when there
// is none, nil and false when it is unreadable (it names nobody: no node
// promotes past it until an operator clears it).
func (s *Store) crumbOf(res Result) (*breadcrumb.Record, bool) {
	it := res.Item()
	if it == nil {
		return nil, true
	}
	rec, err := breadcrumb.Decode(it.Data)
	if err != nil {
		s.log.Debug("unreadable breadcrumb: no promoted leader", "key", s.layout.Breadcrumb(), "err", err)
		return nil, false
	}
	return &rec, true
}

// --- moving the cluster (failoverd migrate); see Admit ---

// ClusterRecord reads the cluster record (nil and the zero revision: none).
func (s *Store) ClusterRecord(ctx context.Context) (*ClusterRecord, Revision, error) {
	key := s.layout.Config()
	cur, err := readOne(ctx, s.kv, key)
	if err != nil {
		return nil, Revision{}, fmt.Errorf("reading the cluster record %s: %w", key, err)
	}
	if cur == nil {
		return nil, Revision{}, nil
	}
	var rec ClusterRecord
	if err := json.Unmarshal(cur.Data, &rec); err != nil {
		return nil, Revision{}, fmt.Errorf("the cluster record %s is unreadable (%q): %w", key, cur.Data, err)
	}
	return &rec, cur.Rev, nil
}

// WriteClusterRecord writes rec if the record is still at rev (the zero
// revision: creates it, failing if it exists), and returns the record's
// new revision. stamp is the backend's write stamp of the write (a zxid,
// an etcd revision): above every epoch the backend gave a term of any
// cluster it holds.
func (s *Store) WriteClusterRecord(ctx context.Context, rec ClusterRecord, rev Revision) (newRev Revision, stamp int64, err error) {
	key := s.layout.Config()
	data, err := json.Marshal(rec)
	if err != nil {
		return Revision{}, 0, err
	}
	c, err := s.kv.Commit(ctx, Put(key, data, rev))
	if err != nil {
		return Revision{}, 0, fmt.Errorf("writing the cluster record %s: %w", key, err)
	}
	return c.Revs[0], c.Stamp, nil
}

// carried lists the records a move copies, with where each goes in c.
func (s *Store) carried(c *Carried) []struct {
	key string
	to  *[]byte
} {
	return []struct {
		key string
		to  *[]byte
	}{{s.layout.Breadcrumb(), &c.Breadcrumb}, {s.layout.History(), &c.History}, {s.layout.Pause(), &c.Pause}}
}

// ReadCarried reads the records a move copies, as stored.
func (s *Store) ReadCarried(ctx context.Context) (Carried, error) {
	var c Carried
	for _, r := range s.carried(&c) {
		cur, err := readOne(ctx, s.kv, r.key)
		if err != nil {
			return Carried{}, fmt.Errorf("reading %s: %w", r.key, err)
		}
		if cur != nil {
			*r.to = append([]byte{}, cur.Data...)
		}
	}
	return c, nil
}

// WriteCarried creates the records c holds, all or none; each must be
// absent, or hold what c holds (a move run again after it stopped half
// way).
func (s *Store) WriteCarried(ctx context.Context, c Carried) error {
	var ops []Op
	for _, r := range s.carried(&c) {
		if *r.to == nil {
			continue
		}
		cur, err := readOne(ctx, s.kv, r.key)
		if err != nil {
			return fmt.Errorf("reading %s: %w", r.key, err)
		}
		if cur != nil && bytes.Equal(cur.Data, *r.to) {
			continue
		}
		ops = append(ops, Put(r.key, *r.to, Revision{}))
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := s.kv.Commit(ctx, ops...); err != nil {
		return fmt.Errorf("writing the carried records (%v): %w", c.Names(), err)
	}
	return nil
}

// Backend is the record store s is built on, for the conformance suite's
// tests of the primitives themselves.
func (s *Store) Backend() Backend { return s.kv }
