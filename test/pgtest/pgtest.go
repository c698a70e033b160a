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
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/internal/proc/proctest"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/redistest"
	"github.com/failoverd/failoverd/test/zktest"
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
	// Patch, when set, rewrites a rendered failoverd config before it is
	// used.
	Patch func(node, yaml string) string
	// Env is added to every node's pg.env (KEY=VALUE lines).
	Env []string
}

// Cluster is a running PostgreSQL example cluster.
type Cluster struct {
	t          testing.TB
	Dir        string
	ZK         *zktest.Cluster
	Nodes      []*Node
	EventsPath string
	Hooks      string
	failoverd  string
}

// Node is one PostgreSQL plus its failoverd.
type Node struct {
	c         *Cluster
	ID        string
	Config    string // the rendered failoverd config
	EnvFile   string // the node's pg.env
	PGData    string
	PGAddr    string // host:port, also its node.service_address
	AdminAddr string
	dir       string

	mu          sync.Mutex
	daemon      *exec.Cmd
	daemonDone  chan struct{}
	daemonStart int
}

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// openUp lets the postgres user reach dir: every directory from dir up to
// the root that others may not enter gets go+x (t.TempDir makes 0700 ones).
func openUp(t testing.TB, dir string) {
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		must(t, err)
		if st.Mode().Perm()&0o011 != 0o011 {
			must(t, os.Chmod(d, st.Mode().Perm()|0o011))
		}
	}
}

// Start renders the example, bootstraps node-a, starts ZooKeeper, node-a's
// PostgreSQL (a parked standby) and the three failoverd, and waits until
// one node leads and both others stream from it.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	zktest.Require(t)
	Require(t)
	fd, _ := clustertest.Binaries(t)
	c := &Cluster{t: t, Dir: t.TempDir(), failoverd: fd,
		Hooks: filepath.Join(RepoRoot(), "examples", "postgresql", "hooks")}
	if os.Geteuid() == 0 {
		openUp(t, c.Dir)
		openUp(t, c.Hooks)
	}
	c.EventsPath = filepath.Join(c.Dir, "events.log")
	must(t, os.WriteFile(c.EventsPath, nil, 0o666))
	must(t, os.Chmod(c.EventsPath, 0o666))
	c.ZK = zktest.Start(t, 1)

	pgBase, adminBase := freeBlocks(t)
	out := filepath.Join(c.Dir, "cluster")
	c.script("render.sh", []string{"ZK_SERVERS=" + strings.Join(c.ZK.Addrs(), ","),
		"PG_PORT_BASE=" + strconv.Itoa(pgBase), "ADMIN_PORT_BASE=" + strconv.Itoa(adminBase), "PG_BINDIR=" + BinDir()}, out)
	if os.Geteuid() == 0 {
		openUp(t, out)
	}
	for i, id := range []string{"node-a", "node-b", "node-c"} {
		n := &Node{c: c, ID: id,
			Config:    filepath.Join(out, id+".yaml"),
			EnvFile:   filepath.Join(out, id, "pg.env"),
			PGData:    filepath.Join(out, id, "data"),
			PGAddr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(pgBase+i+1)),
			AdminAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(adminBase+i+1)),
			dir:       filepath.Join(c.Dir, id)}
		must(t, os.MkdirAll(n.dir, 0o755))
		if o.Patch != nil {
			b, err := os.ReadFile(n.Config)
			must(t, err)
			must(t, os.WriteFile(n.Config, []byte(o.Patch(id, string(b))), 0o644))
		}
		if len(o.Env) > 0 {
			f, err := os.OpenFile(n.EnvFile, os.O_APPEND|os.O_WRONLY, 0)
			must(t, err)
			fmt.Fprintln(f, strings.Join(o.Env, "\n"))
			f.Close()
		}
		c.Nodes = append(c.Nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.KillDaemon(syscall.SIGKILL)
			n.KillPG()
		}
		if t.Failed() {
			c.DumpLogs()
		}
	})
	c.script("bootstrap.sh", nil, c.Nodes[0].EnvFile)
	c.Nodes[0].StartPG()
	for _, n := range c.Nodes {
		n.StartDaemon()
	}
	c.WaitSettled("", 300*time.Second)
	return c
}

