// Package zkcluster keeps failoverd's cluster records in ZooKeeper: member
// records, the manual failover request, the cluster record and the join
// checks, the breadcrumb, and the election seen as cluster.Term values. The
// paths come from cluster.Layout; this package decides only how each record
// is stored (ephemeral or persistent, guarded by what, version-checked or
// not).
package zkcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/zk"
)

// Config says whose records a Store keeps.
type Config struct {
	Layout cluster.Layout
	// NodeID and Instance identify this process; only PublishMember and
	// CheckJoin's callers (daemons) need them, a CLI leaves them empty.
	// Instance is the random id of the failoverd process (new at every
	// start): it tells our own earlier session's member record from one of
	// another live process using the same node id.
	NodeID, Instance string
}

// Deps are the parts a Store uses.
type Deps struct {
	Client *zk.Client   // required; the Store uses its current session
	Logger *slog.Logger // nil: discard
}

// Store reads and writes one cluster's records over a client's sessions.
// Every method uses the client's current session (waiting for one when
// there is none, within ctx); its methods are safe for concurrent use.
type Store struct {
	client *zk.Client
	layout cluster.Layout
	nodeID string
	inst   string
	log    *slog.Logger

	mu         sync.Mutex
	sessCh     chan struct{} // closed when a new session begins (SessionChanged)
	followOnce sync.Once

	// beforeHistoryWrite, set by tests only, runs in AppendHistory between
	// the read and the write: where a concurrent change lands.
	beforeHistoryWrite func()
	// afterFailoverEvent, set by tests only, runs in WatchFailover when its
	// watch fired, before the read again: a watch slow to catch up.
	afterFailoverEvent func()
}

// New makes a Store; it does not connect.
func New(cfg Config, deps Deps) (*Store, error) {
	if deps.Client == nil {
		return nil, errors.New("zkcluster: a client is required")
	}
	if cfg.Layout.Root == "" || cfg.Layout.Cluster == "" {
		return nil, errors.New("zkcluster: the layout needs a root and a cluster")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{
		client: deps.Client, layout: cfg.Layout, nodeID: cfg.NodeID, inst: cfg.Instance,
		log:    deps.Logger.With("component", "zkcluster"),
		sessCh: make(chan struct{}),
	}, nil
}

// Layout is where the Store's records live.
func (s *Store) Layout() cluster.Layout { return s.layout }

// Connected reports, without I/O, whether a live session is connected to a
// server.
func (s *Store) Connected() bool {
	sess := s.client.Current()
	if sess == nil {
		return false
	}
	st, _ := sess.State()
	return st == zk.StateConnected
}

// SessionChanged returns a channel closed when a new session begins (the
// first one included): ephemeral records of the old one are gone, so
// whoever needs them republishes, and checks made on it are made again.
// Call it again after it fired for the next change.
func (s *Store) SessionChanged() <-chan struct{} {
	s.followOnce.Do(func() { go s.followSessions() })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessCh
}

// followSessions closes sessCh at every new session until the client is
// closed.
func (s *Store) followSessions() {
	var last *zk.Session
	for {
		sess, err := s.client.Session(context.Background())
		if errors.Is(err, zk.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(time.Second) // setup failed; Session itself paces the retries
			continue
		}
		if sess != last {
			last = sess
			s.mu.Lock()
			close(s.sessCh)
			s.sessCh = make(chan struct{})
			s.mu.Unlock()
		}
		<-sess.Done()
	}
}

// Fresh returns once the ZooKeeper server this client is connected to has
// answered a sync, proof that it is in touch with the quorum's leader: a
// server cut off from its quorum keeps its clients connected and serves
// them old reads (until syncLimit x tickTime, which may exceed the session
// timeout) but cannot answer a sync. ZooKeeper answers a session in order,
// so every watch event of a change committed before the sync was sent
// reached this client before the answer.
func (s *Store) Fresh(ctx context.Context) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	if err := sess.Sync(ctx, s.layout.Dir()); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("sync with the zookeeper quorum: %w", err)
	}
	return nil
}

