package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// election.renew_interval reaches the ZooKeeper elector's config and the
// etcd Conn's, and the renew interval validation reads (the wired
// config.RenewInterval) is the one the elector or session applies: the
// configured value, or the derived one at 0.
func TestWiringRenewInterval(t *testing.T) {
	// ZooKeeper, tickTime 200ms: the derived interval is 105ms, the
	// shortest the elector applies.
	for _, renew := range []time.Duration{0, 105 * time.Millisecond} {
		cfg := config.Default()
		cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "c", "n", "h"
		cfg.ZooKeeper.Servers = []string{"127.0.0.1:2181"}
		cfg.ZooKeeper.SessionTimeout, cfg.ZooKeeper.TickTime = config.Duration(2*time.Second), config.Duration(200*time.Millisecond)
		cfg.Service.Demote.Timeout = config.Duration(600 * time.Millisecond)
		cfg.Election.RenewInterval = config.Duration(renew)
		ecfg := electionConfig(cfg, controllerConfig(cfg), nil)
		if ecfg.RenewInterval != renew {
			t.Errorf("zookeeper renew_interval %v: elector RenewInterval %v", renew, ecfg.RenewInterval)
		}
		et, err := ecfg.Timing(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := zooKeeperRenewInterval(cfg.Timing()); got != et.Renew || got != 105*time.Millisecond {
			t.Errorf("zookeeper renew_interval %v: validation's interval %v, elector's %v, want 105ms", renew, got, et.Renew)
		}
	}

	// etcd, lease_ttl 5s: derived 1s.
	for _, tc := range []struct{ renew, want time.Duration }{
		{0, time.Second},
		{250 * time.Millisecond, 250 * time.Millisecond},
	} {
		cfg := config.Default()
		cfg.Coordination.Backend = config.BackendEtcd
		cfg.Etcd = &config.Etcd{Endpoints: []string{"127.0.0.1:2379"}, LeaseTTL: config.Duration(5 * time.Second)}
		cfg.Election.RenewInterval = config.Duration(tc.renew)
		cc := etcdConnConfig(cfg, "n", nil)
		if cc.RenewInterval != tc.renew || cc.LeaseTTL != 5*time.Second {
			t.Errorf("etcd renew_interval %v: conn RenewInterval %v, LeaseTTL %v", tc.renew, cc.RenewInterval, cc.LeaseTTL)
		}
		if got := etcdRenewInterval(cfg.Timing()); got != tc.want {
			t.Errorf("etcd renew_interval %v: validation's interval %v, want %v", tc.renew, got, tc.want)
		}
		// The elector's fit check with the interval the session renews at.
		if err := etcdcluster.LeaseFits(5*time.Second, tc.want, cfg.Timing().DemoteBudget); err != nil {
			t.Errorf("etcd renew_interval %v: %v", tc.renew, err)
		}
	}
}

// lockedBuffer is a bytes.Buffer a logger may write while a test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Against a real etcd, the daemon's etcd session renews at the
// configured election.renew_interval (the Conn logs the interval its
// session renews at).
func TestWiringRenewIntervalEtcdSession(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cfg := config.Default()
	cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "rc", "n", "h"
	cfg.Coordination.Backend = config.BackendEtcd
	cfg.Etcd = &config.Etcd{Endpoints: c.Endpoints(), Prefix: config.DefaultEtcdPrefix, LeaseTTL: config.Duration(5 * time.Second),
		DialTimeout: config.Duration(5 * time.Second)}
	cfg.Election.RenewInterval = config.Duration(250 * time.Millisecond)
	var logs lockedBuffer
	be, err := openBackend(cfg, "n", "i", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer be.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := be.session(ctx); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(logs.String(), "etcd session began") {
		if ctx.Err() != nil {
			t.Fatalf("no session began within 30s:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "renew_every=250ms") {
		t.Errorf("the etcd session does not renew every 250ms:\n%s", logs.String())
	}
}
