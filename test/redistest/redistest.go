// Package redistest runs the Redis example (examples/redis) for real: a
// standalone ZooKeeper (test/zktest), three redis-server processes and a
// failoverd process beside each, configured by examples/redis/render.sh
// from the shipped templates and driven by the shipped hooks. The
// end-to-end tests (test/e2e) and the follow benchmark (test/bench) use it.
//
// The hooks append one line per run to the cluster's events log
// (FAILOVERD_EVENTS_LOG): "TIME event=NAME key=value ... result=ok|failed".
package redistest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/zktest"
)

// Require skips the test when redis-server or redis-cli is missing, and
// fails it under CI (CI=true), where every component must be there.
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			msg := bin + " is required (make deps: Debian's redis-server and redis-tools)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// Options shape a cluster.
type Options struct {
	// RedisArgs are appended to every redis-server command line (after the
	// config file: "--enable-debug-command", "local", for example).
	RedisArgs []string
	// Patch, when set, rewrites a rendered failoverd config before it is
	// used (the tests keep the shipped one unless they must not).
	Patch func(node, yaml string) string
}

// Cluster is a running Redis example cluster.
type Cluster struct {
	t          testing.TB
	Dir        string
	ZK         *zktest.Cluster
	Nodes      []*Node
	EventsPath string
	opts       Options
	failoverd  string
}

// Node is one redis-server plus its failoverd.
type Node struct {
	c         *Cluster
	ID        string
	Config    string // the rendered failoverd config
	RedisConf string
	RedisAddr string // host:port, also its node.service_address
	AdminAddr string
	dir       string

	mu          sync.Mutex
	daemon      *exec.Cmd
	daemonDone  chan struct{}
	redis       *exec.Cmd
	redisDone   chan struct{}
	daemonStart int // how many times the daemon was started (log names)
}

// Start renders the example, starts ZooKeeper, the three Redis and the
// three failoverd, and waits until one node leads and both others' Redis
// follow its Redis.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	zktest.Require(t)
	Require(t)
	fd, _ := clustertest.Binaries(t)
	c := &Cluster{t: t, Dir: t.TempDir(), opts: o, failoverd: fd}
	c.EventsPath = filepath.Join(c.Dir, "events.log")
	c.ZK = zktest.Start(t, 1)

	redisBase, adminBase := freeBlocks(t)
	out := filepath.Join(c.Dir, "cluster")
	render := exec.Command("bash", filepath.Join(RepoRoot(), "examples", "redis", "render.sh"), out)
	render.Env = append(os.Environ(), "ZK_SERVERS="+strings.Join(c.ZK.Addrs(), ","),
		"REDIS_PORT_BASE="+strconv.Itoa(redisBase), "ADMIN_PORT_BASE="+strconv.Itoa(adminBase))
	if b, err := render.CombinedOutput(); err != nil {
		t.Fatalf("render.sh: %v\n%s", err, b)
	}
	for i, id := range []string{"node-a", "node-b", "node-c"} {
		n := &Node{c: c, ID: id,
			Config:    filepath.Join(out, id+".yaml"),
			RedisConf: filepath.Join(out, "redis-"+id[len("node-"):]+".conf"),
			RedisAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(redisBase+i+1)),
			AdminAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(adminBase+i+1)),
			dir:       filepath.Join(c.Dir, id)}
		must(t, os.MkdirAll(n.dir, 0o755))
		if o.Patch != nil {
			b, err := os.ReadFile(n.Config)
			must(t, err)
			must(t, os.WriteFile(n.Config, []byte(o.Patch(id, string(b))), 0o644))
		}
		c.Nodes = append(c.Nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.KillDaemon(syscall.SIGKILL)
			n.KillRedis()
		}
		if t.Failed() {
			c.DumpLogs()
		}
	})
	for _, n := range c.Nodes {
		n.StartRedis()
	}
	for _, n := range c.Nodes {
		n.StartDaemon()
	}
	c.WaitLeader("", 90*time.Second)
	// Whoever leads by then: on a loaded host the first leadership can
	// move on before the others follow it.
	c.WaitSettled("", 90*time.Second)
	return c
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

