// Package pgtest runs the PostgreSQL example (examples/postgresql) for real:
// a standalone ZooKeeper (test/zktest), three PostgreSQL servers and a
// failoverd process beside each, configured by examples/postgresql/render.sh
// from the shipped templates and driven by the shipped hooks. The first
// node is made by bootstrap.sh; the follow hook copies it to the others.
//
// PostgreSQL refuses to run as root: when the tests run as root (CI), the
// hooks run PostgreSQL's programs as the postgres user (PG_OS_USER), and
// the cluster's directory is opened to it.
//
// The hooks append one line per run to the cluster's events log
// (FAILOVERD_EVENTS_LOG): "TIME event=NAME key=value ... result=ok|failed".
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/internal/proc/proctest"
	"github.com/failoverd/failoverd/test/clustertest"
)

// BinDir is the directory of PostgreSQL's server programs: the newest
// /usr/lib/postgresql/N/bin that has them ("" when none).
func BinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestN := "", -1
	for _, d := range dirs {
		n, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || n <= bestN {
			continue
		}
		ok := true
		for _, p := range []string{"initdb", "pg_ctl", "postgres", "pg_rewind", "pg_basebackup", "pg_controldata"} {
			if _, err := os.Stat(filepath.Join(d, p)); err != nil {
				ok = false
			}
		}
		if ok {
			best, bestN = d, n
		}
	}
	return best
}

