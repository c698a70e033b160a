// Package redistest runs the Redis example (examples/redis) for real as a
// clustertest service: three redis-server processes, configured with the
// failoverd configs examples/redis/render.sh writes from the shipped
// templates (a zookeeper or an etcd block, for the cluster's backend) and
// driven by the shipped hooks; clustertest runs the backend and the
// daemons. The end-to-end tests (test/e2e), the position policy test and
// the follow benchmark (test/bench) use it; it adds Redis's wire client
// (resp.go) and a write prober (probe.go).
//
// The hooks append one line per run to the cluster's events log
// (FAILOVERD_EVENTS_LOG): "TIME event=NAME key=value ... result=ok|failed".
package redistest

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// Require skips the test when redis-server or redis-cli is missing, and
// fails it under CI (CI=true), where every component must be there.
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			clustertest.Missing(t, bin+" is required (make deps: Debian's redis-server and redis-tools)")
		}
	}
}

// Options shape a cluster.
type Options struct {
	// Backend is clustertest.BackendZooKeeper (""; the default) or
	// clustertest.BackendEtcd.
	Backend string
	// RedisArgs are appended to every redis-server command line (after the
	// config file: "--enable-debug-command", "local", for example).
	RedisArgs []string
	// Patch, when set, rewrites a rendered failoverd config before it is
	// used (the tests keep the shipped one unless they must not).
	Patch func(node, yaml string) string
}

// Node is a node of a Redis cluster; its ServiceAddr is its Redis.
type Node = clustertest.Node

// Cluster is a running Redis example cluster.
type Cluster struct{ *clustertest.Cluster }

// Start renders the example for the backend, starts it, the three Redis
// and the three failoverd, and waits until one node leads and both others'
// Redis follow its Redis.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Require(t)
	s := &Service{opts: o, procs: map[*Node]*clustertest.Process{}}
	return &Cluster{clustertest.Start(t, clustertest.Options{Backend: o.Backend, Service: s,
		EtcdLeaseTTL: clustertest.ExampleLeaseTTL, StatusTimeout: 2 * time.Second, SettleTimeout: 180 * time.Second})}
}

// Service is the Redis example as a clustertest.Service.
type Service struct {
	opts  Options
	mu    sync.Mutex
	procs map[*Node]*clustertest.Process
}

// Setup renders the example into the cluster's directory.
func (s *Service) Setup(c *clustertest.Cluster) {
	redisBase, adminBase := clustertest.PortBlocks(c.T(), 20000)
	clustertest.Render(c, "examples/redis/render.sh", s.opts.Patch,
		"REDIS_PORT_BASE="+strconv.Itoa(redisBase), "ADMIN_PORT_BASE="+strconv.Itoa(adminBase))
	for i, n := range c.Nodes {
		n.ServiceAddr = "127.0.0.1:" + strconv.Itoa(redisBase+i+1)
		n.AdminAddr = "127.0.0.1:" + strconv.Itoa(adminBase+i+1)
	}
}

// Boot starts every node's Redis.
func (s *Service) Boot(c *clustertest.Cluster) {
	for _, n := range c.Nodes {
		s.Start(n)
	}
}

// Start runs the node's redis-server (again) and waits until it answers
// PING.
func (s *Service) Start(n *Node) {
	t := n.Cluster().T()
	t.Helper()
	conf := filepath.Join(n.Cluster().Dir, "redis-"+strings.TrimPrefix(n.ID, "node-")+".conf")
	p := clustertest.StartProcess(t, exec.Command("redis-server", append([]string{conf}, s.opts.RedisArgs...)...), s.log(n))
	s.mu.Lock()
	s.procs[n] = p
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if v, err := Command(n.ServiceAddr, time.Second, "PING"); err == nil && v == "PONG" {
			return
		}
		select {
		case <-p.Done():
			t.Fatalf("redis-server of %s exited; its log ends:\n%s", n.ID, clustertest.Tail(s.log(n), 2000))
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("redis-server of %s does not answer on %s", n.ID, n.ServiceAddr)
}

// Crash sends SIGKILL to the node's redis-server and waits for it.
func (s *Service) Crash(n *Node) {
	s.mu.Lock()
	p := s.procs[n]
	s.mu.Unlock()
	if p != nil && !p.Kill(30*time.Second) {
		n.Cluster().T().Errorf("redis-server of %s did not exit after SIGKILL", n.ID)
	}
}

// Primary: the node's Redis answers ROLE as a master.
func (s *Service) Primary(n *Node) bool { return RoleOf(n).Role == "master" }

// Follows: the node's Redis replicates from leader's, its link up.
func (s *Service) Follows(n, leader *Node) bool { return RoleOf(n).Follows(leader.ServiceAddr) }

// Env: nothing beyond what every daemon gets.
func (s *Service) Env(n *Node) []string { return nil }

// Logs is the node's redis.log.
func (s *Service) Logs(n *Node) []string { return []string{s.log(n)} }

func (s *Service) log(n *Node) string { return filepath.Join(n.Dir(), "redis.log") }

// RoleOf is what the node's Redis answers to ROLE.
func RoleOf(n *Node) Role { return ReadRole(n.ServiceAddr) }

// Do runs one Redis command on the node's Redis.
func Do(n *Node, args ...string) (any, error) { return Command(n.ServiceAddr, 2*time.Second, args...) }

// RepoRoot is the repository's root directory.
func RepoRoot() string { return clustertest.RepoRoot() }