// freeBlocks finds two bases with base+1..base+3 free on loopback: the
// rendered configs put node N on base+N.
func freeBlocks(t testing.TB) (int, int) {
	t.Helper()
	var bases []int
	for try := 0; try < 200 && len(bases) < 2; try++ {
		base := 20000 + rand.IntN(2000)*10
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
		t.Fatal("no free loopback ports for the Redis cluster")
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

// StartRedis runs the node's redis-server (again) and waits until it
// answers PING.
func (n *Node) StartRedis() {
	n.c.t.Helper()
	args := append([]string{n.RedisConf}, n.c.opts.RedisArgs...)
	cmd := exec.Command("redis-server", args...)
	out, err := os.OpenFile(filepath.Join(n.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(n.c.t, err)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(n.c.t, cmd.Start())
	done := make(chan struct{})
	n.mu.Lock()
	n.redis, n.redisDone = cmd, done
	n.mu.Unlock()
	go func() { cmd.Wait(); out.Close(); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if v, err := Command(n.RedisAddr, time.Second, "PING"); err == nil && v == "PONG" {
			return
		}
		select {
		case <-done:
			n.c.t.Fatalf("redis-server of %s exited; its log ends:\n%s", n.ID, tail(filepath.Join(n.dir, "redis.log"), 2000))
		case <-time.After(50 * time.Millisecond):
		}
	}
	n.c.t.Fatalf("redis-server of %s does not answer on %s", n.ID, n.RedisAddr)
}

// KillRedis sends SIGKILL to the node's redis-server and waits for it.
func (n *Node) KillRedis() {
	n.mu.Lock()
	cmd, done := n.redis, n.redisDone
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		n.c.t.Errorf("redis-server of %s did not exit after SIGKILL", n.ID)
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
	if !n.WaitDaemon(30 * time.Second) {
		n.c.t.Errorf("failoverd of %s did not exit within 30s of %v", n.ID, sig)
	}
}

// Status asks the node's admin API; ok is false when it does not answer.
func (n *Node) Status() (controller.Status, bool) {
	cl := http.Client{Timeout: 2 * time.Second}
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

// DaemonLog is everything the node's failoverd logged so far (all starts).
func (n *Node) DaemonLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "failoverd.log"))
	return string(b)
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

// Role is what the node's Redis answers to ROLE.
func (n *Node) Role() Role { return ReadRole(n.RedisAddr) }

// Do runs one Redis command on the node's Redis.
func (n *Node) Do(args ...string) (any, error) { return Command(n.RedisAddr, 2*time.Second, args...) }

// WaitLeader waits until a node other than not reports state leader and
// its Redis is a primary, and returns it.
func (c *Cluster) WaitLeader(not string, timeout time.Duration) *Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if n.ID == not {
				continue
			}
			if s, ok := n.Status(); ok && s.State == controller.StateLeader && n.Role().Role == "master" {
				return n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no leader with a primary Redis (other than %q) within %v", not, timeout)
	return nil
}

// WaitFollowing waits until every given node's Redis is a replica of the
// leader's with its link up, and returns how long that took.
func (c *Cluster) WaitFollowing(leader *Node, timeout time.Duration, nodes ...*Node) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		var pending []string
		for _, n := range nodes {
			if r := n.Role(); !r.Follows(leader.RedisAddr) {
				pending = append(pending, fmt.Sprintf("%s: %v", n.ID, r))
			}
		}
		if len(pending) == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not following %s (%s) within %v: %s", leader.ID, leader.RedisAddr, timeout, strings.Join(pending, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CurrentLeader is the node that reports state leader and whose Redis is
// a primary, or nil.
func (c *Cluster) CurrentLeader() *Node {
	for _, n := range c.Nodes {
		if s, ok := n.Status(); ok && s.State == controller.StateLeader && n.Role().Role == "master" {
			return n
		}
	}
	return nil
}

// WaitSettled waits until a node other than not leads and the given nodes'
// Redis (every other node's when none are given) follow its Redis, and
// returns that leader. Unlike WaitFollowing it follows the leadership if
// it moves meanwhile (on a loaded host a lease can run out).
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
				if n == l {
					continue
				}
				if r := n.Role(); !r.Follows(l.RedisAddr) {
					pending = append(pending, fmt.Sprintf("%s: %v", n.ID, r))
				}
			}
			if len(pending) == 0 {
				return l
			}
			last = fmt.Sprintf("%s leads; not following it: %s", l.ID, strings.Join(pending, "; "))
		} else {
			last = "no leader"
			if l != nil {
				last = l.ID + " still leads"
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not settled within %v: %s", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Event is one line of the events log.
type Event struct {
	At   time.Time
	Kind string
	KV   map[string]string
}

// OK reports whether the hook succeeded.
func (e Event) OK() bool { return e.KV["result"] == "ok" }

// Events reads the events log.
func (c *Cluster) Events() []Event {
	f, err := os.Open(c.EventsPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var evs []Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if e, ok := ParseEvent(sc.Text()); ok {
			evs = append(evs, e)
		}
	}
	return evs
}

// ParseEvent parses "TIME event=NAME k=v k=\"quoted value\" ...".
func ParseEvent(line string) (Event, bool) {
	ts, rest, ok := strings.Cut(line, " ")
	if !ok {
		return Event{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Event{}, false
	}
	e := Event{At: at, KV: map[string]string{}}
	for rest != "" {
		rest = strings.TrimLeft(rest, " ")
		k, v, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		if strings.HasPrefix(v, `"`) {
			end := 1
			for end < len(v) && v[end] != '"' {
				if v[end] == '\\' {
					end++
				}
				end++
			}
			if uq, err := strconv.Unquote(v[:min(end+1, len(v))]); err == nil {
				e.KV[k] = uq
			}
			rest = v[min(end+1, len(v)):]
		} else {
			val, r, _ := strings.Cut(v, " ")
			e.KV[k] = val
			rest = r
		}
	}
	e.Kind = e.KV["event"]
	return e, e.Kind != ""
}

// Find returns the events of a kind at or after since, filtered by
// key=value pairs.
func Find(evs []Event, kind string, since time.Time, kv ...string) []Event {
	var out []Event
	for _, e := range evs {
		if e.Kind != kind || e.At.Before(since) {
			continue
		}
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if e.KV[kv[i]] != kv[i+1] {
				ok = false
			}
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

// WaitEvent waits up to timeout for an event of kind at or after since
// matching kv, and returns the first. (A Redis can show the effect of a
// hook before the hook has written its line, which it does last.)
func (c *Cluster) WaitEvent(kind string, since time.Time, timeout time.Duration, kv ...string) (Event, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if evs := Find(c.Events(), kind, since, kv...); len(evs) > 0 {
			return evs[0], true
		}
		if time.Now().After(deadline) {
			return Event{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DumpLogs writes every node's log tails and the events log to the test log.
func (c *Cluster) DumpLogs() {
	for _, n := range c.Nodes {
		for _, name := range []string{"failoverd.log", "redis.log"} {
			c.t.Logf("==== %s %s ====\n%s", n.ID, name, tail(filepath.Join(n.dir, name), 24<<10))
		}
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