// session is the client's current session, waiting for one within ctx.
func (s *Store) session(ctx context.Context) (*zk.Session, error) {
	sess, err := s.client.Session(ctx)
	if err != nil {
		return nil, fmt.Errorf("no zookeeper session: %w", err)
	}
	return sess, nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// --- members ---

// PublishMember writes our member record: an ephemeral znode of the current
// session, so it goes when the node does. A record owned by another session
// is replaced only when it carries our instance id (an earlier session of
// this very process) or has no live owner; one of another live process is a
// duplicate node id (*cluster.DuplicateIDError), and nothing is written.
func (s *Store) PublishMember(ctx context.Context, m cluster.Member) error {
	if s.nodeID == "" || s.inst == "" {
		return errors.New("zkcluster: publishing a member record needs the node id and instance")
	}
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	path := s.layout.Member(s.nodeID)
	old, st, err := sess.Get(ctx, path)
	switch {
	case err == nil && st.EphemeralOwner == sess.ID():
		_, err = sess.Set(ctx, path, data, -1)
		return err
	case err == nil:
		var other cluster.Member
		_ = json.Unmarshal(old, &other)
		if st.EphemeralOwner != 0 && other.Instance != s.inst {
			return &cluster.DuplicateIDError{NodeID: s.nodeID, Host: other.Host, Instance: other.Instance}
		}
		// Ours from an earlier session, or not ephemeral (no live owner).
		if err := sess.Delete(ctx, path, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	case !errors.Is(err, zk.ErrNoNode):
		return err
	}
	if err := sess.EnsurePath(ctx, s.layout.MembersDir()); err != nil {
		return err
	}
	_, _, err = sess.Create(ctx, path, data, zk.Ephemeral)
	if errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("member record %s created meanwhile: %w", path, err) // looked at on the next round
	}
	return err
}

// Members lists the member records, ordered by node id. A record that
// cannot be decoded is listed with State "unreadable".
func (s *Store) Members(ctx context.Context) ([]cluster.Member, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.members(ctx, sess, nil)
}

// watchSet holds the one-shot watches armed on one session: one per znode
// and kind, re-armed only after it fired, so that a long watch does not
// pile up watches on records that do not change. Every pass reads every
// record afresh (with a watch where none is armed, without one where it
// is): a value is as fresh as the read that returned it. Only the
// goroutine of one watchReads loop uses a watchSet.
type watchSet struct {
	ctx   context.Context // ends with the session's round: stops the forwarders
	armed map[string]bool
	fired chan string
}

func newWatchSet(ctx context.Context) *watchSet {
	return &watchSet{ctx: ctx, armed: map[string]bool{}, fired: make(chan string, 16)}
}

// arm records that key's watch ch is armed and forwards its event.
func (w *watchSet) arm(key string, ch <-chan zk.Event) {
	w.armed[key] = true
	go func() {
		select {
		case <-ch:
			select {
			case w.fired <- key:
			case <-w.ctx.Done():
			}
		case <-w.ctx.Done():
		}
	}()
}

// members reads the member records. With w, it arms the watches w does
// not hold yet: on the list (or, with no directory yet, on its creation)
// and on every record.
func (s *Store) members(ctx context.Context, sess *zk.Session, w *watchSet) ([]cluster.Member, error) {
	dir := s.layout.MembersDir()
	var ids []string
	var err error
	if w == nil || w.armed["children"] {
		ids, err = sess.Children(ctx, dir)
	} else {
		var ch <-chan zk.Event
		ids, ch, err = sess.ChildrenW(ctx, dir)
		if err == nil {
			w.arm("children", ch)
		}
	}
	if errors.Is(err, zk.ErrNoNode) {
		err = nil
		if w != nil && !w.armed["exists"] {
			// No member yet: watch for the directory's creation.
			var ok bool
			var ch <-chan zk.Event
			ok, _, ch, err = sess.ExistsW(ctx, dir)
			if err == nil {
				w.arm("exists", ch)
			}
			if err == nil && ok {
				return s.members(ctx, sess, w) // created meanwhile
			}
		}
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	if w == nil {
		return s.getMembers(ctx, sess, ids)
	}
	var out []cluster.Member
	for _, id := range ids {
		var b []byte
		var err error
		key := "data:" + id
		if w.armed[key] {
			b, _, err = sess.Get(ctx, s.layout.Member(id))
		} else {
			var ch <-chan zk.Event
			b, _, ch, err = sess.GetW(ctx, s.layout.Member(id))
			if err == nil {
				w.arm(key, ch)
			}
		}
		if errors.Is(err, zk.ErrNoNode) {
			continue // gone meanwhile (the list watch fires)
		}
		if err != nil {
			// Not "no such member": a record skipped on a lost
			// connection would read as a leader gone. The whole read
			// is retried.
			return nil, fmt.Errorf("reading member %s: %w", id, err)
		}
		var m cluster.Member
		if json.Unmarshal(b, &m) != nil {
			m = cluster.Member{NodeID: id, State: "unreadable"}
		}
		out = append(out, m)
	}
	return out, nil
}

// getMembers reads the member records ids (sorted) without watches, all
// requests in flight at once: a winner reads them on its takeover's
// critical path (the rules at a win), where one round trip per member
// would add up. Same outcome as members' loop: a record gone meanwhile is
// left out, one that cannot be decoded is listed as "unreadable", any
// other error fails the whole read.
func (s *Store) getMembers(ctx context.Context, sess *zk.Session, ids []string) ([]cluster.Member, error) {
	type got struct {
		data []byte
		err  error
	}
	res := make([]got, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i].data, _, res[i].err = sess.Get(ctx, s.layout.Member(id))
		}()
	}
	wg.Wait()
	var out []cluster.Member
	for i, id := range ids {
		switch err := res[i].err; {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading member %s: %w", id, err)
		}
		var m cluster.Member
		if json.Unmarshal(res[i].data, &m) != nil {
			m = cluster.Member{NodeID: id, State: "unreadable"}
		}
		out = append(out, m)
	}
	return out, nil
}

