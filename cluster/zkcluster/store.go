// Package zkcluster keeps failoverd's cluster records in ZooKeeper: member
// records, the manual failover request, the cluster record and the join
// checks, the breadcrumb, and the election seen as cluster.Term values. The
// paths come from cluster.Layout; this package decides only how each record
// is stored (ephemeral or persistent, guarded by what, version-checked or
// not).
package zkcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
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
	*cluster.Store
	client *zk.Client
	layout cluster.Layout
	nodeID string
	inst   string
	log    *slog.Logger

	mu         sync.Mutex
	sessCh     chan struct{} // closed when a new session begins (SessionChanged)
	followOnce sync.Once
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
	s := &Store{
		client: deps.Client, layout: cfg.Layout, nodeID: cfg.NodeID, inst: cfg.Instance,
		log:    deps.Logger.With("component", "zkcluster"),
		sessCh: make(chan struct{}),
	}
	s.Store = cluster.NewStore(kv{s}, cluster.StoreConfig{Layout: cfg.Layout, NodeID: cfg.NodeID, Instance: cfg.Instance, Logger: s.log})
	return s, nil
}

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

// fresh returns once the ZooKeeper server this client is connected to has
// answered a sync, proof that it is in touch with the quorum's leader: a
// server cut off from its quorum keeps its clients connected and serves
// them old reads (until syncLimit x tickTime, which may exceed the session
// timeout) but cannot answer a sync. ZooKeeper answers a session in order,
// so every watch event of a change committed before the sync was sent
// reached this client before the answer.
func (s *Store) fresh(ctx context.Context) error {
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
