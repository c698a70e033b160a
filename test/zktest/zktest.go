// Package zktest runs real ZooKeeper servers for tests: a standalone server or
// an ensemble, from Debian's zookeeper package, on free loopback ports, with a
// short tickTime so session timeouts of about a second are allowed.
//
// When ZooKeeper is missing the test is skipped, except under CI (CI=true),
// where it fails: CI must prove the behaviour against the real thing.
//
// # Quorum partitions
//
// StartOpts with Options.ProxyQuorum starts an ensemble whose servers reach
// each other only through fault proxies: every server gets its own zoo.cfg in
// which its own server.N line is its real bind address and every peer's line
// points at a proxy that belongs to that (server, peer) pair, one for the
// quorum port and one for the election port. The election proxy also rewrites
// the address a server announces in its first election message (ZooKeeper
// 3.5+ connects back to that address instead of its configured one), so no
// link between two servers ever bypasses the proxies.
//
// Isolate(i) cuts every quorum and election link of server i, in both
// directions, the way a network partition does: open connections stay open
// but carry nothing (bytes are held, nothing is reset), and new connections
// are accepted by the proxy but reach the peer only after Heal. Nothing
// touches the client port, so the isolated server keeps serving its clients:
// a follower answers reads, pings and session creation from its local copy
// until it has heard nothing from its leader for syncLimit × tickTime (it
// cannot answer a sync or a write: those need the leader); an isolated leader
// keeps its role until it notices, after about syncLimit ticks, that no
// quorum of followers acknowledges it. Meanwhile the other servers time out
// on it and elect a new leader among themselves, which expires the sessions
// of the isolated server's clients after their session timeout (the leader
// learns of a follower's clients only through that follower). Heal(i)
// releases the held bytes and lets the server rejoin.
//
// Options.TickTime and Options.SyncLimit set the two knobs that decide how
// long an isolated server goes on serving; production defaults (tickTime 2 s,
// syncLimit 5) give 10 s, longer than usual session timeouts, and a test
// reproduces that relation with, say, 200 ms × 30 against a 2 s session.
package zktest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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

	"github.com/failoverd/failoverd/internal/tlstest"
	"github.com/failoverd/failoverd/test/freeport"
	"github.com/failoverd/failoverd/test/netproxy"
)

// Jar is where Debian's zookeeper package puts the server.
var Jar = envOr("ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar")

// TickTime is the default tick; sessions may be 2 to 300 ticks long.
const TickTime = 200 * time.Millisecond

