package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
)

// operatorStore is what the CLI commands and the admin API use of the
// cluster's records (the backend's cluster.Store; tests give fakes).
type operatorStore = cluster.Operator

// backend is a connection to the coordination service cfg names, with
// the store of cfg's cluster on it.
type backend struct {
	// kind is config.BackendZooKeeper or config.BackendEtcd.
	kind string
	// desc names the service in messages ("zookeeper [a:2181]").
	desc string
	// store keeps the cluster's records on the backend's primitives:
	// the controller's cluster.Records and every operator operation.
	store *cluster.Store
	// stale is how old the last answered Fresh may be before the leader
	// view stops answering: the session timeout or the lease TTL.
	stale time.Duration
	// session waits for the first session; an error it returns is a setup
	// error (ZooKeeper's unsafe ACLs), else it retries until ctx ends.
	session func(ctx context.Context) error
	// elector builds the daemon's candidate.
	elector func(ccfg controller.Config) (cluster.Elector, error)
	close   func()
	// prove is the elector's ProveOut (election.fence_first), bound to
	// the controller once it exists.
	prove *lateProver
}

// name is the service's name in log lines and messages.
func (b *backend) name() string { return b.kind }

// etcdName is "etcd" on etcd, "" on ZooKeeper (leaderView's service).
func (b *backend) etcdName() string {
	if b.kind == config.BackendEtcd {
		return "etcd"
	}
	return ""
}

// layoutOf is where cfg's cluster lives in its coordination service: the
// zookeeper root, or the etcd prefix.
func layoutOf(cfg *config.Config) cluster.Layout {
	if cfg.Coordination.Backend == config.BackendEtcd && cfg.Etcd != nil {
		return cluster.Layout{Root: cfg.Etcd.Prefix, Cluster: cfg.Cluster}
	}
	return cluster.Layout{Root: cfg.ZooKeeper.Root, Cluster: cfg.Cluster}
}

// openBackend connects to cfg's coordination service; nodeID and instance
// are empty for a CLI command. Nothing is awaited: session does that.
func openBackend(cfg *config.Config, nodeID, instance string, logger *slog.Logger) (*backend, error) {
	if cfg.Coordination.Backend == config.BackendEtcd {
		return openEtcd(cfg, nodeID, instance, logger)
	}
	return openZooKeeper(cfg, nodeID, instance, logger)
}

func openZooKeeper(cfg *config.Config, nodeID, instance string, logger *slog.Logger) (*backend, error) {
	zc, err := zkConfig(cfg)
	if err != nil {
		return nil, err
	}
	client, err := zk.NewClient(zc, zk.Deps{Logger: logger})
	if err != nil {
		return nil, err
	}
	store, err := zkcluster.New(zkcluster.Config{Layout: layoutOf(cfg), NodeID: nodeID, Instance: instance},
		zkcluster.Deps{Client: client, Logger: logger})
	if err != nil {
		client.Close()
		return nil, err
	}
	prove := &lateProver{}
	return &backend{
		kind: config.BackendZooKeeper, prove: prove, desc: fmt.Sprintf("zookeeper %v", cfg.ZooKeeper.Servers), store: store.Store,
		stale:   cfg.ZooKeeper.SessionTimeout.Std(),
		session: func(ctx context.Context) error { return firstZKSession(ctx, client) },
		elector: func(ccfg controller.Config) (cluster.Elector, error) {
			el, err := election.New(electionConfig(cfg, ccfg, prove), election.Deps{Client: client, Logger: logger})
			if err != nil {
				return nil, err
			}
			return store.Elector(el), nil
		},
		close: client.Close,
	}, nil
}

// etcdDial is the client setup of cfg's etcd block: TLS, and the user
// with the password read from its file.
func etcdDial(cfg *config.Config) (etcdcluster.DialConfig, error) {
	e := cfg.Etcd
	dc := etcdcluster.DialConfig{Endpoints: e.Endpoints, DialTimeout: e.DialTimeout.Std(), Username: e.Username}
	tc, err := e.ClientTLS()
	if err != nil {
		return dc, err
	}
	dc.TLS = tc
	if e.Username != "" {
		pass, err := e.ReadPassword()
		if err != nil {
			return dc, err
		}
		dc.Password = pass.Reveal()
	}
	return dc, nil
}

