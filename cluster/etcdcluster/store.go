package etcdcluster

import (
	"errors"
	"log/slog"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	*cluster.Store
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
	s := &Store{
		conn: deps.Conn, cli: deps.Conn.Client(), layout: cfg.Layout, nodeID: cfg.NodeID, inst: cfg.Instance,
		log: deps.Logger.With("component", "etcdcluster"),
	}
	s.Store = cluster.NewStore(kv{s}, cluster.StoreConfig{Layout: cfg.Layout, NodeID: cfg.NodeID, Instance: cfg.Instance, Logger: s.log})
	return s, nil
}
