package clustertest

import (
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ExampleLeaseTTL is the examples' etcd.lease_ttl (examples/redis and
// examples/postgresql render.sh's default): the shortest lease that rides
// out an etcd leader election beside their 3s demote hooks
// (etcdcluster.RidesElection; `failoverd validate` warns below it).
const ExampleLeaseTTL = 7 * time.Second

// RepoRoot is the repository's root directory.
func RepoRoot() string { return repoRoot() }

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Missing fails the test under CI (CI=true), where every component must
// be there, and skips it elsewhere.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// CoordinationEnv is how an example's render.sh is told the cluster's
// backend: ZK_SERVERS, or ETCD_ENDPOINTS and ETCD_LEASE_TTL.
func (c *Cluster) CoordinationEnv() []string {
	if c.Etcd != nil {
		return []string{"ETCD_ENDPOINTS=" + strings.Join(c.Etcd.Endpoints(), ","), "ETCD_LEASE_TTL=" + c.Opts.EtcdLeaseTTL.String()}
	}
	return []string{"ZK_SERVERS=" + strings.Join(c.ZK.Addrs(), ",")}
}

// Render runs an example's render.sh (a path from the repository's root)
// into the cluster's directory for its backend, with env added, and sets
// every node's Config to its rendered node-X.yaml, rewritten by patch
// when set.
func Render(c *Cluster, script string, patch func(node, yaml string) string, env ...string) {
	c.t.Helper()
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), script), c.Dir)
	cmd.Dir = c.Dir
	cmd.Env = append(append(os.Environ(), c.CoordinationEnv()...), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("%s: %v\n%s", script, err, b)
	}
	for _, n := range c.Nodes {
		n.Config = filepath.Join(c.Dir, n.ID+".yaml")
		if patch != nil {
			b, err := os.ReadFile(n.Config)
			must(c.t, err)
			must(c.t, os.WriteFile(n.Config, []byte(patch(n.ID, string(b))), 0o644))
		}
	}
}

// PortBlocks finds two bases from lo up with base+1..base+3 free on
// loopback: the examples' render.sh put node N's service and admin API on
// base+N. The blocks stay below the kernel's ephemeral range: a port
// found free there can be taken as the local port of any outgoing
// connection (another suite's client) before the example binds it.
func PortBlocks(t testing.TB, lo int) (int, int) {
	t.Helper()
	hi := min(lo+20000, ephemeralLow())
	blocks := (hi - lo - 4) / 10
	if blocks < 10 {
		blocks = 2000 // lo at or above the ephemeral range: as asked
	}
	var bases []int
	for try := 0; try < 200 && len(bases) < 2; try++ {
		base := lo + rand.IntN(blocks)*10
		ok := true
		var ls []net.Listener
		for p := base + 1; p <= base+3; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok && (len(bases) == 0 || bases[0] != base) {
			bases = append(bases, base)
		}
	}
	if len(bases) < 2 {
		t.Fatal("no free blocks of loopback ports")
	}
	return bases[0], bases[1]
}

// ephemeralLow is the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range; 32768, Linux's default, when unreadable).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 1024 {
		return 32768
	}
	return n
}
