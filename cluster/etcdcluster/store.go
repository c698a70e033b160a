package etcdcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// Config says whose records a Store keeps.
type Config struct {
	// Layout names the records; its paths are the etcd keys.
	Layout cluster.Layout
	// NodeID and Instance identify this process; only PublishMember and
	// CheckJoin's callers (daemons) need them, a CLI leaves them empty.
	// Instance is the random id of the failoverd process (new at every
	// start): it tells a member record of our own earlier session from
	// one of another live process using the same node id.
	NodeID, Instance string
}

// Deps are the parts a Store uses.
type Deps struct {
	Conn   *Conn        // required; its sessions own the ephemeral records
	Logger *slog.Logger // nil: discard
}

// Store reads and writes one cluster's records in etcd (cluster.Records).
// Its methods are safe for concurrent use; it keeps no copy of any record.
type Store struct {
	conn   *Conn
	cli    *clientv3.Client
	layout cluster.Layout
	nodeID string
	inst   string
	log    *slog.Logger

	// Set by tests only: afterWatchRead runs in a watch loop between its
	// read and the watch from the revision after it (where a compaction
	// lands); watchInterrupted sees why a watch ended other than by an
	// event.
	afterWatchRead   func()
	watchInterrupted func(error)
	// beforeHistoryWrite, set by tests only, runs in AppendHistory between
	// the read and the write: where a concurrent change lands.
	beforeHistoryWrite func()
}

var _ cluster.Records = (*Store)(nil)

// New makes a Store on conn.
func New(cfg Config, deps Deps) (*Store, error) {
	if deps.Conn == nil {
		return nil, errors.New("etcdcluster: a connection is required")
	}
	if cfg.Layout.Root == "" || cfg.Layout.Cluster == "" || !strings.HasPrefix(cfg.Layout.Root, "/") {
		return nil, errors.New("etcdcluster: the layout needs an absolute root and a cluster")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{
		conn: deps.Conn, cli: deps.Conn.Client(), layout: cfg.Layout, nodeID: cfg.NodeID, inst: cfg.Instance,
		log: deps.Logger.With("component", "etcdcluster"),
	}, nil
}

// Layout is where the Store's records live.
func (s *Store) Layout() cluster.Layout { return s.layout }

// Connected reports, without I/O, whether the session's newest renewal
// was answered in time (Conn.Connected).
func (s *Store) Connected() bool { return s.conn.Connected() }

// SessionChanged returns a channel closed when a new session (a new lease)
// begins: the records bound to the old lease are gone.
func (s *Store) SessionChanged() <-chan struct{} { return s.conn.SessionChanged() }

// dir is the key prefix of a directory of the layout (ending in "/").
func dir(p string) string { return p + "/" }

// get reads key (nil: absent) and the revision of the read.
func (s *Store) get(ctx context.Context, key string) (*kv, int64, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision, nil
	}
	return &kv{resp.Kvs[0].Value, resp.Kvs[0].ModRevision, clientv3.LeaseID(resp.Kvs[0].Lease)}, resp.Header.Revision, nil
}

// mvccKV is a key as etcd returns it.
type mvccKV = mvccpb.KeyValue

// kv is a key's value with its mod revision and lease.
type kv struct {
	value []byte
	mod   int64
	lease clientv3.LeaseID
}