// WatchMembers calls fn with the member records (as Members lists them)
// now and after every change, until ctx ends; it returns ctx's error. It
// follows the client to new sessions; read failures are retried and do not
// reach fn. Consecutive equal lists are delivered once.
func (s *Store) WatchMembers(ctx context.Context, fn func([]cluster.Member)) error {
	return watchReads(ctx, s, s.members, slices.Equal[[]cluster.Member], fn)
}

// watchReads runs read with a watch set on the client's current session,
// calls fn with its value (the first one, then each that differs from the
// last delivered by equal), and reads again when a watch fired, until ctx
// ends; it returns ctx's error. A new session starts a new watch set (the
// old one's watches went with it) and reads everything again. A failed read
// is retried every half second and never reaches fn: while the connection
// is down, the last value delivered stands, and after the reconnect an
// unchanged value is not delivered again.
func watchReads[T any](ctx context.Context, s *Store, read func(context.Context, *zk.Session, *watchSet) (T, error),
	equal func(a, b T) bool, fn func(T)) error {
	var last T
	first := true
	for ctx.Err() == nil {
		sess, err := s.client.Session(ctx)
		if err != nil {
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		// Watches belong to a session: a new session starts a new set.
		sctx, stop := context.WithCancel(ctx)
		w := newWatchSet(sctx)
		for sctx.Err() == nil {
			v, err := read(ctx, sess, w)
			if err != nil {
				select {
				case <-sess.Done():
					stop()
				default:
					sleepCtx(ctx, 500*time.Millisecond)
				}
				continue
			}
			if first || !equal(v, last) {
				first, last = false, v
				fn(v)
			}
			select {
			case key := <-w.fired:
				w.forget(key)
				w.drain()
			case <-sess.Done():
				stop()
			case <-ctx.Done():
			}
		}
		stop()
	}
	return ctx.Err()
}

// drain forgets every watch that fired meanwhile: they are re-armed on
// the next read.
func (w *watchSet) drain() {
	for {
		select {
		case key := <-w.fired:
			w.forget(key)
		default:
			return
		}
	}
}

// forget drops key's watch, which fired: the next read arms it again.
func (w *watchSet) forget(key string) { delete(w.armed, key) }

// --- join checks ---

// CheckJoin runs the checks that must pass before this node campaigns in
// election mode mode ("" skips them): the election directory holds no
// znode of the other mode, and the cluster record admits mode and home
// (cluster.Admit; it is created, by a node with no home only, when there is
// none). A refusal is a *cluster.ModeMismatchError or a *cluster.MovedError;
// any other error means the checks could not run. The cluster record is
// read every time (it is small): a record marked moved refuses at once.
func (s *Store) CheckJoin(ctx context.Context, mode, home string) (cluster.ClusterRecord, error) {
	if mode == "" {
		return cluster.ClusterRecord{}, nil
	}
	sess, err := s.session(ctx)
	if err != nil {
		return cluster.ClusterRecord{}, err
	}
	// The directory first: a node must not record its mode over a cluster
	// whose nodes of the other mode are campaigning.
	if err := s.checkElectionDir(ctx, sess, mode); err != nil {
		return cluster.ClusterRecord{}, err
	}
	where := s.layout.Config()
	r, err := s.joinRecord(ctx, sess, mode, home)
	if err != nil {
		return cluster.ClusterRecord{}, err
	}
	// r is nil only for a node with a home, which Admit then refuses.
	if err := cluster.Admit(r, where, mode, home); err != nil {
		return cluster.ClusterRecord{}, err
	}
	return *r, nil
}

// joinRecord reads the cluster record (nil: there is none and home is set,
// so none is created), creating it when there is none and home is "", and
// giving a record of an earlier version its ID. An unreadable record is a
// *cluster.ModeMismatchError.
func (s *Store) joinRecord(ctx context.Context, sess *zk.Session, mode, home string) (*cluster.ClusterRecord, error) {
	path := s.layout.Config()
	for attempt := 0; ; attempt++ {
		b, st, err := sess.Get(ctx, path)
		if errors.Is(err, zk.ErrNoNode) && home != "" {
			return nil, nil
		}
		if errors.Is(err, zk.ErrNoNode) && attempt < 3 {
			if err := sess.EnsurePath(ctx, s.layout.Dir()); err != nil {
				return nil, err
			}
			rec := cluster.ClusterRecord{ElectionMode: mode, ID: cluster.NewRecordID()}
			data, _ := json.Marshal(rec)
			_, _, err = sess.Create(ctx, path, data, zk.Persistent)
			if err == nil {
				s.log.Info("cluster record created", "path", path, "election_mode", mode, "record_id", rec.ID)
				return &rec, nil
			}
			if !errors.Is(err, zk.ErrNodeExists) {
				return nil, err
			}
			continue // another node was first: read its record
		}
		if err != nil {
			return nil, err
		}
		var rec cluster.ClusterRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, &cluster.ModeMismatchError{Mode: mode, Cluster: path, Why: fmt.Sprintf("the cluster record %s is unreadable (%q)", path, b)}
		}
		if rec.ID != "" || rec.ElectionMode == "" {
			return &rec, nil
		}
		if attempt >= 3 {
			return nil, fmt.Errorf("giving the cluster record %s its id: it changed at every try", path)
		}
		// A record of an earlier version: give it its ID, once (a node
		// that wrote first wins; read its ID).
		rec.ID = cluster.NewRecordID()
		data, _ := json.Marshal(rec)
		if _, err := sess.Set(ctx, path, data, st.Version); err == nil {
			s.log.Info("cluster record given its id", "path", path, "record_id", rec.ID)
			return &rec, nil
		} else if !errors.Is(err, zk.ErrBadVersion) {
			return nil, err
		}
	}
}