// Options configures the servers StartOpts runs.
type Options struct {
	Servers int // 1: standalone; 3 or more: an ensemble
	// TickTime is ZooKeeper's tick (0: TickTime). Sessions may be 2 to 300
	// ticks long.
	TickTime time.Duration
	// SyncLimit is how many ticks a follower may go without hearing from its
	// leader (and a leader from a quorum of followers) before giving up on it
	// (0: 10).
	SyncLimit int
	// InitLimit is how many ticks a follower may take to connect and sync to
	// a leader (0: 50).
	InitLimit int
	// ProxyQuorum routes every quorum and election link through fault
	// proxies, for Isolate and Heal (ensembles only).
	ProxyQuorum bool
	// TLS, when set, also opens a secureClientPort on every server (Netty,
	// loopback only) with PKI's server certificate, and requires clients
	// there to present a certificate PKI's CA signed.
	TLS *tlstest.PKI
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Require skips (or, under CI, fails) the test when ZooKeeper or java is missing.
func Require(t testing.TB) {
	t.Helper()
	var missing []string
	if _, err := os.Stat(Jar); err != nil {
		missing = append(missing, Jar)
	}
	if _, err := exec.LookPath("java"); err != nil {
		missing = append(missing, "java")
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("ZooKeeper not available (missing %s); run 'make deps'", strings.Join(missing, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Server is one ZooKeeper server process.
type Server struct {
	ID         int
	ClientPort int
	SecurePort int // with Options.TLS; 0 otherwise
	peerPort   int
	elecPort   int
	dir        string
	cfg        string
	log        string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr is the server's client address, 127.0.0.1:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ClientPort)) }

// SecureAddr is the server's TLS client address (Options.TLS), 127.0.0.1:port.
func (s *Server) SecureAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.SecurePort))
}

// Cluster is a standalone server (one) or an ensemble (three or more).
type Cluster struct {
	t       testing.TB
	opts    Options
	Servers []*Server

	// links[i][j] carries server i's connections to server j (ProxyQuorum).
	links    [][]*peerLink
	linkMu   sync.Mutex
	isolated map[int]bool
}

// peerLink is the pair of proxies server i uses to reach server j.
type peerLink struct {
	quorum   *quorumProxy
	election *netproxy.Proxy
}

// Start runs n servers (n == 1 is standalone) and waits until they serve.
// They are killed when the test ends; their logs are printed if it failed.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartOpts(t, Options{Servers: n})
}

// StartOpts runs the servers o describes and waits until they serve.
// They are killed when the test ends; their logs are printed if it failed.
func StartOpts(t testing.TB, o Options) *Cluster {
	t.Helper()
	Require(t)
	if o.Servers < 1 {
		t.Fatalf("zktest: %d servers", o.Servers)
	}
	if o.TickTime <= 0 {
		o.TickTime = TickTime
	}
	if o.SyncLimit <= 0 {
		o.SyncLimit = 10
	}
	if o.InitLimit <= 0 {
		o.InitLimit = 50
	}
	if o.TLS != nil {
		if _, err := os.Stat(filepath.Join(NettyDir, "netty-handler.jar")); err != nil {
			msg := fmt.Sprintf("ZooKeeper's secureClientPort needs Netty (missing %s); run 'make deps'", filepath.Join(NettyDir, "netty-handler.jar"))
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	if o.ProxyQuorum && o.Servers < 2 {
		t.Fatal("zktest: ProxyQuorum needs an ensemble")
	}
	n := o.Servers
	base := t.TempDir()
	ports := freeport.Take(t, 4*n)
	c := &Cluster{t: t, opts: o, isolated: map[int]bool{}}
	for i := 0; i < n; i++ {
		s := &Server{ID: i + 1, ClientPort: ports[4*i], peerPort: ports[4*i+1], elecPort: ports[4*i+2]}
		if o.TLS != nil {
			s.SecurePort = ports[4*i+3]
		}
		s.dir = filepath.Join(base, fmt.Sprintf("zk%d", s.ID))
		s.cfg = filepath.Join(s.dir, "zoo.cfg")
		s.log = filepath.Join(s.dir, "server.log")
		c.Servers = append(c.Servers, s)
	}
	if o.ProxyQuorum {
		c.startLinks()
	}
	for _, s := range c.Servers {
		if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "data", "myid"), []byte(strconv.Itoa(s.ID)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.cfg, []byte(c.config(s)), 0o644); err != nil {
			t.Fatal(err)
		}
		if o.TLS != nil {
			writeKeyStore(t, filepath.Join(s.dir, "keystore.pem"), o.TLS)
		}
		log4j := "log4j.rootLogger=INFO, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n" +
			"log4j.appender.F.File=" + s.log + "\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n" +
			"log4j.appender.F.layout.ConversionPattern=%d{ISO8601} [myid:%X{myid}] %-5p [%t] %c{1}: %m%n\n"
		if err := os.WriteFile(filepath.Join(s.dir, "log4j.properties"), []byte(log4j), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			c.kill(s)
		}
		if t.Failed() {
			c.DumpLogs()
		}
	})
	for _, s := range c.Servers {
		c.launch(s)
	}
	c.WaitServing(60 * time.Second)
	return c
}

func (c *Cluster) config(s *Server) string {
	var b strings.Builder
	tick := c.opts.TickTime.Milliseconds()
	fmt.Fprintf(&b, "tickTime=%d\ninitLimit=%d\nsyncLimit=%d\n", tick, c.opts.InitLimit, c.opts.SyncLimit)
	fmt.Fprintf(&b, "minSessionTimeout=%d\nmaxSessionTimeout=%d\n", 2*tick, max(60000, 20*tick))
	fmt.Fprintf(&b, "dataDir=%s\nclientPortAddress=127.0.0.1\nclientPort=%d\n", filepath.Join(s.dir, "data"), s.ClientPort)
	b.WriteString("4lw.commands.whitelist=*\nadmin.enableServer=false\nmaxClientCnxns=0\n")
	if p := c.opts.TLS; p != nil {
		fmt.Fprintf(&b, "secureClientPortAddress=127.0.0.1\nsecureClientPort=%d\n", s.SecurePort)
		b.WriteString("serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n")
		fmt.Fprintf(&b, "ssl.keyStore.location=%s\nssl.keyStore.type=PEM\n", filepath.Join(s.dir, "keystore.pem"))
		fmt.Fprintf(&b, "ssl.trustStore.location=%s\nssl.trustStore.type=PEM\nssl.clientAuth=need\n", p.CAFile)
	}
	b.WriteString("autopurge.purgeInterval=0\nsnapCount=100000\nforceSync=no\n")
	if len(c.Servers) > 1 {
		b.WriteString("standaloneEnabled=false\nreconfigEnabled=false\ncnxTimeout=1000\n")
		for j, o := range c.Servers {
			peer, elec := o.peerPort, o.elecPort
			if c.links != nil && o != s {
				// Peers through this server's own proxies; its own line
				// stays its bind address.
				l := c.links[s.ID-1][j]
				peer, elec = l.quorum.Port(), l.election.Port()
			}
			fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", o.ID, peer, elec)
		}
	}
	return b.String()
}

func (c *Cluster) launch(s *Server) {
	c.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	out, err := os.OpenFile(filepath.Join(s.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command("java",
		"-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k",
		"-Dzookeeper.jmx.log4j.disable=true", "-Dlog4j.configuration=file:"+filepath.Join(s.dir, "log4j.properties"),
		"-Dzookeeper.admin.enableServer=false",
		"-cp", Jar+":"+s.dir+":/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"+c.nettyJars(),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", s.cfg)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		c.t.Fatalf("starting zookeeper %d: %v", s.ID, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	done := s.done
	go func() { cmd.Wait(); out.Close(); close(done) }()
}

func (c *Cluster) kill(s *Server) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Addrs lists the client addresses of all servers.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.Servers {
		a = append(a, s.Addr())
	}
	return a
}

// startLinks starts the quorum and election proxies of every ordered pair
// of servers.
func (c *Cluster) startLinks() {
	n := len(c.Servers)
	c.links = make([][]*peerLink, n)
	for i := range n {
		c.links[i] = make([]*peerLink, n)
		for j := range n {
			if i == j {
				continue
			}
			to := c.Servers[j]
			quorum := newQuorumProxy(c.t, func() string { return loopback(to.peerPort) })
			election := netproxy.Listen(c.t, func() string { return loopback(to.elecPort) }, true)
			c.links[i][j] = &peerLink{quorum: quorum, election: election}
		}
	}
	// Server i's election messages announce its own address; j must reach
	// i back through j's proxy to i.
	for i := range n {
		for j := range n {
			if i != j {
				back := c.links[j][i].election
				c.links[i][j].election.SetRewrite(func(r io.Reader) ([]byte, error) {
					return rewriteElectionHello(r, back.Addr())
				})
			}
		}
	}
	for i := range n {
		for _, l := range c.links[i] {
			if l != nil {
				l.quorum.Start()
				l.election.Start()
			}
		}
	}
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// rewriteElectionHello reads the first message a server sends on an
// election connection (protocol version, server id, its election address;
// ZooKeeper 3.5+) and returns it with addr as the announced address.
// Older hellos (a bare non-negative server id) pass unchanged.
func rewriteElectionHello(r io.Reader, addr string) ([]byte, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	if int64(binary.BigEndian.Uint64(hdr[:])) >= 0 {
		return hdr[:], nil
	}
	var rest [12]byte // server id, address length
	if _, err := io.ReadFull(r, rest[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(rest[8:])
	if n > 4096 {
		return nil, fmt.Errorf("election hello announces a %d-byte address", n)
	}
	if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
		return nil, err
	}
	out := append(hdr[:], rest[:8]...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(addr)))
	return append(out, addr...), nil
}

// Isolate cuts server i (0-based) off from every peer, both ways, on the
// quorum and the election ports, as a network partition would: connections
// stay open and carry nothing. Its client port stays up. It needs
// Options.ProxyQuorum.
func (c *Cluster) Isolate(i int) { c.setIsolated(i, true) }

// Heal ends Isolate(i): held bytes flow again and the server rejoins. Links
// to a peer that is itself isolated stay cut.
func (c *Cluster) Heal(i int) { c.setIsolated(i, false) }

func (c *Cluster) setIsolated(i int, on bool) {
	c.t.Helper()
	if c.links == nil {
		c.t.Fatal("zktest: Isolate and Heal need Options.ProxyQuorum")
	}
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	c.isolated[i] = on
	for a := range c.links {
		for b, l := range c.links[a] {
			if l != nil {
				cut := c.isolated[a] || c.isolated[b]
				l.quorum.Blackhole(cut)
				l.election.Blackhole(cut)
			}
		}
	}
}

// Isolated reports whether server i is cut off by Isolate.
func (c *Cluster) Isolated(i int) bool {
	c.linkMu.Lock()
	defer c.linkMu.Unlock()
	return c.isolated[i]
}

// Options returns the options the cluster runs with (defaults filled in).
func (c *Cluster) Options() Options { return c.opts }

// Stop kills server i (0-based) with SIGKILL, as a crash would.
func (c *Cluster) Stop(i int) { c.kill(c.Servers[i]) }

// Restart starts server i again (after Stop) and waits for the ensemble.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.launch(c.Servers[i])
	c.WaitServing(60 * time.Second)
}

// StopAll kills every server.
func (c *Cluster) StopAll() {
	for _, s := range c.Servers {
		c.kill(s)
	}
}

// StartAll starts every stopped server and waits until they serve.
func (c *Cluster) StartAll() {
	c.t.Helper()
	for _, s := range c.Servers {
		c.launch(s)
	}
	c.WaitServing(60 * time.Second)
}

// Running reports whether server i's process is up.
func (c *Cluster) Running(i int) bool {
	s := c.Servers[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// WaitServing waits until every running server answers srvr with a mode.
func (c *Cluster) WaitServing(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for i, s := range c.Servers {
			if !c.Running(i) {
				continue
			}
			if m, _ := Mode(s.Addr()); m == "" {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.DumpLogs()
			c.t.Fatalf("zookeeper not serving after %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Leader returns the index of the ensemble's leader (0 for standalone).
func (c *Cluster) Leader() int {
	c.t.Helper()
	for i, s := range c.Servers {
		if !c.Running(i) {
			continue
		}
		if m, _ := Mode(s.Addr()); m == "leader" || m == "standalone" {
			return i
		}
	}
	c.t.Fatal("no zookeeper leader")
	return -1
}

// DumpLogs prints every server's log into the test output.
func (c *Cluster) DumpLogs() {
	for _, s := range c.Servers {
		for _, f := range []string{s.log, filepath.Join(s.dir, "stdout.log")} {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if len(b) > 64<<10 {
				b = b[len(b)-64<<10:]
			}
			c.t.Logf("==== zookeeper %d %s ====\n%s", s.ID, filepath.Base(f), b)
		}
	}
}

// FourLetter sends a four-letter-word command and returns the answer.
func FourLetter(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	return string(b), err
}

// Mode is the server's role from srvr: leader, follower, standalone, or ""
// when it does not serve.
func Mode(addr string) (string, error) {
	out, err := FourLetter(addr, "srvr")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", nil
}

// Mntr returns the server's mntr figures.
func Mntr(addr string) (map[string]string, error) {
	out, err := FourLetter(addr, "mntr")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "\t"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// Expire makes the server expire a client's session: it attaches a second
// connection to the same session (id and password) and closes the session
// from there, the way ZooKeeper's own tests do. The original client learns of
// it when it next talks to the server.
func Expire(addr string, sessionID int64, passwd []byte) error {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))

	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly.
	body := binary.BigEndian.AppendUint32(nil, 0)
	body = binary.BigEndian.AppendUint64(body, 0)
	body = binary.BigEndian.AppendUint32(body, 30000)
	body = binary.BigEndian.AppendUint64(body, uint64(sessionID))
	body = binary.BigEndian.AppendUint32(body, uint32(len(passwd)))
	body = append(body, passwd...)
	body = append(body, 0)
	if err := writeFrame(conn, body); err != nil {
		return err
	}
	resp, err := readFrame(conn)
	if err != nil {
		return fmt.Errorf("reading connect response: %w", err)
	}
	if len(resp) < 16 || int64(binary.BigEndian.Uint64(resp[8:])) != sessionID {
		return errors.New("session already gone (server answered with another session)")
	}
	// closeSession request: xid, opCode -11.
	req := binary.BigEndian.AppendUint32(nil, 1)
	closeOp := int32(-11)
	req = binary.BigEndian.AppendUint32(req, uint32(closeOp))
	if err := writeFrame(conn, req); err != nil {
		return err
	}
	for {
		r, err := readFrame(conn)
		if err != nil {
			return fmt.Errorf("reading close response: %w", err)
		}
		if len(r) >= 16 && int32(binary.BigEndian.Uint32(r)) == 1 {
			if code := int32(binary.BigEndian.Uint32(r[12:])); code != 0 {
				return fmt.Errorf("closeSession answered error %d", code)
			}
			return nil
		}
	}
}

func writeFrame(w io.Writer, body []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// nettyJars is the classpath suffix of Debian's Netty, which the
// secureClientPort needs (Options.TLS); "" without TLS.
func (c *Cluster) nettyJars() string {
	if c.opts.TLS == nil {
		return ""
	}
	var b strings.Builder
	for _, j := range []string{"common", "buffer", "codec", "handler", "transport", "resolver", "transport-native-unix-common", "transport-native-epoll"} {
		b.WriteString(":" + NettyDir + "/netty-" + j + ".jar")
	}
	return b.String()
}

// NettyDir is where Debian's libnetty-java puts its jars.
var NettyDir = envOr("NETTY_DIR", "/usr/share/java")

// writeKeyStore writes a PEM key store for ZooKeeper: the server's private
// key followed by its certificate.
func writeKeyStore(t testing.TB, name string, p *tlstest.PKI) {
	t.Helper()
	key, err := os.ReadFile(p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(p.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, append(key, cert...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// SecureAddrs lists the TLS client addresses of all servers (Options.TLS).
func (c *Cluster) SecureAddrs() []string {
	var a []string
	for _, s := range c.Servers {
		a = append(a, s.SecureAddr())
	}
	return a
}