// unchanged compares key against what was read (nil: absent).
func unchanged(key string, k *kv) clientv3.Cmp {
	if k == nil {
		return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", k.mod)
}

// ErrConflict means a compare-and-set found the record changed since it
// was read.
var ErrConflict = errors.New("etcdcluster: the record changed since it was read")

// --- members ---

// PublishMember writes our member record, bound to the session's lease so
// it goes with the session. A record of another lease is replaced only
// when it carries our instance id (an earlier session of this very
// process) or no lease at all; one of another live process is a duplicate
// node id (*cluster.DuplicateIDError), and nothing is written. (A key
// bound to a lease exists only while the lease lives.)
func (s *Store) PublishMember(ctx context.Context, m cluster.Member) error {
	if s.nodeID == "" || s.inst == "" {
		return errors.New("etcdcluster: publishing a member record needs the node id and instance")
	}
	sess, err := s.conn.Session(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	key := s.layout.Member(s.nodeID)
	put := clientv3.OpPut(key, string(data), clientv3.WithLease(sess.ID))
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", sess.ID)).
		Then(put).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("writing member record %s: %w", key, err)
	}
	if resp.Succeeded {
		return nil
	}
	var cur *kv
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		cur = &kv{kvs[0].Value, kvs[0].ModRevision, clientv3.LeaseID(kvs[0].Lease)}
		var other cluster.Member
		_ = json.Unmarshal(cur.value, &other)
		if cur.lease != 0 && other.Instance != s.inst {
			return &cluster.DuplicateIDError{NodeID: s.nodeID, Host: other.Host, Instance: other.Instance}
		}
	}
	// None, ours from an earlier session, or without a lease: replace
	// exactly what was read.
	resp, err = s.cli.Txn(ctx).If(unchanged(key, cur)).Then(put).Commit()
	if err != nil {
		return fmt.Errorf("writing member record %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("member record %s changed meanwhile: %w", key, ErrConflict) // looked at on the next round
	}
	return nil
}

// Members lists the member records, ordered by node id. A record that
// cannot be decoded is listed with State "unreadable".
func (s *Store) Members(ctx context.Context) ([]cluster.Member, error) {
	ms, _, err := s.members(ctx)
	return ms, err
}

func (s *Store) members(ctx context.Context) ([]cluster.Member, int64, error) {
	resp, err := s.cli.Get(ctx, dir(s.layout.MembersDir()), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("reading the member records: %w", err)
	}
	return s.decodeMembers(resp.Kvs), resp.Header.Revision, nil
}

// decodeMembers parses member records (etcd returns them ordered by key,
// so by node id).
func (s *Store) decodeMembers(kvs []*mvccKV) []cluster.Member {
	var out []cluster.Member
	for _, k := range kvs {
		var m cluster.Member
		if json.Unmarshal(k.Value, &m) != nil {
			m = cluster.Member{NodeID: strings.TrimPrefix(string(k.Key), dir(s.layout.MembersDir())), State: "unreadable"}
		}
		out = append(out, m)
	}
	return out
}

// WatchMembers calls fn with the member records (as Members lists them)
// now and after every change, until ctx ends (see watchReads).
func (s *Store) WatchMembers(ctx context.Context, fn func([]cluster.Member)) error {
	return watchReads(ctx, s, []watchKey{{dir(s.layout.MembersDir()), true}}, s.members, slices.Equal[[]cluster.Member], fn)
}

// --- join checks ---

// CheckJoin runs the checks that must pass before this node campaigns in
// election mode mode ("" skips them): the election directory holds no key
// of the other mode, and the cluster record admits mode and home
// (cluster.Admit; it is created, by a node with no home only, when there
// is none). A refusal is a *cluster.ModeMismatchError or a
// *cluster.MovedError; any other error means the checks could not run. The
// cluster record is read every time (it is small): a record marked moved
// refuses at once.
func (s *Store) CheckJoin(ctx context.Context, mode, home string) (cluster.ClusterRecord, error) {
	if mode == "" {
		return cluster.ClusterRecord{}, nil
	}
	if _, err := s.conn.Session(ctx); err != nil {
		return cluster.ClusterRecord{}, err
	}
	if err := s.checkElectionDir(ctx, mode); err != nil {
		return cluster.ClusterRecord{}, err
	}
	where := s.layout.Config()
	r, err := s.joinRecord(ctx, mode, home)
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
// so none is created), creating it when there is none and home is "" (one
// transaction: create if absent, else read), and giving a record of an
// earlier version its ID. An unreadable record is a
// *cluster.ModeMismatchError.
func (s *Store) joinRecord(ctx context.Context, mode, home string) (*cluster.ClusterRecord, error) {
	key := s.layout.Config()
	for attempt := 0; ; attempt++ {
		var cur *kv
		if home == "" {
			rec := cluster.ClusterRecord{ElectionMode: mode, ID: cluster.NewRecordID()}
			data, _ := json.Marshal(rec)
			resp, err := s.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, string(data))).Else(clientv3.OpGet(key)).Commit()
			if err != nil {
				return nil, fmt.Errorf("reading the cluster record %s: %w", key, err)
			}
			if resp.Succeeded {
				s.log.Info("cluster record created", "key", key, "election_mode", mode, "record_id", rec.ID)
				return &rec, nil
			}
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				cur = &kv{value: kvs[0].Value, mod: kvs[0].ModRevision}
			}
		} else {
			var err error
			if cur, _, err = s.get(ctx, key); err != nil {
				return nil, fmt.Errorf("reading the cluster record %s: %w", key, err)
			}
		}
		if cur == nil {
			if home != "" {
				return nil, nil
			}
			if attempt >= 3 {
				return nil, fmt.Errorf("reading the cluster record %s: neither created nor found", key)
			}
			continue
		}
		var rec cluster.ClusterRecord
		if err := json.Unmarshal(cur.value, &rec); err != nil {
			return nil, &cluster.ModeMismatchError{Mode: mode, Cluster: key, Why: fmt.Sprintf("the cluster record %s is unreadable (%q)", key, cur.value)}
		}
		if rec.ID != "" || rec.ElectionMode == "" {
			return &rec, nil
		}
		if attempt >= 3 {
			return nil, fmt.Errorf("giving the cluster record %s its id: it changed at every try", key)
		}
		// A record of an earlier version: give it its ID, once (a node
		// that wrote first wins; read its ID).
		rec.ID = cluster.NewRecordID()
		data, _ := json.Marshal(rec)
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", cur.mod)).
			Then(clientv3.OpPut(key, string(data))).Commit()
		if err != nil {
			return nil, fmt.Errorf("giving the cluster record %s its id: %w", key, err)
		}
		if resp.Succeeded {
			s.log.Info("cluster record given its id", "key", key, "record_id", rec.ID)
			return &rec, nil
		}
	}
}