// checkElectionDir refuses to join when the election directory holds
// znodes of the other mode (a node of another mode, or of a version that
// does not know the cluster record, is campaigning).
func (s *Store) checkElectionDir(ctx context.Context, sess *zk.Session, mode string) error {
	dir := s.layout.ElectionDir()
	kids, err := sess.Children(ctx, dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if foreignCandidate(k, mode) {
			return &cluster.ModeMismatchError{Mode: mode, Cluster: s.layout.Config(),
				Why: fmt.Sprintf("the election directory %s holds %s, a znode of the other mode", dir, k)}
		}
	}
	return nil
}

// foreignCandidate reports whether the election znode name belongs to the
// other mode than mode: fair candidates are c_<guid>-<seq>, the unfair lock
// is "lock" (package election's recipe names).
func foreignCandidate(name, mode string) bool {
	fair := strings.HasPrefix(name, "c_")
	unfair := name == "lock"
	return (mode == "fair" && unfair) || (mode == "unfair" && fair)
}

// --- failover request ---

// RequestFailover replaces whatever request is there (an earlier one's
// requester gave up on it) with r, as an EPHEMERAL znode of the current
// session: the request lives only while the requester waits for its
// outcome. If the requester dies (kill -9, a crash, a lost connection),
// ZooKeeper deletes it when the session expires, and the nodes standing
// aside for it rejoin the election; a node that restarts never finds a
// request whose requester is gone, so no node stands aside longer than the
// wait plus one session timeout. (Requests of earlier CLIs are persistent:
// the nodes delete one that is not done by its timeout, see ExpireFailover.)
func (s *Store) RequestFailover(ctx context.Context, r cluster.FailoverRequest) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	path := s.layout.Failover()
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err := sess.Delete(ctx, path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("replacing the failover request %s: %w", path, err)
		}
		_, _, err := sess.Create(ctx, path, data, zk.Ephemeral)
		if errors.Is(err, zk.ErrNodeExists) && attempt < 3 {
			continue // another requester was faster: ours replaces it
		}
		if err != nil {
			return fmt.Errorf("writing the failover request %s: %w", path, err)
		}
		return nil
	}
}