// script runs one of examples/postgresql's scripts.
func (c *Cluster) script(name string, env []string, args ...string) string {
	c.t.Helper()
	out, err := c.runScript(name, env, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// runScript runs one of examples/postgresql's scripts; an error holds its
// output.
func (c *Cluster) runScript(name string, env []string, args ...string) (string, error) {
	p := filepath.Join(RepoRoot(), "examples", "postgresql", name)
	if _, err := os.Stat(p); err != nil {
		p = filepath.Join(c.Hooks, name)
	}
	cmd := exec.Command("bash", append([]string{p}, args...)...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return string(b), fmt.Errorf("%s %v: %v\n%s", name, args, err, b)
	}
	return string(b), nil
}

// freeBlocks finds two bases with base+1..base+3 free on loopback.
func freeBlocks(t testing.TB) (int, int) {
	t.Helper()
	var bases []int
	for try := 0; try < 200 && len(bases) < 2; try++ {
		base := 30000 + rand.IntN(2000)*10
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
		t.Fatal("no free loopback ports for the PostgreSQL cluster")
	}
	return bases[0], bases[1]
}

// Node returns the node with id.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	c.t.Fatalf("no node %s", id)
	return nil
}

// Others are the nodes other than the given ones.
func (c *Cluster) Others(not ...*Node) []*Node {
	var out []*Node
next:
	for _, n := range c.Nodes {
		for _, x := range not {
			if n == x {
				continue next
			}
		}
		out = append(out, n)
	}
	return out
}

// StartPG starts the node's PostgreSQL as a standby (hooks/start.sh: what
// the unit drop-in does at boot).
func (n *Node) StartPG() {
	n.c.t.Helper()
	n.c.script("start.sh", nil, n.EnvFile)
}

// TryStartPG is StartPG, returning start.sh's failure (with its output)
// instead of failing the test.
func (n *Node) TryStartPG() error {
	_, err := n.c.runScript("start.sh", nil, n.EnvFile)
	return err
}

// StartPGNaively starts the node's PostgreSQL the way a unit without the
// drop-in would after a crash of a primary: pg_ctl start on its data
// directory as it is (no standby.signal: a primary).
func (n *Node) StartPGNaively() {
	n.c.t.Helper()
	args := []string{filepath.Join(BinDir(), "pg_ctl"), "start", "-D", n.PGData, "-l", filepath.Join(filepath.Dir(n.PGData), "postgresql.log"),
		"-w", "-t", "60", "-o", "-p " + n.port() + " -c cluster_name=" + strings.ReplaceAll(n.ID, "-", "_") + " -k " + filepath.Dir(n.PGData)}
	if os.Geteuid() == 0 {
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = "/"
	if b, err := cmd.CombinedOutput(); err != nil {
		n.c.t.Fatalf("pg_ctl start of %s: %v\n%s", n.ID, err, b)
	}
}

func (n *Node) port() string { _, p, _ := net.SplitHostPort(n.PGAddr); return p }

// PostmasterPID is the running postmaster's pid, or 0.
func (n *Node) PostmasterPID() int {
	b, err := os.ReadFile(filepath.Join(n.PGData, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// KillPG crashes the node's PostgreSQL as a supervisor that cleans up
// would see it: SIGKILL to the postmaster and to each of its children, and
// a wait until every one is gone. Killing the process group is not enough:
// each child calls setsid(), and one that is slow to notice its
// postmaster's death keeps the shared memory attached, so that a restart
// fails with "pre-existing shared memory block is still in use".
func (n *Node) KillPG() {
	pid := n.PostmasterPID()
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
		c, err := net.DialTimeout("tcp", n.PGAddr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
}

// StartDaemon runs the node's failoverd (again).
func (n *Node) StartDaemon() {
	n.c.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command(n.c.failoverd, "run", "-c", n.Config)
	out, err := os.OpenFile(filepath.Join(n.dir, "failoverd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(n.c.t, err)
	n.daemonStart++
	fmt.Fprintf(out, "---- start %d at %s ----\n", n.daemonStart, time.Now().UTC().Format(time.RFC3339Nano))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = n.dir
	cmd.Env = append(os.Environ(), "FAILOVERD_EVENTS_LOG="+n.c.EventsPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(n.c.t, cmd.Start())
	done := make(chan struct{})
	n.daemon, n.daemonDone = cmd, done
	go func() { cmd.Wait(); out.Close(); close(done) }()
}

// SignalDaemon sends sig to the node's failoverd.
func (n *Node) SignalDaemon(sig syscall.Signal) {
	n.mu.Lock()
	cmd := n.daemon
	n.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Signal(sig)
	}
}

// WaitDaemon waits up to d for the node's failoverd to exit.
func (n *Node) WaitDaemon(d time.Duration) bool {
	n.mu.Lock()
	done := n.daemonDone
	n.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// KillDaemon sends sig to the node's failoverd and waits for it to exit.
func (n *Node) KillDaemon(sig syscall.Signal) {
	n.SignalDaemon(sig)
	if !n.WaitDaemon(60 * time.Second) {
		n.c.t.Errorf("failoverd of %s did not exit within 60s of %v", n.ID, sig)
	}
}

// Crash is a host crash: SIGKILL to the node's failoverd, the hooks it
// was running (each runs in its own process group, so they outlive a
// killed daemon, and a health check that survived would start PostgreSQL
// again) and PostgreSQL.
func (n *Node) Crash() {
	n.SignalDaemon(syscall.SIGKILL)
	n.KillDaemon(syscall.SIGKILL)
	n.killHooks()
	n.KillPG()
	n.killHooks()
	n.KillPG()
}

// killHooks sends SIGKILL to every process whose command line names the
// node's environment file (its hooks, and what they run).
func (n *Node) killHooks() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), n.EnvFile) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Status asks the node's admin API; ok is false when it does not answer.
func (n *Node) Status() (controller.Status, bool) {
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get("http://" + n.AdminAddr + "/v1/status")
	if err != nil {
		return controller.Status{}, false
	}
	defer resp.Body.Close()
	var s controller.Status
	if json.NewDecoder(resp.Body).Decode(&s) != nil {
		return s, false
	}
	return s, true
}

// CLI runs a failoverd command against this node's config.
func (n *Node) CLI(args ...string) (string, int) {
	all := append([]string{args[0], "-c", n.Config}, args[1:]...)
	out, err := exec.Command(n.c.failoverd, all...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		return err.Error(), -1
	}
	return string(out), 0
}

// Query runs sql on the node's PostgreSQL and returns the first column of
// the first row.
func (n *Node) Query(sql string) (string, error) { return Query1(n.PGAddr, sql, 5*time.Second) }

// Writable reports whether the node's PostgreSQL answers as a primary.
func (n *Node) Writable() bool {
	v, err := n.Query("SELECT pg_is_in_recovery()")
	return err == nil && v == "f"
}

// Streaming reports whether the node's PostgreSQL streams from leader's,
// on the leader's current timeline.
func (n *Node) Streaming(leader *Node) bool {
	tli, err := leader.Query("SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int")
	if err != nil {
		return false
	}
	_, port, _ := net.SplitHostPort(leader.PGAddr)
	v, err := n.Query("SELECT status || ' ' || received_tli || ' ' || sender_port FROM pg_stat_wal_receiver")
	return err == nil && v == "streaming "+tli+" "+port
}

// CurrentLeader is the node that reports state leader and whose PostgreSQL
// is a primary, or nil.
func (c *Cluster) CurrentLeader() *Node {
	for _, n := range c.Nodes {
		if s, ok := n.Status(); ok && s.State == controller.StateLeader && n.Writable() {
			return n
		}
	}
	return nil
}

// WaitLeader waits until a node other than not reports state leader and
// its PostgreSQL is a primary, and returns it.
func (c *Cluster) WaitLeader(not string, timeout time.Duration) *Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.CurrentLeader(); l != nil && l.ID != not {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no leader with a primary PostgreSQL (other than %q) within %v", not, timeout)
	return nil
}

// WaitSettled waits until a node other than not leads and the given nodes
// (every other node when none are given) stream from it on its timeline,
// and returns that leader. It follows the leadership if it moves.
func (c *Cluster) WaitSettled(not string, timeout time.Duration, nodes ...*Node) *Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		l := c.CurrentLeader()
		if l != nil && l.ID != not {
			want := nodes
			if len(want) == 0 {
				want = c.Others(l)
			}
			var pending []string
			for _, n := range want {
				if n != l && !n.Streaming(l) {
					pending = append(pending, n.ID)
				}
			}
			if len(pending) == 0 {
				return l
			}
			last = fmt.Sprintf("%s leads; not streaming from it: %s", l.ID, strings.Join(pending, ", "))
		} else {
			last = "no leader"
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not settled within %v: %s", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Events reads the events log.
func (c *Cluster) Events() []redistest.Event {
	b, err := os.ReadFile(c.EventsPath)
	if err != nil {
		return nil
	}
	var evs []redistest.Event
	for _, line := range strings.Split(string(b), "\n") {
		if e, ok := redistest.ParseEvent(line); ok {
			evs = append(evs, e)
		}
	}
	return evs
}

// WaitEvent waits up to timeout for an event of kind at or after since
// matching kv, and returns the first.
func (c *Cluster) WaitEvent(kind string, since time.Time, timeout time.Duration, kv ...string) (redistest.Event, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if evs := redistest.Find(c.Events(), kind, since, kv...); len(evs) > 0 {
			return evs[0], true
		}
		if time.Now().After(deadline) {
			return redistest.Event{}, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DumpLogs writes every node's log tails and the events log to the test log.
func (c *Cluster) DumpLogs() {
	for _, n := range c.Nodes {
		c.t.Logf("==== %s failoverd.log ====\n%s", n.ID, tail(filepath.Join(n.dir, "failoverd.log"), 24<<10))
		c.t.Logf("==== %s postgresql.log ====\n%s", n.ID, tail(filepath.Join(filepath.Dir(n.PGData), "postgresql.log"), 8<<10))
	}
	c.t.Logf("==== events ====\n%s", tail(c.EventsPath, 48<<10))
}

func tail(path string, max int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