// checkElectionDir refuses to join when the election directory holds keys
// of the other mode.
func (s *Store) checkElectionDir(ctx context.Context, mode string) error {
	prefix := dir(s.layout.ElectionDir())
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("listing the election %s: %w", prefix, err)
	}
	for _, k := range resp.Kvs {
		name := strings.TrimPrefix(string(k.Key), prefix)
		if foreignCandidate(name, mode) {
			return &cluster.ModeMismatchError{Mode: mode, Cluster: s.layout.Config(),
				Why: fmt.Sprintf("the election %s holds %s, a key of the other mode", prefix, name)}
		}
	}
	return nil
}

// foreignCandidate reports whether the election key name belongs to the
// other mode than mode: fair candidates are c_<lease>, the unfair lock is
// "lock" (the names zkcluster's znodes have).
func foreignCandidate(name, mode string) bool {
	fair := strings.HasPrefix(name, fairPrefix)
	unfair := name == lockName
	return (mode == "fair" && unfair) || (mode == "unfair" && fair)
}

// --- failover request ---

// decodeFailover parses a failover request; one that cannot be read (or
// names no target) counts as none: it must not keep anybody out.
func decodeFailover(k *kv) *cluster.FailoverRequest {
	if k == nil {
		return nil
	}
	return cluster.DecodeFailover(k.value)
}