// ErrFailoverStands is ProposeFailover's refusal: a request that is not
// done stands already.
var ErrFailoverStands = errors.New("a failover request stands already")

// ProposeFailover writes r, a request a node makes by itself (a handover
// to a better candidate), as RequestFailover does, but only when no
// request stands: none, or one that is done or unreadable. It never
// replaces a standing request (an operator's failover --to, or another
// node's handover), which it reports with ErrFailoverStands: the operator
// is in charge, and the request read before deciding may be older than
// one written since.
func (s *Store) ProposeFailover(ctx context.Context, r cluster.FailoverRequest) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	path := s.layout.Failover()
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		cur, st, err := s.getFailover(ctx, sess)
		if err != nil {
			return err
		}
		if cur != nil && !cur.Done {
			return fmt.Errorf("not writing the failover request to %s: %w (to %s, by %s)", r.To, ErrFailoverStands, cur.To, cur.By)
		}
		create := zk.CreateOp{Path: path, Data: data, Mode: zk.Ephemeral}
		if st.Czxid == 0 { // none there
			_, _, err = sess.Create(ctx, path, data, zk.Ephemeral)
		} else { // done or unreadable: replace exactly what was read
			err = sess.Multi(ctx, zk.DeleteOp{Path: path, Version: st.Version}, create)
		}
		if (errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode)) && attempt < 3 {
			continue // changed since we read it: judge again
		}
		if err != nil {
			return fmt.Errorf("writing the failover request %s: %w", path, err)
		}
		return nil
	}
}

// WithdrawFailover deletes the failover request whose Key is id, and only
// if it is an ephemeral of our current session: another requester may have
// replaced it meanwhile. Nothing there (or not ours) is not an error.
func (s *Store) WithdrawFailover(ctx context.Context, id string) error {
	sess := s.client.Current()
	if sess == nil {
		return nil // our ephemeral request went with our session
	}
	path := s.layout.Failover()
	r, st, err := s.getFailover(ctx, sess)
	if err != nil || r == nil || st.EphemeralOwner != sess.ID() || r.Key() != id {
		return err
	}
	if err := sess.Delete(ctx, path, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("withdrawing the failover request %s: %w", path, err)
	}
	return nil
}

// getFailover reads the failover request on sess (nil: none, or one that
// cannot be read, see decodeFailover) with its stat.
func (s *Store) getFailover(ctx context.Context, sess *zk.Session) (*cluster.FailoverRequest, zk.Stat, error) {
	path := s.layout.Failover()
	data, st, err := sess.Get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, zk.Stat{}, nil
	}
	if err != nil {
		return nil, zk.Stat{}, fmt.Errorf("reading the failover request %s: %w", path, err)
	}
	return cluster.DecodeFailover(data), st, nil
}

// ReadFailover reads the standing failover request (nil: none or
// unreadable) on the client's current session: after a write of this
// client was answered, it sees that write or a later state (a session's
// view only moves forward, and a new session of the client starts from
// the newest state it saw).
func (s *Store) ReadFailover(ctx context.Context) (*cluster.FailoverRequest, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	r, _, err := s.getFailover(ctx, sess)
	return r, err
}