// Require skips the test when PostgreSQL (13 or later, Debian's layout) is
// missing, and fails it under CI (CI=true), where every component must be
// there.
func Require(t testing.TB) {
	t.Helper()
	var missing []string
	if BinDir() == "" {
		missing = append(missing, "PostgreSQL's programs in /usr/lib/postgresql/N/bin")
	}
	for _, bin := range []string{"psql", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			missing = append(missing, "the postgres user")
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			missing = append(missing, "runuser")
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := strings.Join(missing, ", ") + " required (make deps: Debian's postgresql)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Options shape a cluster.
type Options struct {
	// Backend is clustertest.BackendZooKeeper (""; the default) or
	// clustertest.BackendEtcd.
	Backend string
	// Patch, when set, rewrites a rendered failoverd config before it is
	// used.
	Patch func(node, yaml string) string
	// Env is added to every node's pg.env (KEY=VALUE lines).
	Env []string
}

// Node is a node of a PostgreSQL cluster; its ServiceAddr is its
// PostgreSQL.
type Node = clustertest.Node

// Cluster is a running PostgreSQL example cluster.
type Cluster struct{ *clustertest.Cluster }

// openUp lets the postgres user reach dir: every directory from dir up to
// the root that others may not enter gets go+x (t.TempDir makes 0700 ones).
func openUp(t testing.TB, dir string) {
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o011 != 0o011 {
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Start renders the example for the backend, bootstraps node-a, starts
// the backend, node-a's PostgreSQL (a parked standby) and the three
// failoverd, and waits until one node leads and both others stream from
// it.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Require(t)
	return &Cluster{clustertest.Start(t, clustertest.Options{Backend: o.Backend, Service: &Service{opts: o},
		EtcdLeaseTTL: clustertest.ExampleLeaseTTL, StatusTimeout: 3 * time.Second, SettleTimeout: 300 * time.Second})}
}

// Service is the PostgreSQL example as a clustertest.Service: its
// processes are started and stopped by the example's own scripts
// (bootstrap.sh, hooks/start.sh), as the unit drop-in does.
type Service struct{ opts Options }

// Hooks is the example's hooks directory.
func Hooks() string { return filepath.Join(clustertest.RepoRoot(), "examples", "postgresql", "hooks") }

// Setup renders the example into the cluster's directory.
func (s *Service) Setup(c *clustertest.Cluster) {
	t := c.T()
	if os.Geteuid() == 0 {
		openUp(t, c.Dir)
		openUp(t, Hooks())
	}
	if err := os.WriteFile(c.EventsPath, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(c.EventsPath, 0o666)
	pgBase, adminBase := clustertest.PortBlocks(t, 30000)
	clustertest.Render(c, "examples/postgresql/render.sh", s.opts.Patch,
		"PG_PORT_BASE="+strconv.Itoa(pgBase), "ADMIN_PORT_BASE="+strconv.Itoa(adminBase), "PG_BINDIR="+BinDir())
	for i, n := range c.Nodes {
		n.ServiceAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(pgBase+i+1))
		n.AdminAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(adminBase+i+1))
		if len(s.opts.Env) > 0 {
			f, err := os.OpenFile(EnvFile(n), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(f, strings.Join(s.opts.Env, "\n"))
			f.Close()
		}
	}
}

// Boot makes node-a with bootstrap.sh and starts its PostgreSQL; the
// follow hook copies it to the others.
func (s *Service) Boot(c *clustertest.Cluster) {
	c.T().Helper()
	script(c, "bootstrap.sh", EnvFile(c.Nodes[0]))
	s.Start(c.Nodes[0])
}

// Start starts the node's PostgreSQL as a standby (hooks/start.sh: what
// the unit drop-in does at boot).
func (s *Service) Start(n *Node) {
	n.Cluster().T().Helper()
	script(n.Cluster(), "start.sh", EnvFile(n))
}

// Primary: the node's PostgreSQL answers as a primary.
func (s *Service) Primary(n *Node) bool { return Writable(n) }

// Follows: the node's PostgreSQL streams from leader's on its timeline.
func (s *Service) Follows(n, leader *Node) bool { return Streaming(n, leader) }

// Env: the hooks' events log is every daemon's already.
func (s *Service) Env(n *Node) []string { return nil }

// Logs is the node's postgresql.log.
func (s *Service) Logs(n *Node) []string {
	return []string{filepath.Join(n.Dir(), "postgresql.log")}
}

// EnvFile is the node's pg.env, the hooks' argument.
func EnvFile(n *Node) string { return filepath.Join(n.Dir(), "pg.env") }

// PGData is the node's data directory.
func PGData(n *Node) string { return filepath.Join(n.Dir(), "data") }

// script runs one of examples/postgresql's scripts.
func script(c *clustertest.Cluster, name string, args ...string) string {
	c.T().Helper()
	out, err := runScript(c, name, args...)
	if err != nil {
		c.T().Fatal(err)
	}
	return out
}

// runScript runs one of examples/postgresql's scripts; an error holds its
// output.
func runScript(c *clustertest.Cluster, name string, args ...string) (string, error) {
	p := filepath.Join(clustertest.RepoRoot(), "examples", "postgresql", name)
	if _, err := os.Stat(p); err != nil {
		p = filepath.Join(Hooks(), name)
	}
	cmd := exec.Command("bash", append([]string{p}, args...)...)
	cmd.Dir = c.Dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		return string(b), fmt.Errorf("%s %v: %v\n%s", name, args, err, b)
	}
	return string(b), nil
}

// TryStart starts the node's PostgreSQL as Service.Start does, returning
// start.sh's failure (with its output) instead of failing the test.
func TryStart(n *Node) error {
	_, err := runScript(n.Cluster(), "start.sh", EnvFile(n))
	return err
}

// StartNaively starts the node's PostgreSQL the way a unit without the
// drop-in would after a crash of a primary: pg_ctl start on its data
// directory as it is (no standby.signal: a primary).
func StartNaively(n *Node) {
	t := n.Cluster().T()
	t.Helper()
	_, port, _ := net.SplitHostPort(n.ServiceAddr)
	args := []string{filepath.Join(BinDir(), "pg_ctl"), "start", "-D", PGData(n), "-l", filepath.Join(n.Dir(), "postgresql.log"),
		"-w", "-t", "60", "-o", "-p " + port + " -c cluster_name=" + strings.ReplaceAll(n.ID, "-", "_") + " -k " + n.Dir()}
	if os.Geteuid() == 0 {
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = "/"
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl start of %s: %v\n%s", n.ID, err, b)
	}
}

// PostmasterPID is the node's running postmaster's pid, or 0.
func PostmasterPID(n *Node) int {
	b, err := os.ReadFile(filepath.Join(PGData(n), "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// Crash crashes the node's PostgreSQL as a supervisor that cleans up
// would see it: SIGKILL to the postmaster and to each of its children, and
// a wait until every one is gone. Killing the process group is not enough:
// each child calls setsid(), and one that is slow to notice its
// postmaster's death keeps the shared memory attached, so that a restart
// fails with "pre-existing shared memory block is still in use".
func (s *Service) Crash(n *Node) {
	pid := PostmasterPID(n)
	if pid == 0 {
		return
	}
	kids := proctest.Children(pid)
	syscall.Kill(pid, syscall.SIGKILL)
	kids = append(kids, proctest.Children(pid)...) // forked meanwhile
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	// A zombie postmaster still answers kill(pid, 0), and so PostgreSQL's
	// own lock-file check: wait until it is reaped.
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, k := range kids {
		for proctest.Alive(k) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", n.ServiceAddr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
}

// Query runs sql on the node's PostgreSQL and returns the first column of
// the first row.
func Query(n *Node, sql string) (string, error) { return Query1(n.ServiceAddr, sql, 5*time.Second) }

// Writable reports whether the node's PostgreSQL answers as a primary.
func Writable(n *Node) bool {
	v, err := Query(n, "SELECT pg_is_in_recovery()")
	return err == nil && v == "f"
}

// Streaming reports whether the node's PostgreSQL streams from leader's,
// on the leader's current timeline.
func Streaming(n, leader *Node) bool {
	tli, err := Query(leader, "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int")
	if err != nil {
		return false
	}
	_, port, _ := net.SplitHostPort(leader.ServiceAddr)
	v, err := Query(n, "SELECT status || ' ' || received_tli || ' ' || sender_port FROM pg_stat_wal_receiver")
	return err == nil && v == "streaming "+tli+" "+port
}

// failoverd is the failoverd binary the tests build.
func failoverd(t testing.TB) string { fd, _ := clustertest.Binaries(t); return fd }