// RequestFailover replaces whatever request is there with r, bound to the
// session's lease: the request lives only while the requester waits for
// its outcome (and goes one lease TTL after the requester died).
func (s *Store) RequestFailover(ctx context.Context, r cluster.FailoverRequest) error {
	sess, err := s.conn.Session(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := s.layout.Failover()
	if _, err := s.cli.Put(ctx, key, string(data), clientv3.WithLease(sess.ID)); err != nil {
		return fmt.Errorf("writing the failover request %s: %w", key, err)
	}
	return nil
}

// ErrFailoverStands is ProposeFailover's refusal: a request that is not
// done stands already.
var ErrFailoverStands = errors.New("a failover request stands already")

// ProposeFailover writes r, a request a node makes by itself, as
// RequestFailover does, but only when no request stands (none, or one that
// is done or unreadable), compared-and-set against what it read. It never
// replaces a standing request, which it reports with ErrFailoverStands.
func (s *Store) ProposeFailover(ctx context.Context, r cluster.FailoverRequest) error {
	sess, err := s.conn.Session(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := s.layout.Failover()
	for attempt := 0; ; attempt++ {
		cur, _, err := s.get(ctx, key)
		if err != nil {
			return fmt.Errorf("reading the failover request %s: %w", key, err)
		}
		if c := decodeFailover(cur); c != nil && !c.Done {
			return fmt.Errorf("not writing the failover request to %s: %w (to %s, by %s)", r.To, ErrFailoverStands, c.To, c.By)
		}
		resp, err := s.cli.Txn(ctx).If(unchanged(key, cur)).
			Then(clientv3.OpPut(key, string(data), clientv3.WithLease(sess.ID))).Commit()
		if err != nil {
			return fmt.Errorf("writing the failover request %s: %w", key, err)
		}
		if resp.Succeeded {
			return nil
		}
		if attempt >= 3 {
			return fmt.Errorf("writing the failover request %s: %w", key, ErrConflict)
		}
	}
}

// WithdrawFailover deletes the failover request whose Key is id, and only
// if it is bound to our current session's lease: another requester may
// have replaced it meanwhile. Nothing there (or not ours) is not an error.
func (s *Store) WithdrawFailover(ctx context.Context, id string) error {
	sess := s.conn.Current()
	if sess == nil {
		return nil // our request went with our lease, or goes with it
	}
	key := s.layout.Failover()
	cur, _, err := s.get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the failover request %s: %w", key, err)
	}
	if r := decodeFailover(cur); r == nil || cur.lease != sess.ID || r.Key() != id {
		return nil
	}
	if _, err := s.cli.Txn(ctx).If(unchanged(key, cur)).Then(clientv3.OpDelete(key)).Commit(); err != nil {
		return fmt.Errorf("withdrawing the failover request %s: %w", key, err)
	}
	return nil
}

// ReadFailover reads the standing failover request (nil: none or
// unreadable). etcd's reads are linearizable: it sees every write answered
// before it was sent.
func (s *Store) ReadFailover(ctx context.Context) (*cluster.FailoverRequest, error) {
	r, _, err := s.readFailover(ctx)
	return r, err
}

func (s *Store) readFailover(ctx context.Context) (*cluster.FailoverRequest, int64, error) {
	key := s.layout.Failover()
	cur, rev, err := s.get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the failover request %s: %w", key, err)
	}
	return decodeFailover(cur), rev, nil
}

// WatchFailover calls fn with the standing failover request (nil: none
// or unreadable) now and after every change, until ctx ends (see
// watchReads).
func (s *Store) WatchFailover(ctx context.Context, fn func(*cluster.FailoverRequest)) error {
	return watchReads(ctx, s, []watchKey{{key: s.layout.Failover()}}, s.readFailover, cluster.SameRequest, fn)
}

// ExpireFailover deletes the failover request whose Key is id if it is
// still there, unchanged, and not done: its timeout ran out (as measured
// by the caller) without the target being promoted.
func (s *Store) ExpireFailover(ctx context.Context, id string) error {
	key := s.layout.Failover()
	cur, _, err := s.get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the failover request %s: %w", key, err)
	}
	r := decodeFailover(cur)
	if r == nil || r.Key() != id || r.Done {
		return nil
	}
	resp, err := s.cli.Txn(ctx).If(unchanged(key, cur)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("deleting the expired failover request %s: %w", key, err)
	}
	if resp.Succeeded {
		s.log.Warn("manual failover request timed out without the target being promoted; deleted it", "to", r.To)
	}
	return nil
}

// --- breadcrumb, outside a term ---