// WatchFailover calls fn with the standing failover request (nil: none or
// unreadable) now and after every change, until ctx ends; it returns ctx's
// error. It follows the client to new sessions (re-arming its watch) and
// retries read failures, which do not reach fn. Consecutive equal values
// are delivered once.
func (s *Store) WatchFailover(ctx context.Context, fn func(*cluster.FailoverRequest)) error {
	path := s.layout.Failover()
	var last *cluster.FailoverRequest
	first := true
	for ctx.Err() == nil {
		sess, err := s.client.Session(ctx)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		data, _, ch, err := sess.GetW(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = sess.ExistsW(ctx, path)
			if err == nil && ok {
				continue // created meanwhile: read it
			}
			data = nil
		}
		if err != nil {
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		r := cluster.DecodeFailover(data)
		if first || !cluster.SameRequest(r, last) {
			first, last = false, r
			fn(r)
		}
		select {
		case <-ctx.Done():
		case <-ch:
			if s.afterFailoverEvent != nil {
				s.afterFailoverEvent()
			}
		case <-sess.Done():
		}
	}
	return ctx.Err()
}

// ExpireFailover deletes the failover request whose Key is id if it is
// still there and not done: its timeout ran out (as measured by the
// caller) without the target being promoted, so that a request whose
// requester died does not hold nodes that start later. A request withdrawn,
// replaced or marked done meanwhile is left alone.
func (s *Store) ExpireFailover(ctx context.Context, id string) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	path := s.layout.Failover()
	r, st, err := s.getFailover(ctx, sess)
	if err != nil || r == nil || r.Key() != id || r.Done {
		return err
	}
	err = sess.Delete(ctx, path, st.Version)
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting the expired failover request %s: %w", path, err)
	}
	s.log.Warn("manual failover request timed out without the target being promoted; deleted it", "to", r.To)
	return nil
}

// --- breadcrumb and election, outside a term ---

// ReadBreadcrumb returns the breadcrumb and its revision (see
// ReadBreadcrumbAt: ErrAbsent with the zero revision when there is none, a
// *breadcrumb.CorruptError when it cannot be trusted).
func (s *Store) ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, cluster.Revision, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return breadcrumb.Record{}, cluster.Revision{}, err
	}
	r, v, err := ReadBreadcrumbAt(ctx, sess, s.layout.Breadcrumb())
	return r, revision(v), err
}

// ReadBreadcrumbData returns the breadcrumb's raw data and its revision
// (nil, the zero revision, ErrAbsent when there is none), for operators who
// must see what an unreadable one holds.
func (s *Store) ReadBreadcrumbData(ctx context.Context) ([]byte, cluster.Revision, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, cluster.Revision{}, err
	}
	path := s.layout.Breadcrumb()
	data, st, err := sess.Get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, cluster.Revision{}, breadcrumb.ErrAbsent
	}
	if err != nil {
		return nil, cluster.Revision{}, fmt.Errorf("reading breadcrumb %s: %w", path, err)
	}
	return data, revision(st.Version), nil
}

// ClearBreadcrumb deletes the breadcrumb if it is still at rev, whatever it
// holds: the operator's tool, once the old leader is known to be down (see
// ClearBreadcrumbAt: breadcrumb.ErrChanged when it was rewritten since,
// breadcrumb.ErrAbsent when it is gone).
func (s *Store) ClearBreadcrumb(ctx context.Context, rev cluster.Revision) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	return ClearBreadcrumbAt(ctx, sess, s.layout.Breadcrumb(), version(rev))
}

// Queue lists the candidates' node ids in election order (see
// election.Queue), for status displays.
func (s *Store) Queue(ctx context.Context) ([]string, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	return election.Queue(ctx, sess, s.layout.ElectionDir())
}

// --- history ---

// History returns the cluster's history, oldest first (nil: none yet). An
// unreadable record is a *cluster.HistoryCorruptError.
func (s *Store) History(ctx context.Context) ([]cluster.HistoryEntry, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	path := s.layout.History()
	data, _, err := sess.Get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the history %s: %w", path, err)
	}
	return cluster.DecodeHistory(data)
}