// etcdConnConfig is the etcd Conn's configuration: the lease TTL and
// renew interval (election.renew_interval; 0: DefaultRenewInterval) as
// configured, the cluster's config key as the read key, and version
// warnings for a daemon (nodeID set).
func etcdConnConfig(cfg *config.Config, nodeID string, logger *slog.Logger) etcdcluster.ConnConfig {
	return etcdcluster.ConnConfig{LeaseTTL: cfg.Etcd.LeaseTTL.Std(), RenewInterval: cfg.Election.RenewInterval.Std(), Logger: logger,
		ReadKey: layoutOf(cfg).Config(), WarnVersions: nodeID != ""}
}

func openEtcd(cfg *config.Config, nodeID, instance string, logger *slog.Logger) (*backend, error) {
	if cfg.Etcd == nil {
		return nil, errors.New("coordination.backend is etcd but there is no etcd block")
	}
	dc, err := etcdDial(cfg)
	if err != nil {
		return nil, err
	}
	desc := fmt.Sprintf("etcd %v", cfg.Etcd.Endpoints)
	cli, err := etcdcluster.Dial(dc)
	if err != nil {
		return nil, &unreachableError{desc: desc, err: err}
	}
	conn, err := etcdcluster.NewConn(cli, etcdConnConfig(cfg, nodeID, logger))
	if err != nil {
		cli.Close()
		return nil, err
	}
	closeAll := func() { conn.Close(); cli.Close() }
	store, err := etcdcluster.New(etcdcluster.Config{Layout: layoutOf(cfg), NodeID: nodeID, Instance: instance},
		etcdcluster.Deps{Conn: conn, Logger: logger})
	if err != nil {
		closeAll()
		return nil, err
	}
	prove := &lateProver{}
	return &backend{
		kind: config.BackendEtcd, prove: prove, desc: desc, store: store.Store,
		stale:   cfg.Etcd.LeaseTTL.Std(),
		session: func(ctx context.Context) error { return firstEtcdSession(ctx, conn, dc, logger) },
		elector: func(ccfg controller.Config) (cluster.Elector, error) {
			mode := etcdcluster.Fair
			if cfg.Election.Mode == config.ModeUnfair {
				mode = etcdcluster.Unfair
			}
			return store.Elector(etcdcluster.ElectorConfig{NodeID: cfg.Node.ID, Mode: mode, DemoteBudget: controller.DemoteBudget(ccfg),
				FenceFirst: fenceFirstOf(cfg, prove)})
		},
		close: closeAll,
	}, nil
}

// unreachableError: the coordination service could not be reached (the
// etcd client is made without I/O, also with a user, so this is rare).
type unreachableError struct {
	desc string
	err  error
}

func (e *unreachableError) Error() string { return fmt.Sprintf("cannot reach %s: %v", e.desc, e.err) }
func (e *unreachableError) Unwrap() error { return e.err }

// firstZKSession waits for the first ZooKeeper session, retrying every
// second, and returns zk.ErrUnsafeACL at once: others able to change a
// znode at or above the cluster, one not ours to fix, is a setup error.
func firstZKSession(ctx context.Context, client *zk.Client) error {
	for ctx.Err() == nil {
		_, err := client.Session(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, zk.ErrUnsafeACL) {
			return err
		}
		cluster.Sleep(ctx, time.Second)
	}
	return nil
}

// errEtcdSetup marks what keeps a daemon from etcd that retrying will not
// fix: the configuration must change.
var errEtcdSetup = errors.New("the etcd client setup is refused")

// firstEtcdSession waits for the first etcd lease of conn; the Conn
// retries on its own, so an etcd out of reach (also with a user: the
// client authenticates at its first request) is waited out, logged every
// few seconds, while the daemon runs without a session: not connected,
// never a candidate. What retrying cannot fix is returned as a setup error
// (errEtcdSetup, naming the setting): a member's certificate the CA does
// not verify, a password etcd refuses (etcdcluster.Check).
func firstEtcdSession(ctx context.Context, conn *etcdcluster.Conn, dc etcdcluster.DialConfig, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := conn.Session(wctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		switch err := etcdcluster.Check(ctx, conn.Client(), dc); {
		case errors.Is(err, etcdcluster.ErrUntrustedServer):
			return fmt.Errorf("%w: etcd.tls.ca_file does not verify etcd's certificate: %w", errEtcdSetup, err)
		case errors.Is(err, etcdcluster.ErrAuthFailed):
			return fmt.Errorf("%w: etcd refused etcd.username with the password in etcd.password_file: %w", errEtcdSetup, err)
		case ctx.Err() != nil:
			return nil
		}
		log.Warn("etcd not reachable yet: no session, not campaigning; retrying", "endpoints", strings.Join(dc.Endpoints, ","),
			"waited", time.Since(start).Round(time.Second).String())
	}
}
