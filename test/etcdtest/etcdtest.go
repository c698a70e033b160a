// Package etcdtest runs real etcd clusters for tests: N members, each a
// separate etcd server process, on free loopback ports, with their data in
// the test's temporary directory.
//
// Two server lines are used, because operators run both and they differ
// where failoverd's lease argument lives: Debian's etcd-server (3.4,
// /usr/bin/etcd) and the current release line, built by scripts/deps.sh
// from the go.etcd.io/etcd/server/v3 version scripts/etcd-server pins
// (ReleaseVersion) into a cache directory. Servers lists those present;
// Start runs the default one (Default). When a server is missing the test
// is skipped, except under CI (CI=true), where it fails: CI must prove the
// behaviour against the real thing.
//
// # Isolating a member
//
// Every member's peer URL is a fault proxy in front of its real peer
// listener, so all raft traffic, and the lease renewals a follower forwards
// to the etcd leader, pass a proxy. The proxy tells which member opened a
// connection (the etcd process owning the connection's other end, from
// /proc), so Isolate(i) cuts every link between member i and its peers, in
// both directions, as a network partition does: open connections stay
// open but carry nothing (bytes are held, nothing is reset), new ones are
// accepted and held. Client ports are untouched: the isolated member keeps
// its clients connected and answers what it can answer alone (serializable
// reads); everything that needs its leader (writes, linearizable reads,
// lease renewals) waits or fails, and a watch opened with
// clientv3.WithRequireLeader is cancelled once the member has had no
// leader for a few election timeouts. Heal(i) releases the held bytes.
package etcdtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/test/freeport"
	"github.com/failoverd/failoverd/test/netproxy"
)

// ReleaseVersion is the etcd release scripts/etcd-server pins (a test
// checks that they agree).
const ReleaseVersion = "v3.7.3"

