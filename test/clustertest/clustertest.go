// Package clustertest runs real failoverd clusters for end-to-end tests, the
// chaos suite and the benchmarks: a ZooKeeper (standalone or ensemble), and
// per node the example toy service plus a failoverd process built from this
// repository, all on loopback. Hooks are small bash scripts that append one
// line per event to a shared events log, so tests read what happened, in
// order, from one clock.
package clustertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/internal/tlstest"
	"github.com/failoverd/failoverd/test/etcdtest"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// Options shape a cluster.
type Options struct {
	// Backend is the coordination service: BackendZooKeeper (""; the
	// default) or BackendEtcd, a 3-member etcdtest cluster. The options
	// about ZooKeeper (ZooKeepers, SessionTimeout, Auth, the proxies,
	// tickTime and sync limit) apply to ZooKeeper only; Start refuses
	// those that would silently mean nothing on etcd.
	Backend string
	// EtcdLeaseTTL is etcd.lease_ttl (0: 3s, which etcdtest's 1s
	// election timeout lets etcd grant). The demote timeout is derived
	// from it as from SessionTimeout on ZooKeeper.
	EtcdLeaseTTL   time.Duration
	Nodes          int           // default 3
	ZooKeepers     int           // 1 (standalone, default) or 3
	SessionTimeout time.Duration // default 2s
	Mode           string        // fair (default) or unfair
	Auth           bool          // digest auth and ACLs on every znode
	// ZooKeeperTLS connects every node to the servers' secureClientPort
	// over TLS, with a client certificate (Cluster.ZKTLS is the PKI).
	ZooKeeperTLS bool
	// ThroughProxy puts a fault proxy between every failoverd and ZooKeeper
	// (standalone only), or one per etcd member between every failoverd and
	// etcd: Node.CutOff (or Node.Proxy on ZooKeeper) can then partition one
	// node.
	ThroughProxy bool
	// ExtraYAML is appended to every node's config.
	ExtraYAML string
	// NoRPCFence leaves out the rpc fencing method (shell only).
	NoRPCFence bool
	// ShellProves marks the shell fencing method proves: true (fencing
	// first). Its script demotes the target's toy service and counts an
	// unreachable toy as down: a stand-in for a verified power-off, which
	// stops the daemon and its hooks too. It stands in only where the
	// target's daemon is dead or cut off with its promote done (the faults
	// the suites inject); a target daemon that lives on with a promote
	// still to run is not stopped by it.
	ShellProves bool
	// StoreURL, when set, makes every toy service write to this fenced store.
	StoreURL      string
	WriteInterval time.Duration
	// ProxyEnsemble puts, per node, one fault proxy in front of every
	// ZooKeeper server (standalone or ensemble) and gives the node only
	// those addresses: Node.ZKProxies can then cut one node off from the
	// whole ensemble (blackhole), slow it down (latency) or reset it.
	ProxyEnsemble bool
	// PeerProxy puts a fault proxy in front of every node's admin API and
	// advertises it (node.admin.advertise_url), so the peers' rpc fencing of
	// that node goes through Node.PeerProxy (blackhole it to break rpc
	// fencing between nodes).
	PeerProxy bool
	// DaemonEnv, when set, adds environment variables to a node's failoverd
	// (test-only failpoints, for example).
	DaemonEnv func(n *Node) []string
	// ZKTickTime and ZKSyncLimit set the ensemble's tickTime and syncLimit
	// (0: zktest's defaults); QuorumProxies routes its quorum and election
	// links through fault proxies, so that ZK.Isolate can cut one server off
	// from its peers while its clients stay connected.
	ZKTickTime    time.Duration
	ZKSyncLimit   int
	QuorumProxies bool
	// TickTimeUnknown leaves zookeeper.tick_time out of the daemons'
	// configs (the default config: the lease then assumes the longest tick
	// the session timeout allows, and the renew interval grows with it).
	TickTimeUnknown bool
	// ZKServersOf, when set, gives a node only these ZooKeeper servers
	// (indexes into ZK.Servers) instead of all of them: to pin a node to
	// one server, for example.
	ZKServersOf func(zk *zktest.Cluster, n *Node) []int
	// EtcdMembersOf, when set, gives a node only these etcd members
	// (indexes into Etcd.Members) instead of all of them: to pin a node to
	// one member, for example.
	EtcdMembersOf func(ec *etcdtest.Cluster, n *Node) []int
	// LossProxies (with ProxyEnsemble) puts a zktest.LossProxy
	// in front of each of a node's fault proxies and gives the node those:
	// Node.ZKLossProxies can then lose the reply to chosen requests.
	LossProxies bool
	// DaemonWrap, when set, rewrites a node's failoverd command line (argv
	// starts with the binary) before it starts: a wrapper that execs it
	// keeps the pid (the chaos suite runs it in a mount namespace with its
	// own resolv.conf and hosts file).
	DaemonWrap func(n *Node, argv []string) []string
	// LogFormat is the daemons' log.format: text (default) or json (the
	// chaos suite parses the daemons' own events from it, with nanosecond
	// timestamps).
	LogFormat string
	// ColdStandby sets election.warm_standby: false in every node's config
	// (the daemon's default is on: the next leader renews its session as a
	// leader does, so it can act when it wins instead of a renew interval
	// later).
	ColdStandby bool
	// Follow gives every node a follow hook (follow.sh: "follow" and
	// "follow_done" events with the FAILOVERD_LEADER_* it got) and sets
	// node.service_address to its toy's address.
	Follow bool
	// Priority sets node.priority of the nodes it names (node id: value);
	// the others keep the default.
	Priority map[string]int
	// PrePromote gives every node a pre_promote hook (pre_promote.sh:
	// "pre_promote" events); it exits 1 ("pre_promote_veto") while the
	// node's directory holds a file named pre-promote-veto.
	PrePromote bool
	// ServiceYAML and ElectionYAML, when set, add lines (indented by two
	// spaces, each ending in a newline) inside a node's service and
	// election sections: per-node settings such as service.position,
	// which ExtraYAML cannot add without a second service section.
	ServiceYAML  func(n *Node) string
	ElectionYAML string
	// EtcdClientProxies (etcd) puts, per node, an etcdtest.DelayProxy in
	// front of every member's client port and gives the node only those
	// endpoints: Node.EtcdDelayProxies can then cut one node off from one
	// member or from all of them (Blackhole) while the cluster is whole.
	EtcdClientProxies bool
	// EtcdDemoteTimeout (etcd), when set, is service.demote.timeout
	// instead of the longest the lease holds: a shorter one leaves the
	// lease room for slow renewals on a loaded machine.
	EtcdDemoteTimeout time.Duration

	// EtcdSecure (etcd only) serves etcd's clients over TLS with client
	// certificates and turns its auth on (etcdtest.Security); the daemons
	// connect with the CA, a client certificate and a user limited to
	// their prefix.
	EtcdSecure bool
	// GracefulDemoteTimeout sets service.demote.graceful_timeout (0:
	// unset) and raises node.shutdown_timeout to hold it. A node's demote
	// hook sleeps as many seconds as its directory's file demote-sleep
	// says ("demote_sleep" event), then demotes as usual.
	GracefulDemoteTimeout time.Duration

	// Service runs beside each failoverd (nil: the toy service, which the
	// options above shape; an example's service renders its own configs
	// and takes only Backend, EtcdLeaseTTL and the timeouts below).
	Service Service
	// StatusTimeout bounds a request to a node's admin API (default 1s).
	StatusTimeout time.Duration
	// SettleTimeout bounds Start's wait for a leader whose service is the
	// primary, followed by every other node's (default 60s).
	SettleTimeout time.Duration
}