// readBreadcrumb reads the breadcrumb: breadcrumb.ErrAbsent with the zero
// revision when there is none, a *breadcrumb.CorruptError when it cannot
// be trusted; the revision is its mod revision.
func (s *Store) readBreadcrumb(ctx context.Context) (breadcrumb.Record, cluster.Revision, error) {
	key := s.layout.Breadcrumb()
	cur, _, err := s.get(ctx, key)
	if err != nil {
		return breadcrumb.Record{}, cluster.Revision{}, fmt.Errorf("reading breadcrumb %s: %w", key, err)
	}
	if cur == nil {
		return breadcrumb.Record{}, cluster.Revision{}, breadcrumb.ErrAbsent
	}
	r, err := breadcrumb.Decode(cur.value)
	return r, cluster.RevisionOf(cur.mod), err
}

// ReadBreadcrumb reads the breadcrumb outside any term (see readBreadcrumb).
func (s *Store) ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, cluster.Revision, error) {
	return s.readBreadcrumb(ctx)
}

// ReadBreadcrumbData returns the breadcrumb's raw data and its revision
// (nil, the zero revision, ErrAbsent when there is none), for operators
// who must see what an unreadable one holds.
func (s *Store) ReadBreadcrumbData(ctx context.Context) ([]byte, cluster.Revision, error) {
	key := s.layout.Breadcrumb()
	cur, _, err := s.get(ctx, key)
	if err != nil {
		return nil, cluster.Revision{}, fmt.Errorf("reading breadcrumb %s: %w", key, err)
	}
	if cur == nil {
		return nil, cluster.Revision{}, breadcrumb.ErrAbsent
	}
	return cur.value, cluster.RevisionOf(cur.mod), nil
}

// ClearBreadcrumb deletes the breadcrumb if it is still at rev (its mod
// revision when read), whatever it holds: the operator's tool, once the
// old leader is known to be down. A breadcrumb a leader rewrote since the
// read stays: an error wrapping breadcrumb.ErrChanged; one that is gone is
// an error wrapping breadcrumb.ErrAbsent.
func (s *Store) ClearBreadcrumb(ctx context.Context, rev cluster.Revision) error {
	key := s.layout.Breadcrumb()
	mod, ok := rev.Backend()
	if !ok || mod <= 0 {
		return fmt.Errorf("clearing breadcrumb %s: no revision read (%v)", key, rev)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("clearing breadcrumb %s: %w", key, err)
	}
	if resp.Succeeded {
		return nil
	}
	if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
		return fmt.Errorf("clearing breadcrumb %s: %w", key, breadcrumb.ErrAbsent)
	}
	return fmt.Errorf("clearing breadcrumb %s at revision %d: %w", key, mod, breadcrumb.ErrChanged)
}

// --- history and leader position, outside a term ---

// History returns the cluster's history, oldest first (nil: none yet). An
// unreadable record is a *cluster.HistoryCorruptError.
func (s *Store) History(ctx context.Context) ([]cluster.HistoryEntry, error) {
	key := s.layout.History()
	cur, _, err := s.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading the history %s: %w", key, err)
	}
	if cur == nil {
		return nil, nil
	}
	return cluster.DecodeHistory(cur.value)
}

// errUnreadablePosition marks a LeaderPosition record that cannot be
// decoded.
var errUnreadablePosition = errors.New("not a leader position")

// getLeaderPosition reads the LeaderPosition record (nil: none) with what
// was read. A record that cannot be decoded is an error wrapping
// errUnreadablePosition, not "none": a candidate must not judge its lag
// against nothing when the leader's last position is merely unreadable.
func (s *Store) getLeaderPosition(ctx context.Context) (*cluster.LeaderPosition, *kv, error) {
	key := s.layout.LeaderPosition()
	cur, _, err := s.get(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the leader position %s: %w", key, err)
	}
	if cur == nil {
		return nil, nil, nil
	}
	var p cluster.LeaderPosition
	if err := json.Unmarshal(cur.value, &p); err != nil || p.Position < 0 {
		return nil, cur, fmt.Errorf("the leader position %s is unreadable (%q): %w", key, cur.value, errUnreadablePosition)
	}
	return &p, cur, nil
}

// ReadLeaderPosition reads the last position a promoted leader published
// (nil, nil: none yet), outside any term.
func (s *Store) ReadLeaderPosition(ctx context.Context) (*cluster.LeaderPosition, error) {
	p, _, err := s.getLeaderPosition(ctx)
	return p, err
}
