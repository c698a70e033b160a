package bench

// The coordination backend a benchmark runs on. The handoff, crash and
// idle-load benchmarks run once per backend, as sub-benchmarks named
// backend=zookeeper and backend=etcd; BENCH_BACKEND (a comma-separated
// list of clustertest's backend names) picks some, default both.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// benchBackends is BENCH_BACKEND's list, else every backend.
func benchBackends(b *testing.B) []string {
	spec := strings.TrimSpace(os.Getenv("BENCH_BACKEND"))
	if spec == "" {
		return clustertest.Backends
	}
	var out []string
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		known := false
		for _, be := range clustertest.Backends {
			known = known || f == be
		}
		if !known {
			b.Fatalf("BENCH_BACKEND: unknown backend %q (want %s)", f, strings.Join(clustertest.Backends, ", "))
		}
		out = append(out, f)
	}
	return out
}

// forEachBackend runs bench as a sub-benchmark per chosen backend.
func forEachBackend(b *testing.B, bench func(b *testing.B, backend string)) {
	for _, be := range benchBackends(b) {
		b.Run("backend="+be, func(b *testing.B) { bench(b, be) })
	}
}

// etcdLeaseTTL is the daemons' etcd.lease_ttl in the benchmarks:
// BENCH_ETCD_TTL, default 5s (the daemon's default).
func etcdLeaseTTL() time.Duration { return envDuration("BENCH_ETCD_TTL", 5*time.Second) }

// etcdClient is a client of every member, closed when the benchmark ends.
func etcdClient(b testing.TB, endpoints []string) *clientv3.Client {
	b.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli
}

// etcdDesc describes an etcdtest cluster for the notes.
func etcdDesc(ec *etcdtest.Cluster) string {
	v, _ := ec.Server().Version()
	if v == "" {
		v = ec.Server().Name
	}
	o := ec.Options()
	return fmt.Sprintf("%d-member etcd %s (separate processes), heartbeat %v, election timeout %v", len(ec.Members), v, o.Heartbeat, o.Election)
}

// desc describes the cluster's coordination service for the notes.
func (c *cluster) desc() string {
	if c.Etcd != nil {
		return etcdDesc(c.Etcd) + ", lease_ttl " + c.Opts.EtcdLeaseTTL.String()
	}
	return zkDesc(c.ZK)
}

// etcdGrantedTTL is the TTL etcd granted the lease of n's member record.
func (c *cluster) etcdGrantedTTL(n *clustertest.Node) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ec.Get(ctx, layout.Member(n.ID))
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		return 0
	}
	ttl, err := c.ec.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		return 0
	}
	return time.Duration(ttl.GrantedTTL) * time.Second
}