// Cluster is a running test cluster.
type Cluster struct {
	// Etcd is the etcd cluster with Backend etcd (ZK is then nil).
	Etcd *etcdtest.Cluster
	t    testing.TB
	Opts Options
	Dir  string
	ZK   *zktest.Cluster
	// ZKTLS is the PKI of the ZooKeeper servers and of the nodes' client
	// certificate (Options.ZooKeeperTLS).
	ZKTLS         *tlstest.PKI
	zkCert, zkKey string
	Nodes         []*Node
	EventsPath    string // the shared events log
	Token         string

	// EtcdSecurity is the etcd cluster's TLS and users (Options.EtcdSecure).
	EtcdSecurity *etcdtest.Security
}

// Node is one failoverd plus its service.
type Node struct {
	c         *Cluster
	ID        string
	Config    string
	AdminAddr string
	// ServiceAddr is where the node's service serves (host:port).
	ServiceAddr string
	// ToyAddr is the toy service's address (the toy service only).
	ToyAddr string
	Proxy   *netproxy.Proxy
	// EtcdProxies (Options.ThroughProxy on etcd) are this node's proxies,
	// one per etcd member, in member order.
	EtcdProxies []*netproxy.Proxy
	// ZKProxies (Options.ProxyEnsemble) are this node's proxies, one per
	// ZooKeeper server, in server order.
	ZKProxies []*netproxy.Proxy
	// ZKLossProxies (Options.LossProxies) front ZKProxies, same order.
	ZKLossProxies []*zktest.LossProxy
	// PeerProxy (Options.PeerProxy) fronts this node's admin API for peers.
	PeerProxy *netproxy.Proxy
	// EtcdDelayProxies (Options.EtcdClientProxies) are this node's
	// proxies, one per etcd member, in member order.
	EtcdDelayProxies []*etcdtest.DelayProxy
	// peerTarget, when set, is where PeerProxy sends new connections
	// instead of the admin API (SetPeerTarget).
	peerTarget atomic.Value
	dir        string

	mu     sync.Mutex
	daemon *Process
	starts int // how many times the daemon was started
	toy    *exec.Cmd
	// toyDone is closed when the current toy process has exited.
	toyDone chan struct{}
	toyBin  string
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binaries builds failoverd and the toy service once per test binary.
func Binaries(t testing.TB) (failoverd, toy string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "failoverd-bin-")
		if buildErr != nil {
			return
		}
		root := repoRoot()
		for _, b := range [][2]string{{"failoverd", "./cmd/failoverd"}, {"toyservice", "./examples/toyservice"}} {
			cmd := exec.Command("go", "build", "-race", "-o", filepath.Join(binDir, b[0]), b[1])
			if os.Getenv("CLUSTERTEST_NORACE") != "" {
				cmd = exec.Command("go", "build", "-o", filepath.Join(binDir, b[0]), b[1])
			}
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building %s: %v\n%s", b[0], err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "failoverd"), filepath.Join(binDir, "toyservice")
}

// Backend names for Options.Backend.
const (
	BackendZooKeeper = "zookeeper"
	BackendEtcd      = "etcd"
)

// Backends are the coordination backends, for tests that run on each
// (as subtests named by backend).
var Backends = []string{BackendZooKeeper, BackendEtcd}

// ForEachBackend runs test as a subtest per backend, named by it, with
// opts.Backend set.
func ForEachBackend(t *testing.T, opts Options, test func(t *testing.T, opts Options)) {
	for _, b := range Backends {
		t.Run(b, func(t *testing.T) {
			o := opts
			o.Backend = b
			test(t, o)
		})
	}
}

// Start runs a cluster and waits until it has a promoted leader.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Backend == "" {
		o.Backend = BackendZooKeeper
	}
	switch o.Backend {
	case BackendZooKeeper:
		zktest.Require(t)
		if o.EtcdMembersOf != nil {
			t.Fatalf("clustertest: EtcdMembersOf set on the ZooKeeper backend")
		}
	case BackendEtcd:
		if o.ZooKeepers != 0 || o.Auth || o.ZooKeeperTLS || o.ProxyEnsemble || o.QuorumProxies || o.LossProxies ||
			o.ZKServersOf != nil || o.ZKTickTime != 0 || o.ZKSyncLimit != 0 || o.TickTimeUnknown {
			t.Fatalf("clustertest: options for ZooKeeper set on the etcd backend: %+v", o)
		}
		if o.EtcdLeaseTTL == 0 {
			o.EtcdLeaseTTL = 3 * time.Second
		}
	default:
		t.Fatalf("clustertest: unknown backend %q", o.Backend)
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.ZooKeepers == 0 {
		o.ZooKeepers = 1
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = 2 * time.Second
	}
	if o.Mode == "" {
		o.Mode = "fair"
	}
	if o.Service == nil {
		o.Service = &toyService{}
	}
	if o.StatusTimeout == 0 {
		o.StatusTimeout = time.Second
	}
	if o.SettleTimeout == 0 {
		o.SettleTimeout = 60 * time.Second
	}
	c := &Cluster{t: t, Opts: o, Dir: t.TempDir(), Token: "test-token-" + strconv.Itoa(os.Getpid())}
	c.EventsPath = filepath.Join(c.Dir, "events.log")
	if o.Backend == BackendEtcd {
		eo := etcdtest.Options{}
		if o.EtcdSecure {
			c.EtcdSecurity = etcdtest.NewSecurity(t, "/failoverd/")
			eo.Security = c.EtcdSecurity
		}
		c.Etcd = etcdtest.Start(t, eo)
	} else {
		zo := zktest.Options{Servers: o.ZooKeepers, TickTime: o.ZKTickTime, SyncLimit: o.ZKSyncLimit, ProxyQuorum: o.QuorumProxies}
		if o.ZooKeeperTLS {
			if o.ThroughProxy || o.ProxyEnsemble || o.LossProxies {
				t.Fatal("clustertest: ZooKeeperTLS goes straight to the servers' secure ports, without proxies")
			}
			c.ZKTLS = tlstest.New(t, "zookeeper")
			zo.TLS = c.ZKTLS
			c.zkCert, c.zkKey = c.ZKTLS.Client(t, "failoverd")
		}
		c.ZK = zktest.StartOpts(t, zo)
	}
	must(t, os.WriteFile(filepath.Join(c.Dir, "token"), []byte(c.Token+"\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(c.Dir, "zk.cred"), []byte("failoverd:s3cret\n"), 0o600))
	for i := 0; i < o.Nodes; i++ {
		n := &Node{c: c, ID: fmt.Sprintf("node-%c", 'a'+i)}
		n.dir = filepath.Join(c.Dir, n.ID)
		must(t, os.MkdirAll(n.dir, 0o755))
		c.Nodes = append(c.Nodes, n)
	}
	o.Service.Setup(c)
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Kill(syscall.SIGKILL)
			o.Service.Crash(n)
		}
		if t.Failed() {
			c.DumpLogs()
		}
	})
	o.Service.Boot(c)
	for _, n := range c.Nodes {
		n.Start()
	}
	c.WaitSettled("", o.SettleTimeout)
	return c
}