// Server is an etcd server binary.
type Server struct {
	Name string // "debian" or "release"
	Path string
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// DebianServer is Debian's etcd-server (ETCD_DEBIAN_BIN overrides the path).
func DebianServer() Server {
	return Server{Name: "debian", Path: envOr("ETCD_DEBIAN_BIN", "/usr/bin/etcd")}
}

// ReleaseServer is the release line's server that scripts/deps.sh builds
// (ETCD_RELEASE_BIN overrides the path).
func ReleaseServer() Server {
	cache := os.Getenv("FAILOVERD_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "failoverd")
	}
	return Server{Name: "release", Path: envOr("ETCD_RELEASE_BIN", filepath.Join(cache, "etcd-"+ReleaseVersion, "etcd"))}
}

func (s Server) present() bool {
	st, err := os.Stat(s.Path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// missing skips the test, or under CI fails it.
func missing(t testing.TB, what []string) {
	t.Helper()
	msg := fmt.Sprintf("etcd not available (missing %s); run 'make deps'", strings.Join(what, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Servers returns every server line present. Under CI both must be (the
// test fails otherwise); elsewhere a missing one is left out, and the test
// is skipped when none is there.
func Servers(t testing.TB) []Server {
	t.Helper()
	var have []Server
	var lack []string
	for _, s := range []Server{DebianServer(), ReleaseServer()} {
		if s.present() {
			have = append(have, s)
		} else {
			lack = append(lack, s.Path)
		}
	}
	if len(lack) > 0 && (os.Getenv("CI") == "true" || len(have) == 0) {
		missing(t, lack)
	}
	return have
}

// Default is the server a test runs unless it asks for each line: ETCD_BIN
// when set, else the release line's, else Debian's (see Servers for what
// happens when they are missing).
func Default(t testing.TB) Server {
	t.Helper()
	if p := os.Getenv("ETCD_BIN"); p != "" {
		s := Server{Name: "custom", Path: p}
		if !s.present() {
			missing(t, []string{p})
		}
		return s
	}
	have := Servers(t)
	for _, s := range have {
		if s.Name == "release" {
			return s
		}
	}
	return have[0]
}

// Options configures a cluster.
type Options struct {
	Members int    // 0: 3
	Server  Server // zero: Default
	// Heartbeat and Election are etcd's heartbeat interval and election
	// timeout (0: 100ms and 1s, etcd's defaults: shorter ones make a
	// loaded test machine elect for nothing). The smallest lease TTL
	// etcd grants is 1.5 election timeouts, rounded up to seconds.
	Heartbeat, Election time.Duration
	// Security, when set, serves clients over TLS with client
	// certificates and turns etcd's auth on (see Security).
	Security *Security
	// PreVote starts every member with --pre-vote=true: raft's pre-vote,
	// off by default before etcd 3.5 (Debian's 3.4), on from 3.5.
	PreVote bool
}

// Member is one etcd server process.
type Member struct {
	Index      int
	Name       string
	scheme     string // of the client URL: http, or https with Security
	ClientPort int
	peerPort   int // the real listener; peers reach it through proxy
	proxy      *peerProxy
	dir        string
	log        string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Endpoint is the member's client URL.
func (m *Member) Endpoint() string { return m.scheme + "://" + loopback(m.ClientPort) }

// LogPath is the file the member's server writes its log to (kept across
// restarts: each start appends).
func (m *Member) LogPath() string { return m.log }

// ClientAddr is the member's client address, 127.0.0.1:port.
func (m *Member) ClientAddr() string { return loopback(m.ClientPort) }

func (m *Member) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	opts    Options
	Members []*Member

	linkMu   sync.Mutex
	isolated map[int]bool

	clientMu sync.Mutex
	clients  map[int]*clientv3.Client
}

// Start runs a cluster of opts.Members members (3 by default) of the
// default server line and waits until every member serves. The processes
// are killed when the test ends; their logs are printed if it failed.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Members <= 0 {
		opts.Members = 3
	}
	if opts.Server.Path == "" {
		opts.Server = Default(t)
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 100 * time.Millisecond
	}
	if opts.Election <= 0 {
		opts.Election = time.Second
	}
	n := opts.Members
	c := &Cluster{t: t, opts: opts, isolated: map[int]bool{}, clients: map[int]*clientv3.Client{}}
	base := t.TempDir()
	ports := freeport.Take(t, 2*n)
	for i := range n {
		m := &Member{Index: i, Name: fmt.Sprintf("m%d", i), ClientPort: ports[2*i], peerPort: ports[2*i+1], scheme: scheme(opts.Security)}
		m.dir = filepath.Join(base, m.Name)
		m.log = filepath.Join(m.dir, "etcd.log")
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		m.proxy = newPeerProxy(t, c, i, loopback(m.peerPort))
		c.Members = append(c.Members, m)
	}
	t.Cleanup(func() {
		c.closeClients()
		for _, m := range c.Members {
			c.kill(m)
		}
		for _, m := range c.Members {
			m.proxy.close()
		}
		if t.Failed() {
			c.DumpLogs()
		}
	})
	for _, m := range c.Members {
		m.proxy.start()
	}
	for _, m := range c.Members {
		c.launch(m)
	}
	c.WaitServing(60 * time.Second)
	if opts.Security != nil {
		c.enableAuth()
	}
	return c
}

// Server is the server line the cluster runs.
func (c *Cluster) Server() Server { return c.opts.Server }

// Options returns the options the cluster runs with (defaults filled in).
func (c *Cluster) Options() Options { return c.opts }

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func (c *Cluster) initialCluster() string {
	var parts []string
	for _, m := range c.Members {
		parts = append(parts, m.Name+"=http://"+m.proxy.addr())
	}
	return strings.Join(parts, ",")
}

func (c *Cluster) launch(m *Member) {
	c.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return
	}
	out, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	args := []string{
		"--name", m.Name,
		"--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", m.Endpoint(),
		"--advertise-client-urls", m.Endpoint(),
		"--listen-peer-urls", "http://" + loopback(m.peerPort),
		"--initial-advertise-peer-urls", "http://" + m.proxy.addr(),
		"--initial-cluster", c.initialCluster(),
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "etcdtest",
		"--heartbeat-interval", strconv.FormatInt(c.opts.Heartbeat.Milliseconds(), 10),
		"--election-timeout", strconv.FormatInt(c.opts.Election.Milliseconds(), 10),
		"--logger", "zap", "--log-outputs", "stderr",
	}
	if c.opts.PreVote {
		args = append(args, "--pre-vote=true")
	}
	args = append(args, c.opts.Security.serverArgs()...)
	cmd := exec.Command(c.opts.Server.Path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		c.t.Fatalf("starting etcd %s: %v", m.Name, err)
	}
	m.cmd, m.done = cmd, make(chan struct{})
	done := m.done
	go func() { cmd.Wait(); out.Close(); close(done) }()
}

func (c *Cluster) kill(m *Member) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Endpoints lists every member's client URL.
func (c *Cluster) Endpoints() []string {
	var e []string
	for _, m := range c.Members {
		e = append(e, m.Endpoint())
	}
	return e
}

// Kill kills member i with SIGKILL, as a crash would; Start brings it back
// with its data.
func (c *Cluster) Kill(i int) { c.kill(c.Members[i]) }

// Stop stops member i gracefully (SIGTERM, then SIGKILL after 10s): a
// leader hands its leadership over before it exits.
func (c *Cluster) Stop(i int) {
	m := c.Members[i]
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
	syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	c.kill(m)
}

// StartMember starts member i again (after Kill or Stop) and waits until
// the cluster serves.
func (c *Cluster) StartMember(i int) {
	c.t.Helper()
	c.launch(c.Members[i])
	c.WaitServing(60 * time.Second)
}

// Running reports whether member i's process is up.
func (c *Cluster) Running(i int) bool { return c.Members[i].pid() != 0 }

// Pause stops member i's process with SIGSTOP (it holds its connections
// and answers nothing); Resume continues it.
func (c *Cluster) Pause(i int) {
	if pid := c.Members[i].pid(); pid != 0 {
		syscall.Kill(-pid, syscall.SIGSTOP)
		waitStopped(c.t, pid)
	}
}

// waitStopped returns once every thread of process pid is stopped. kill
// returns as soon as SIGSTOP is queued; each thread stops when it is next
// scheduled, and on a busy machine the member answered requests for
// milliseconds after Pause returned.
func waitStopped(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, err := runningThreads(pid)
		if err != nil || running == 0 {
			return // gone (killed meanwhile) or stopped
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: process %d still has %d running threads 10s after SIGSTOP", pid, running)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of pid that are neither stopped (state
// T or t in /proc/PID/task/TID/stat) nor dead (Z, X: a member that exited
// and was not reaped yet).
func runningThreads(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		// "TID (comm) S ...": the state follows the last ')'.
		rest := b[bytes.LastIndexByte(b, ')')+1:]
		if f := bytes.Fields(rest); len(f) > 0 && !bytes.ContainsAny(f[0][:1], "TtZX") {
			n++
		}
	}
	return n, nil
}

// Resume continues member i after Pause.
func (c *Cluster) Resume(i int) {
	if pid := c.Members[i].pid(); pid != 0 {
		syscall.Kill(-pid, syscall.SIGCONT)
	}
}

// Isolate cuts member i off from every peer, both ways, as a network
// partition would (see the package doc); its client port stays up.
func (c *Cluster) Isolate(i int) { c.setIsolated(i, true) }

// Heal ends Isolate(i): held bytes flow again and the member rejoins.
// Links to a peer that is itself isolated stay cut.
func (c *Cluster) Heal(i int) { c.setIsolated(i, false) }

func (c *Cluster) setIsolated(i int, on bool) {
	c.linkMu.Lock()
	c.isolated[i] = on
	c.linkMu.Unlock()
	for _, m := range c.Members {
		m.proxy.changed()
	}
}

// cut reports whether the link from member from (-1: unknown) to member
// to carries nothing now.
func (c *Cluster) cut(from, to int) bool {
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	return c.isolated[to] || from >= 0 && c.isolated[from]
}

// othersIsolated reports whether a member other than to is isolated: only
// then does the link to to depend on who opened a connection.
func (c *Cluster) othersIsolated(to int) bool {
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	for i, on := range c.isolated {
		if on && i != to {
			return true
		}
	}
	return false
}

// Isolated reports whether member i is cut off by Isolate.
func (c *Cluster) Isolated(i int) bool {
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	return c.isolated[i]
}

// memberOf returns the index of the member whose process is pid (-1: none).
func (c *Cluster) memberOf(pid int) int {
	for _, m := range c.Members {
		if p := m.pid(); p != 0 && p == pid {
			return m.Index
		}
	}
	return -1
}

// pids lists the running members' process ids.
func (c *Cluster) pids() []int {
	var out []int
	for _, m := range c.Members {
		if p := m.pid(); p != 0 {
			out = append(out, p)
		}
	}
	return out
}

// Client returns a client connected to member i only (no other endpoint),
// closed when the test ends. Its requests do not use "require leader"
// unless their context says so. With Options.Security it is etcd's root
// user, by its client certificate.
func (c *Cluster) Client(i int) *clientv3.Client {
	c.t.Helper()
	c.clientMu.Lock()
	defer c.clientMu.Unlock()
	if cli := c.clients[i]; cli != nil {
		return cli
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{c.Members[i].Endpoint()},
		DialTimeout: 5 * time.Second,
		TLS:         c.opts.Security.rootTLS(),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		c.t.Fatalf("etcd client of %s: %v", c.Members[i].Name, err)
	}
	c.clients[i] = cli
	return cli
}

func (c *Cluster) closeClients() {
	c.clientMu.Lock()
	defer c.clientMu.Unlock()
	for i, cli := range c.clients {
		cli.Close()
		delete(c.clients, i)
	}
}

// status asks member i for its status, within d.
func (c *Cluster) status(i int, d time.Duration) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Client(i).Status(ctx, c.Members[i].Endpoint())
}

// WaitServing waits until every running member that is not isolated
// answers a linearizable read (it is in touch with a leader).
func (c *Cluster) WaitServing(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		var last error
		for i := range c.Members {
			if !c.Running(i) || c.Isolated(i) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := c.Client(i).Get(ctx, "/etcdtest/health")
			cancel()
			if err != nil {
				ok, last = false, fmt.Errorf("%s: %w", c.Members[i].Name, err)
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("etcd not serving after %v: %v", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Leader returns the index of the etcd leader: the member that says it
// leads, in the highest raft term when more than one says so (an isolated
// leader that has not noticed yet). It fails the test when no member
// names itself within 30s.
func (c *Cluster) Leader() int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		best, term := -1, uint64(0)
		for i := range c.Members {
			if !c.Running(i) {
				continue
			}
			st, err := c.status(i, time.Second)
			if err != nil || st.Leader == 0 || st.Leader != st.Header.MemberId {
				continue
			}
			if st.RaftTerm > term {
				best, term = i, st.RaftTerm
			}
		}
		if best >= 0 {
			return best
		}
		if time.Now().After(deadline) {
			c.t.Fatal("etcdtest: no etcd leader")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LeaderOf returns the index of the member that member i takes for the
// leader (-1: none, or i does not answer within a second).
func (c *Cluster) LeaderOf(i int) int {
	st, err := c.status(i, time.Second)
	if err != nil || st.Leader == 0 {
		return -1
	}
	for j := range c.Members {
		sj, err := c.status(j, time.Second)
		if err == nil && sj.Header.MemberId == st.Leader {
			return j
		}
	}
	return -1
}

// DumpLogs prints the end of every member's log into the test output.
func (c *Cluster) DumpLogs() {
	for _, m := range c.Members {
		b, err := os.ReadFile(m.log)
		if err != nil {
			continue
		}
		if len(b) > 32<<10 {
			b = b[len(b)-32<<10:]
		}
		c.t.Logf("==== etcd %s (%s) ====\n%s", m.Name, c.opts.Server.Name, b)
	}
}

// Version runs the server binary with --version and returns the version
// it prints ("3.4.23").
func (s Server) Version() (string, error) {
	out, err := exec.Command(s.Path, "--version").Output()
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd Version: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errors.New("no version in etcd --version")
}

// ClientProxy returns a fault proxy in front of member i's client port
// (Blackhole, Reset, SetLatency: a client cut off from its member while
// the cluster is whole), closed when the test ends. Clients connect to
// "http://" + Addr().
func (c *Cluster) ClientProxy(i int) *netproxy.Proxy {
	return netproxy.New(c.t, func() string { return c.Members[i].ClientAddr() })
}