// addProxies puts the fault proxies the options ask for in front of the
// node's coordination service and admin API.
func (n *Node) addProxies() {
	c, o, t := n.c, n.c.Opts, n.c.t
	if o.ThroughProxy && c.ZK != nil {
		n.Proxy = netproxy.New(t, func() string { return c.ZK.Servers[0].Addr() })
	}
	if o.ThroughProxy && c.Etcd != nil {
		for _, m := range n.etcdMembers() {
			n.EtcdProxies = append(n.EtcdProxies, netproxy.New(t, m.ClientAddr))
		}
	}
	if o.ProxyEnsemble {
		for _, s := range c.ZK.Servers {
			n.ZKProxies = append(n.ZKProxies, netproxy.New(t, s.Addr))
		}
		if o.LossProxies {
			for _, p := range n.ZKProxies {
				n.ZKLossProxies = append(n.ZKLossProxies, zktest.NewLossProxy(t, p.Addr))
			}
		}
	}
	if o.EtcdClientProxies && c.Etcd != nil {
		for _, m := range c.Etcd.Members {
			n.EtcdDelayProxies = append(n.EtcdDelayProxies, etcdtest.NewDelayProxy(t, m.ClientAddr()))
		}
	}
	if o.PeerProxy {
		admin := n.AdminAddr
		n.PeerProxy = netproxy.New(t, func() string {
			if s, _ := n.peerTarget.Load().(string); s != "" {
				return s
			}
			return admin
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Hook scripts: each appends "UNIXNANO EVENT key=value..." to the events log.
func (c *Cluster) writeScripts() {
	lib := `#!/usr/bin/env bash
set -euo pipefail
ev() { printf '%s %s\n' "$(date +%s%N)" "$*" >> "` + c.EventsPath + `"; }
# evq: ev without a fork (bash's own clock), for the slow hooks' timing.
evq() { printf '%s000 %s\n' "${EPOCHREALTIME/[.,]/}" "$*" >> "` + c.EventsPath + `"; }
# hooks-slow (chaos): the hook takes its whole timeout and ignores SIGTERM
# until its kill grace, the worst case the demote budget allows for. It
# waits for SIGTERM in wait (a trapped signal ends it; read -t would resume),
# and after it uses bash builtins only (read -t on a pipe nobody writes to
# is a sleep without a fork), so no start-up delay lands on the timed path.
slow_wait_term() {
  exec {slow_fd}<> <(:)
  evq hook_slow hook=$1 node=$FAILOVERD_NODE_ID epoch=${FAILOVERD_EPOCH:-} reason=${FAILOVERD_REASON:-}
  slow_term=
  trap 'slow_term=1' TERM
  sleep 3600 &
  while [ -z "$slow_term" ]; do wait $! || true; done
  trap '' TERM
  evq hook_term hook=$1 node=$FAILOVERD_NODE_ID epoch=${FAILOVERD_EPOCH:-} reason=${FAILOVERD_REASON:-}
}
# slow_demote: after SIGTERM, stand the service down 150ms into the 250ms
# kill grace (a request over bash's /dev/tcp, no fork), then exit 0.
slow_demote() {
  slow_wait_term demote
  read -t 0.15 -u $slow_fd || true
  local hp=${TOY#http://} line=
  exec {slow_sock}<>"/dev/tcp/${hp%:*}/${hp##*:}" || { ev demote_failed node=$FAILOVERD_NODE_ID reason=$FAILOVERD_REASON; exit 1; }
  printf 'POST /demote HTTP/1.0\r\nHost: %s\r\nContent-Length: 0\r\n\r\n' "$hp" >&$slow_sock
  read -r -u $slow_sock line || true
  case "$line" in "HTTP/1."?" 2"*) ;; *) ev demote_failed node=$FAILOVERD_NODE_ID reason=$FAILOVERD_REASON; exit 1;; esac
  ev demote node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH role=$FAILOVERD_ROLE reason=$FAILOVERD_REASON
  exit 0
}
`
	scripts := map[string]string{
		"promote.sh": lib + `ev promote node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH role=$FAILOVERD_ROLE reason=$FAILOVERD_REASON prev=${FAILOVERD_PREVIOUS_LEADER:-} prev_epoch=${FAILOVERD_PREVIOUS_EPOCH:-}
[ -e "$DIR/promote-fail" ] && { ev promote_failed node=$FAILOVERD_NODE_ID; exit 1; }
[ -e "$DIR/promote-hang" ] && sleep 3600
code=$(curl -sS -o /dev/null -w '%{http_code}' -m 2 -X POST "$TOY/promote?epoch=$FAILOVERD_EPOCH" || true)
# 409: the service refused the epoch (stale or already stood down), so it never became primary.
case "$code" in 2*) ;; 409) ev promote_refused node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH; exit 1;; *) exit 1;; esac
# promote-slow (chaos): the service is primary; the hook never returns by itself.
if [ -e "$DIR/promote-slow" ]; then slow_wait_term promote; while :; do read -t 3600 -u $slow_fd || true; done; fi
ev promote_done node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH prev_address=${FAILOVERD_PREVIOUS_ADDRESS:-}
`,
		"pre_promote.sh": lib + `ev pre_promote node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH reason=$FAILOVERD_REASON prev=${FAILOVERD_PREVIOUS_LEADER:-}
[ -e "$DIR/pre-promote-veto" ] && { ev pre_promote_veto node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH; exit 1; }
exit 0
`,
		"follow.sh": lib + `ev follow node=$FAILOVERD_NODE_ID role=$FAILOVERD_ROLE reason=$FAILOVERD_REASON leader=$FAILOVERD_LEADER_ID leader_host=$FAILOVERD_LEADER_HOST leader_address=$FAILOVERD_LEADER_ADDRESS leader_epoch=$FAILOVERD_LEADER_EPOCH cluster=$FAILOVERD_CLUSTER
[ -e "$DIR/follow-fail" ] && { ev follow_failed node=$FAILOVERD_NODE_ID; exit 1; }
ev follow_done node=$FAILOVERD_NODE_ID leader=$FAILOVERD_LEADER_ID leader_epoch=$FAILOVERD_LEADER_EPOCH
`,
		// hook-unkillable (chaos): the hook ignores SIGTERM and records its
		// pid for the suite, which ptrace-attaches it so that even SIGKILL
		// leaves a zombie its parent cannot reap, as in uninterruptible sleep.
		"demote.sh": lib + `if [ -e "$DIR/hook-unkillable" ]; then ev hook_unkillable node=$FAILOVERD_NODE_ID pid=$$ reason=$FAILOVERD_REASON; trap '' TERM; echo $$ >> "$DIR/unkillable.pids"; while :; do sleep 1; done; fi
if [ -e "$DIR/demote-hang" ]; then ev demote_hang node=$FAILOVERD_NODE_ID reason=$FAILOVERD_REASON; sleep 3600; fi
if [ -e "$DIR/demote-slow" ]; then slow_demote; fi
if [ -e "$DIR/demote-sleep" ]; then ev demote_sleep node=$FAILOVERD_NODE_ID reason=$FAILOVERD_REASON; sleep "$(cat "$DIR/demote-sleep")"; fi
curl -fsS -m 0.5 -X POST "$TOY/demote" >/dev/null || { ev demote_failed node=$FAILOVERD_NODE_ID reason=$FAILOVERD_REASON; exit 1; }
ev demote node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH role=$FAILOVERD_ROLE reason=$FAILOVERD_REASON
`,
		"fence.sh": lib + `ev fence_attempt node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID target_epoch=$FAILOVERD_TARGET_EPOCH target_host=$FAILOVERD_TARGET_HOST cluster=$FAILOVERD_CLUSTER
if [ -e "` + c.Dir + `/fence-fail" ]; then ev fence_failed node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID; exit 1; fi
url=$(awk -v id="$FAILOVERD_TARGET_ID" '$1==id {print $2}' "` + c.Dir + `/toys.map")
# Standing in for STONITH: demote the target's service; unreachable counts as down.
code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 -X POST "$url/demote" || true)
case "$code" in 2*|000) ;; *) ev fence_failed node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID code=$code; exit 1;; esac
ev fence node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID target_epoch=$FAILOVERD_TARGET_EPOCH
`,
	}
	for name, body := range scripts {
		must(c.t, os.WriteFile(filepath.Join(c.Dir, name), []byte(body), 0o755))
	}
}

func (n *Node) writeConfig(failoverd string) {
	c := n.c
	o := c.Opts
	var servers []string
	if c.ZK != nil {
		servers = c.ZK.Addrs()
		if o.ZooKeeperTLS {
			servers = c.ZK.SecureAddrs()
		}
	}
	if n.Proxy != nil {
		servers = []string{n.Proxy.Addr()}
	}
	if len(n.ZKProxies) > 0 {
		servers = nil
		for _, p := range n.ZKProxies {
			servers = append(servers, p.Addr())
		}
	}
	if len(n.ZKLossProxies) > 0 {
		servers = nil
		for _, p := range n.ZKLossProxies {
			servers = append(servers, p.Addr())
		}
	}
	servers = n.serverSubset(servers)
	var b strings.Builder
	fmt.Fprintf(&b, "cluster: e2e\nnode:\n  id: %s\n  host: 127.0.0.1\n  shutdown_timeout: %s\n  state_dir: %s\n", n.ID,
		max(15*time.Second, o.GracefulDemoteTimeout+5*time.Second), filepath.Join(c.Dir, "state"))
	if o.Follow {
		fmt.Fprintf(&b, "  service_address: %s\n", n.ToyAddr)
	}
	if p, ok := o.Priority[n.ID]; ok {
		fmt.Fprintf(&b, "  priority: %d\n", p)
	}
	fmt.Fprintf(&b, "  admin:\n    listen: %s\n    token_file: %s\n", n.AdminAddr, filepath.Join(c.Dir, "token"))
	if n.PeerProxy != nil {
		fmt.Fprintf(&b, "    advertise_url: http://%s\n", n.PeerProxy.Addr())
	}
	tick := o.ZKTickTime
	if tick == 0 {
		tick = zktest.TickTime
	}
	demoteTimeout := (o.SessionTimeout - o.SessionTimeout*2/3) * 9 / 10
	if o.Backend == BackendEtcd {
		var endpoints []string
		for _, m := range n.etcdMembers() {
			endpoints = append(endpoints, m.Endpoint())
		}
		if len(n.EtcdProxies) > 0 {
			endpoints = nil
			for _, p := range n.EtcdProxies {
				endpoints = append(endpoints, "http://"+p.Addr())
			}
		}
		if len(n.EtcdDelayProxies) > 0 {
			endpoints = nil
			for _, p := range n.EtcdDelayProxies {
				endpoints = append(endpoints, "http://"+p.Addr())
			}
		}
		fmt.Fprintf(&b, "coordination:\n  backend: etcd\netcd:\n  endpoints: [%s]\n  prefix: /failoverd\n  lease_ttl: %s\n  dial_timeout: 2s\n",
			strings.Join(endpoints, ", "), o.EtcdLeaseTTL)
		if sec := c.EtcdSecurity; sec != nil {
			fmt.Fprintf(&b, "  username: %s\n  password_file: %s\n  tls:\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n",
				sec.User, sec.PasswordFile, sec.CAFile, sec.CertFile, sec.KeyFile)
		}
		demoteTimeout = etcdDemoteTimeout(o.EtcdLeaseTTL)
		if o.EtcdDemoteTimeout > 0 {
			demoteTimeout = o.EtcdDemoteTimeout
		}
	} else {
		// The ensemble's real tickTime: the lease arithmetic relies on it.
		fmt.Fprintf(&b, "zookeeper:\n  servers: [%s]\n  root: /failoverd\n  session_timeout: %s\n", strings.Join(servers, ", "), o.SessionTimeout)
		if !o.TickTimeUnknown {
			fmt.Fprintf(&b, "  tick_time: %s\n", tick)
		}
		if o.Auth {
			fmt.Fprintf(&b, "  auth:\n    scheme: digest\n    credentials_file: %s\n", filepath.Join(c.Dir, "zk.cred"))
		}
		if o.ZooKeeperTLS {
			fmt.Fprintf(&b, "  tls:\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n", c.ZKTLS.CAFile, c.zkCert, c.zkKey)
		}
	}
	fmt.Fprintf(&b, "election:\n  mode: %s\n", o.Mode)
	if o.ColdStandby {
		b.WriteString("  warm_standby: false\n")
	}
	b.WriteString(o.ElectionYAML)
	fmt.Fprintf(&b, "health:\n  interval: 200ms\n  timeout: 500ms\n  rise: 2\n  fall: 2\n  http:\n    url: http://%s/health\n", n.ToyAddr)
	fmt.Fprintf(&b, "service:\n  promote:\n    command: [%s]\n    timeout: 5s\n  demote:\n    command: [%s]\n    timeout: %s\n",
		filepath.Join(c.Dir, "promote.sh"), filepath.Join(c.Dir, "demote.sh"), demoteTimeout.Round(time.Millisecond))
	if d := o.GracefulDemoteTimeout; d > 0 {
		fmt.Fprintf(&b, "    graceful_timeout: %s\n", d)
	}
	if o.PrePromote {
		fmt.Fprintf(&b, "  pre_promote:\n    command: [%s]\n    timeout: 5s\n", filepath.Join(c.Dir, "pre_promote.sh"))
	}
	if o.Follow {
		fmt.Fprintf(&b, "  follow:\n    command: [%s]\n    timeout: 5s\n", filepath.Join(c.Dir, "follow.sh"))
	}
	if o.ServiceYAML != nil {
		b.WriteString(o.ServiceYAML(n))
	}
	b.WriteString("fencing:\n  methods:\n")
	if !o.NoRPCFence {
		b.WriteString("    - rpc:\n        timeout: 1s\n")
	}
	fmt.Fprintf(&b, "    - shell:\n        command: [%s]\n        timeout: 5s\n", filepath.Join(c.Dir, "fence.sh"))
	if o.ShellProves {
		b.WriteString("      proves: true\n")
	}
	logFormat := o.LogFormat
	if logFormat == "" {
		logFormat = "text"
	}
	fmt.Fprintf(&b, "log:\n  format: %s\n  level: debug\n", logFormat)
	b.WriteString(o.ExtraYAML)
	n.Config = filepath.Join(n.dir, "failoverd.yaml")
	must(c.t, os.WriteFile(n.Config, []byte(b.String()), 0o644))
	_ = failoverd
}

// etcdDemoteTimeout is 2/3 of the longest demote timeout that a lease of
// TTL ttl holds (etcdcluster.LeaseFits, renewed every third): what is left
// after the margin, the renew interval and the tolerance, less the kill
// graces of a running promote and of the demote. The third left over is
// the time a renewal may take to be answered before the leader's term
// ends (its deadline less the demote budget): at a 3s TTL about 0.5s, for
// a loaded test machine.
func etcdDemoteTimeout(ttl time.Duration) time.Duration {
	left := ttl - ttl/etcdcluster.RateDiv - ttl/3 - etcdcluster.MinTolerance - 2*controller.KillGrace
	return (left * 2 / 3).Round(time.Millisecond)
}

// etcdMembers are the etcd members the node is given (Options.EtcdMembersOf),
// in member order.
func (n *Node) etcdMembers() []*etcdtest.Member {
	all := n.c.Etcd.Members
	if n.c.Opts.EtcdMembersOf == nil {
		return all
	}
	var out []*etcdtest.Member
	for _, i := range n.c.Opts.EtcdMembersOf(n.c.Etcd, n) {
		if i < 0 || i >= len(all) {
			n.c.t.Fatalf("EtcdMembersOf(%s): no member %d", n.ID, i)
		}
		out = append(out, all[i])
	}
	if len(out) == 0 {
		n.c.t.Fatalf("EtcdMembersOf(%s): no members", n.ID)
	}
	return out
}

// serverSubset applies Options.ZKServersOf to a server list in server order.
func (n *Node) serverSubset(servers []string) []string {
	if n.c.Opts.ZKServersOf == nil || n.c.ZK == nil || len(servers) != len(n.c.ZK.Servers) {
		return servers
	}
	var out []string
	for _, i := range n.c.Opts.ZKServersOf(n.c.ZK, n) {
		if i < 0 || i >= len(servers) {
			n.c.t.Fatalf("ZKServersOf(%s): no server %d", n.ID, i)
		}
		out = append(out, servers[i])
	}
	if len(out) == 0 {
		n.c.t.Fatalf("ZKServersOf(%s): no servers", n.ID)
	}
	return out
}

func (n *Node) startToy(bin string) { n.startToyRole(bin, true) }

// startToyRole starts the toy service; without standby it resumes the role
// its role.json records.
func (n *Node) startToyRole(bin string, standby bool) {
	args := []string{"serve", "-listen", n.ToyAddr, "-state", filepath.Join(n.dir, "toy"), "-node", n.ID}
	if standby {
		args = append(args, "-standby")
	}
	if n.c.Opts.StoreURL != "" {
		args = append(args, "-store", n.c.Opts.StoreURL)
		if n.c.Opts.WriteInterval > 0 {
			args = append(args, "-write-interval", n.c.Opts.WriteInterval.String())
		}
	}
	cmd := exec.Command(bin, args...)
	out, err := os.OpenFile(filepath.Join(n.dir, "toy.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(n.c.t, err)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	must(n.c.t, cmd.Start())
	done := make(chan struct{})
	n.toy, n.toyDone, n.toyBin = cmd, done, bin
	go func() { cmd.Wait(); out.Close(); close(done) }()
}

func (n *Node) stopToy() {
	if n.toy != nil && n.toy.Process != nil {
		n.toy.Process.Kill()
	}
}

// KillToy kills the node's service (SIGKILL).
func (n *Node) KillToy() { n.stopToy() }

// ToyRunning reports whether the toy service process is alive.
func (n *Node) ToyRunning() bool {
	if n.toyDone == nil {
		return false
	}
	select {
	case <-n.toyDone:
		return false
	default:
		return true
	}
}

// ReviveToy kills the toy service if it still runs, waits for it to exit
// (so its port is free), and starts it again with -standby (role.json and
// its epochs are kept), then waits until it answers. Call it from the test
// goroutine.
func (n *Node) ReviveToy() {
	n.c.t.Helper()
	n.reviveToy(true)
}

// ReviveToyAsIs is ReviveToy without -standby: the service resumes the role
// and epoch its role.json records, as a primary whose host crashed and came
// back before its failoverd would.
func (n *Node) ReviveToyAsIs() {
	n.c.t.Helper()
	n.reviveToy(false)
}

func (n *Node) reviveToy(standby bool) {
	n.c.t.Helper()
	n.stopToy()
	if n.toyDone != nil {
		select {
		case <-n.toyDone:
		case <-time.After(30 * time.Second):
			n.c.t.Fatalf("toy service of %s did not exit", n.ID)
		}
	}
	n.startToyRole(n.toyBin, standby)
	n.waitToy()
}

func (n *Node) waitToy() {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + n.ToyAddr + "/health"); err == nil {
			resp.Body.Close()
			return
		}
		if !n.ToyRunning() {
			break // say why at once
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(n.dir, "toy.log"))
	if len(log) > 2000 {
		log = log[len(log)-2000:]
	}
	n.c.t.Fatalf("toy service of %s did not start on %s (running: %v); its log ends:\n%s", n.ID, n.ToyAddr, n.ToyRunning(), log)
}

// Start runs the node's failoverd (again), in the node's directory; the
// hooks get the events log (FAILOVERD_EVENTS_LOG), the node's directory
// (DIR) and what the service adds (Service.Env).
func (n *Node) Start() {
	fd, _ := Binaries(n.c.t)
	n.mu.Lock()
	defer n.mu.Unlock()
	argv := []string{fd, "run", "-c", n.Config}
	if n.c.Opts.DaemonWrap != nil {
		argv = n.c.Opts.DaemonWrap(n, argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = n.dir
	cmd.Env = append(os.Environ(), "FAILOVERD_EVENTS_LOG="+n.c.EventsPath, "DIR="+n.dir)
	cmd.Env = append(cmd.Env, n.c.Opts.Service.Env(n)...)
	if n.c.Opts.DaemonEnv != nil {
		cmd.Env = append(cmd.Env, n.c.Opts.DaemonEnv(n)...)
	}
	n.starts++
	logPath := filepath.Join(n.dir, "failoverd.log")
	if n.starts > 1 {
		if f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			fmt.Fprintf(f, "---- start %d at %s ----\n", n.starts, time.Now().UTC().Format(time.RFC3339Nano))
			f.Close()
		}
	}
	n.daemon = StartProcess(n.c.t, cmd, logPath)
}

// DaemonLog is everything the node's failoverd logged so far (all starts).
func (n *Node) DaemonLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "failoverd.log"))
	return string(b)
}

// SetPeerTarget makes the node's peer proxy (Options.PeerProxy), the
// admin URL the node advertises and the breadcrumb names, send new
// connections to addr instead of the node's admin API; "" restores it.
// The rpc fencer opens a connection per request, so the next fence of this
// node reaches addr.
func (n *Node) SetPeerTarget(addr string) { n.peerTarget.Store(addr) }

// Pid is the daemon's process id (0 when not started).
func (n *Node) Pid() int { return n.proc().Pid() }

func (n *Node) proc() *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.daemon
}

// ToyPid is the toy service's process id.
func (n *Node) ToyPid() int {
	if n.toy == nil || n.toy.Process == nil {
		return 0
	}
	return n.toy.Process.Pid
}

// Dir is the node's working directory (logs, config, service state).
func (n *Node) Dir() string { return n.dir }

// Running reports whether the daemon process is alive.
func (n *Node) Running() bool { return n.proc().Running() }

// Signal sends sig to the daemon.
func (n *Node) Signal(sig syscall.Signal) { n.proc().Signal(sig) }

// Kill sends sig and waits up to 60s for the daemon to exit (SIGCONT
// first, so a paused daemon can die); it reports whether it did.
func (n *Node) Kill(sig syscall.Signal) bool {
	n.Signal(sig)
	n.Signal(syscall.SIGCONT)
	_, ok := n.Wait(60 * time.Second)
	return ok
}

// Wait waits for the daemon to exit and returns its exit error.
func (n *Node) Wait(timeout time.Duration) (error, bool) { return n.proc().Wait(timeout) }

// Status asks the node's admin API; ok is false when it does not answer.
func (n *Node) Status() (controller.Status, bool) {
	cl := http.Client{Timeout: n.c.Opts.StatusTimeout}
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

// SetHealthy flips the toy service's health endpoint.
func (n *Node) SetHealthy(ok bool) {
	resp, err := http.Post(fmt.Sprintf("http://%s/admin/health?ok=%t", n.ToyAddr, ok), "", nil)
	if err != nil {
		n.c.t.Fatalf("toggling health of %s: %v", n.ID, err)
	}
	resp.Body.Close()
}

// Role asks the toy service for its role.
func (n *Node) Role() string {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + n.ToyAddr + "/role")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var r struct {
		Role string `json:"role"`
	}
	json.NewDecoder(resp.Body).Decode(&r)
	return r.Role
}

// CLI runs a failoverd command against this node's config.
func (n *Node) CLI(args ...string) (string, int) {
	fd, _ := Binaries(n.c.t)
	all := append([]string{args[0], "-c", n.Config}, args[1:]...)
	cmd := exec.Command(fd, all...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return string(out), code
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

// Leader returns the node whose admin API reports state leader, or nil.
func (c *Cluster) Leader() *Node {
	var found *Node
	for _, n := range c.Nodes {
		if s, ok := n.Status(); ok && s.State == controller.StateLeader {
			if found != nil {
				c.t.Errorf("two nodes report leader: %s and %s", found.ID, n.ID)
			}
			found = n
		}
	}
	return found
}

// WaitLeader waits until a node other than not reports state leader and
// its service serves as the primary, and returns it.
func (c *Cluster) WaitLeader(not string, timeout time.Duration) *Node {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if n.ID == not {
				continue
			}
			if s, ok := n.Status(); ok && s.State == controller.StateLeader && c.Opts.Service.Primary(n) {
				return n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.DumpLogs()
	c.t.Fatalf("no leader (other than %q) within %v", not, timeout)
	return nil
}

// Event is one line of the events log.
type Event struct {
	At   time.Time
	Kind string
	KV   map[string]string
}

// OK reports whether the hook succeeded (result=ok).
func (e Event) OK() bool { return e.KV["result"] == "ok" }

// Events reads the events log.
func (c *Cluster) Events() []Event {
	f, err := os.Open(c.EventsPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	return ParseEvents(f)
}

// ParseEvents parses the events log: the toy hooks' "UNIXNANO KIND k=v
// ..." lines and the examples' "RFC3339NANO event=KIND k=v k=\"quoted
// value\" ..." lines.
func ParseEvents(r io.Reader) []Event {
	var evs []Event
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if e, ok := ParseEvent(sc.Text()); ok {
			evs = append(evs, e)
		}
	}
	return evs
}

// ParseEvent parses one line of the events log (ParseEvents).
func ParseEvent(line string) (Event, bool) {
	ts, rest, ok := strings.Cut(line, " ")
	if !ok {
		return Event{}, false
	}
	e := Event{KV: map[string]string{}}
	if ns, err := strconv.ParseInt(ts, 10, 64); err == nil {
		e.At = time.Unix(0, ns)
		e.Kind, rest, _ = strings.Cut(rest, " ")
	} else if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		e.At = at
	} else {
		return Event{}, false
	}
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
	if e.Kind == "" {
		e.Kind = e.KV["event"]
	}
	return e, e.Kind != ""
}

// Find returns the events of a kind, optionally filtered by key=value pairs.
func Find(evs []Event, kind string, kv ...string) []Event {
	var out []Event
	for _, e := range evs {
		if e.Kind != kind {
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

// CheckNoOverlap fails the test when two nodes were promoted at the same time
// according to the events log: a node is promoted from its promote event
// until its demote event or a fence event naming it.
func (c *Cluster) CheckNoOverlap() {
	c.t.Helper()
	active := map[string]int64{} // node -> epoch
	for _, e := range c.Events() {
		node := e.KV["node"]
		switch e.Kind {
		case "promote":
			ep, _ := strconv.ParseInt(e.KV["epoch"], 10, 64)
			for other, oe := range active {
				if other != node {
					c.t.Errorf("split brain at %s: %s promoted (epoch %d) while %s (epoch %d) was neither demoted nor fenced",
						e.At.Format("15:04:05.000000"), node, ep, other, oe)
				}
			}
			active[node] = ep
		case "demote":
			delete(active, node)
		case "fence":
			delete(active, e.KV["target"])
		}
	}
}

// DumpLogs writes every node's failoverd and service log tails and the
// events log to the test log.
func (c *Cluster) DumpLogs() {
	for _, n := range c.Nodes {
		for _, p := range append([]string{filepath.Join(n.dir, "failoverd.log")}, c.Opts.Service.Logs(n)...) {
			if _, err := os.Stat(p); err == nil {
				c.t.Logf("==== %s %s ====\n%s", n.ID, filepath.Base(p), Tail(p, 48<<10))
			}
		}
	}
	if _, err := os.Stat(c.EventsPath); err == nil {
		c.t.Logf("==== events ====\n%s", Tail(c.EventsPath, 48<<10))
	}
}

// Context returns a context bounded by d, cancelled at the end of the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
