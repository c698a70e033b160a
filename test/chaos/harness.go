package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/freeport"
	"github.com/failoverd/failoverd/test/zktest"
)

// Timing of the cluster under test. Hooks and fencing timeouts are
// clustertest's: promote 5s, demote (S - 2S/3)×0.9 = 0.6s, rpc fence 1s,
// shell fence 5s.
const (
	SessionTimeout = 2 * time.Second
	WriteInterval  = 25 * time.Millisecond
	// The ensemble's tick and syncLimit: a server cut off from its peers
	// goes on serving its clients for ZKSyncLimit × ZKTick = 6s, three times
	// the session timeout (production defaults: 10s against 5s), so that
	// even a successor elected late on a loaded machine finds it serving.
	ZKTick      = 200 * time.Millisecond
	ZKSyncLimit = 30
	// EtcdLeaseTTL and EtcdDemoteTimeout are the daemons' etcd.lease_ttl
	// and service.demote.timeout on the etcd backend. A won term may act
	// until its expiry (the last answered renewal's send time + TTL -
	// TTL/20) less the demote budget (the demote timeout and two kill
	// graces); renewals go every TTL/3. With clustertest's default (the
	// longest demote timeout the lease holds) that leaves renewals a few
	// hundred ms: on this 2-core machine at load average 80 they took
	// longer, and terms ended before their promotion again and again (3s:
	// no leader within 60s of the start; 5s: a third of the faults
	// without recovery within the liveness bound). 8s with a 2.2s demote
	// (budget 2.7s) leaves a renewal 2.4s. The demote stays above 2s: the
	// demote hook itself took over 2s there.
	EtcdLeaseTTL      = 8 * time.Second
	EtcdDemoteTimeout = 2200 * time.Millisecond
)

// LivenessBound is how long after a fault heals a promoted leader must be
// writing again. It is deliberately generous for a loaded 2-core machine:
//
//	session timeout (the old session must expire)             2s
//	+ ZooKeeper's expiry tick and reconnect after a restart    3s
//	+ fencing: rpc 1s + shell 5s, tried by two candidates     12s
//	+ promote hook timeout (a hang in flight at the heal)      5s
//	+ takeover backoff after failed fencing/promotion          8s
//	+ slack (JVM restarts, scheduling, -race binaries)        15s
//	= 45s
const LivenessBound = 45 * time.Second

// Env is a running chaos environment.
type Env struct {
	t        testing.TB
	C        *clustertest.Cluster
	StoreURL string
	StoreDir string
	Seed     uint64
	// Backend is the coordination backend: clustertest.BackendZooKeeper
	// or clustertest.BackendEtcd.
	Backend string
	// Session is how long a daemon cut off from the coordination service
	// keeps its session: SessionTimeout on ZooKeeper, EtcdLeaseTTL on etcd.
	// The nemeses size their holds by it.
	Session time.Duration

	store     *exec.Cmd
	storeDone chan struct{}
	events    *os.File
	evMu      sync.Mutex

	mu         sync.Mutex
	expectExit map[int]bool // pid -> the nemesis is killing it
	nextID     int

	stopMon chan struct{}
	monDone chan struct{}
	monOnce sync.Once

	// names is the daemons' private name service (nil where mount
	// namespaces are not available: zk-names then cannot run).
	names    *netNS
	namesErr error

	// Policy is the run's promotion policy (priorities; see policy.go).
	Policy Policy
	// posDir holds the nodes' position files; pos drives them and polls
	// what the daemons published (positions.go).
	posDir string
	pos    *positions
}

// NewEnv starts the store, a 3-server ensemble and three nodes whose
// ZooKeeper traffic and admin API (for peers) go through fault proxies, and
// waits for a leader. The election runs in fair mode.
func NewEnv(t testing.TB, seed uint64) *Env { return NewEnvMode(t, seed, "fair") }

// NewEnvMode is NewEnv with an election mode (fair or unfair). ZooKeeper
// auth is on (zk-handshake-drop loses AddAuth replies), every node's
// ZooKeeper traffic also passes a zktest.LossProxy (lost replies), and
// each daemon runs in a mount namespace with its own resolv.conf and hosts
// file (zk-names) and Go's own resolver.
func NewEnvMode(t testing.TB, seed uint64, mode string) *Env {
	t.Helper()
	return NewEnvPolicy(t, seed, mode, DrawPolicy(seed, false))
}

// NewEnvPolicy is NewEnvMode with a promotion policy: the nodes' priorities,
// and a pre_promote hook on every node (the nemesis makes it veto now and
// then).
func NewEnvPolicy(t testing.TB, seed uint64, mode string, pol Policy) *Env {
	t.Helper()
	return NewEnvBackend(t, clustertest.BackendZooKeeper, seed, mode, pol)
}

// NewEnvBackend is NewEnvPolicy on a coordination backend. On etcd the
// cluster is a 3-member etcdtest cluster of separate processes (peer
// links through proxies: Isolate), each node reaching every member
// through its own etcdtest.DelayProxy (client partitions), with a lease
// TTL of EtcdLeaseTTL; the options that exist only on ZooKeeper (auth,
// loss proxies, quorum proxies, tickTime) are left out.
func NewEnvBackend(t testing.TB, backend string, seed uint64, mode string, pol Policy) *Env {
	t.Helper()
	if backend == clustertest.BackendZooKeeper {
		zktest.Require(t)
	}
	_, toy := clustertest.Binaries(t)
	e := &Env{t: t, Seed: seed, expectExit: map[int]bool{}, Policy: pol, Backend: backend, Session: SessionTimeout}
	if backend == clustertest.BackendEtcd {
		e.Session = EtcdLeaseTTL
	}
	e.StoreDir = filepath.Join(t.TempDir(), "store")
	port := freeport.Take(t, 1)[0]
	e.StoreURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := os.MkdirAll(e.StoreDir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(e.StoreDir, "store.log"))
	if err != nil {
		t.Fatal(err)
	}
	e.store = exec.Command(toy, "store", "-listen", fmt.Sprintf("127.0.0.1:%d", port), "-dir", e.StoreDir)
	e.store.Stdout, e.store.Stderr = out, out
	e.store.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := e.store.Start(); err != nil {
		t.Fatal(err)
	}
	e.storeDone = make(chan struct{})
	go func() { e.store.Wait(); out.Close(); close(e.storeDone) }()
	t.Cleanup(func() { e.store.Process.Kill(); <-e.storeDone })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := e.storeStats(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fenced store did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}

	e.names, e.namesErr = newNetNS(filepath.Join(t.TempDir(), "net"))
	if e.namesErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("zk-names needs a mount namespace: %v", e.namesErr)
		}
		t.Logf("zk-names will not run: %v", e.namesErr)
	}
	e.initPositions()
	opts := clustertest.Options{
		Backend: backend, Mode: mode,
		StoreURL: e.StoreURL, WriteInterval: WriteInterval,
		PeerProxy: true, LogFormat: "json",
		ColdStandby: os.Getenv("CHAOS_COLD") != "",
		// The follow hook runs under every fault (checkFollow judges it).
		Follow: true,
		// seeded priorities, and a pre_promote hook that vetoes
		// while the nemesis says so (checkPolicy judges both).
		Priority: pol.Priority, PrePromote: true,
		// Data freshness: every node's position is a file the harness
		// advances (and freezes now and then); election.max_lag is set.
		ServiceYAML:  func(n *clustertest.Node) string { return positionYAML(e.posDir, n.ID) },
		ElectionYAML: fmt.Sprintf("  max_lag: %d\n", MaxLag) + takeoverYAML(backend, mode) + restartYAML() + fenceFirstYAML(mode),
		// Fencing first needs a method that proves: fence.sh stands the
		// target's toy down and counts an unreachable toy as gone.
		ShellProves: fenceFirstOn(mode),
		DaemonEnv: func(*clustertest.Node) []string {
			env := []string{"GODEBUG=netdns=go"} // resolv.conf and hosts only; no cgo resolver
			if e.names != nil {
				env = append(env, e.names.env()...)
			}
			return env
		},
		DaemonWrap: func(_ *clustertest.Node, argv []string) []string {
			if e.names == nil {
				return argv
			}
			return e.names.wrap(argv)
		},
	}
	if backend == clustertest.BackendEtcd {
		opts.EtcdLeaseTTL, opts.EtcdDemoteTimeout, opts.EtcdClientProxies = EtcdLeaseTTL, EtcdDemoteTimeout, true
	} else {
		opts.ZooKeepers, opts.SessionTimeout, opts.Auth = 3, SessionTimeout, true
		opts.ZKTickTime, opts.ZKSyncLimit, opts.QuorumProxies = ZKTick, ZKSyncLimit, true
		opts.ProxyEnsemble, opts.LossProxies = true, true
	}
	e.C = clustertest.Start(t, opts)
	e.events, err = os.OpenFile(e.C.EventsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range e.C.Nodes {
		id := n.ID
		for _, p := range n.ZKLossProxies {
			p.OnLoss(func(lr zktest.LostReply) {
				e.Log("reply_lost", "node", id, "op", lr.Op, "xid", lr.Xid, "path", lr.Path, "dropped", lr.Dropped)
			})
		}
	}
	e.logPolicy()
	e.startPositions()
	e.stopMon, e.monDone = make(chan struct{}, 1), make(chan struct{})
	go e.monitor()
	// Runs before the cluster's cleanup (LIFO): exits from the teardown's
	// SIGKILLs are not reported.
	// The position poller stops first: it logs into the events file.
	t.Cleanup(func() { e.StopMonitor(); e.pos.close(); e.events.Close() })
	return e
}

// Log appends one "UNIXNANO KIND k=v ..." line to the shared events log, in
// one write(2) on an O_APPEND file, like the hooks do.
func (e *Env) Log(kind string, kv ...any) time.Time {
	now := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", now.UnixNano(), kind)
	for i := 0; i+1 < len(kv); i += 2 {
		v := strings.ReplaceAll(fmt.Sprint(kv[i+1]), " ", "_")
		fmt.Fprintf(&b, " %v=%s", kv[i], v)
	}
	b.WriteByte('\n')
	e.evMu.Lock()
	defer e.evMu.Unlock()
	if _, err := e.events.WriteString(b.String()); err != nil {
		e.t.Logf("events log: %v", err)
	}
	return now
}

// DecisionsPath is the store's decision log.
func (e *Env) DecisionsPath() string { return filepath.Join(e.StoreDir, "decisions.jsonl") }

// History loads and merges the events log and the store's decisions.
func (e *Env) History() (History, error) {
	return Load(e.C.EventsPath, e.DecisionsPath(), e.DaemonLogs(), e.ToyLogs())
}

// ToyLogs maps every node to its toy service's log.
func (e *Env) ToyLogs() map[string]string {
	logs := map[string]string{}
	for _, n := range e.C.Nodes {
		logs[n.ID] = filepath.Join(n.Dir(), "toy.log")
	}
	return logs
}

// DaemonLogs maps every node to its failoverd log.
func (e *Env) DaemonLogs() map[string]string {
	logs := map[string]string{}
	for _, n := range e.C.Nodes {
		logs[n.ID] = filepath.Join(n.Dir(), "failoverd.log")
	}
	return logs
}

type storeStats struct {
	Accepted      int64 `json:"accepted"`
	RejectedStale int64 `json:"rejected_stale"`
	MaxEpoch      int64 `json:"max_epoch"`
}

func (e *Env) storeStats() (storeStats, error) {
	var s storeStats
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(e.StoreURL + "/stats")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// expectKill marks the node's current daemon as about to be killed by the
// nemesis and returns its pid.
func (e *Env) expectKill(n *clustertest.Node) int {
	pid := n.Pid()
	e.mu.Lock()
	e.expectExit[pid] = true
	e.mu.Unlock()
	return pid
}

// monitor reports every daemon exit, expected or not, and stops on StopMonitor.
func (e *Env) monitor() {
	defer close(e.monDone)
	last := map[string]int{} // node -> pid seen running
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-e.stopMon:
			return
		case <-tick.C:
		}
		for _, n := range e.C.Nodes {
			pid, running := n.Pid(), n.Running()
			prev := last[n.ID]
			if prev != 0 && (prev != pid || !running) {
				err := "restarted"
				if prev == pid {
					// Not running: done is closed, so this returns at once.
					if werr, ok := n.Wait(time.Second); ok {
						err = fmt.Sprint(werr)
					}
				}
				e.mu.Lock()
				expected := e.expectExit[prev]
				delete(e.expectExit, prev)
				e.mu.Unlock()
				e.Log(KindDaemonExit, "node", n.ID, "pid", prev, "expected", expected, "err", err)
				last[n.ID] = 0
				prev = 0
			}
			if running && prev == 0 {
				last[n.ID] = pid
				e.Log(KindDaemonStart, "node", n.ID, "pid", pid)
			}
		}
	}
}

// StopMonitor stops the exit monitor (before the teardown kills everything).
func (e *Env) StopMonitor() {
	e.monOnce.Do(func() {
		e.stopMon <- struct{}{}
		<-e.monDone
	})
}

// Sample logs, for every running daemon, its open file descriptors and its
// goroutines (go_goroutines from /metrics).
func (e *Env) Sample() {
	for _, n := range e.C.Nodes {
		pid := n.Pid()
		if pid == 0 || !n.Running() {
			continue
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		g, err := goroutines(n.AdminAddr)
		if err != nil {
			continue
		}
		e.Log(KindSample, "node", n.ID, "pid", pid, "fds", len(fds), "goroutines", g)
	}
}

func goroutines(admin string) (int64, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("no go_goroutines in /metrics of %s", admin)
}

// Leader returns the node whose admin API reports leader (the newest epoch
// if, in a transition, two do), or nil. Unlike clustertest's Leader it does
// not fail the test on two answers: that judgement is the checker's.
func (e *Env) Leader() *clustertest.Node {
	var best *clustertest.Node
	var bestEpoch int64
	for _, n := range e.C.Nodes {
		if s, ok := n.Status(); ok && s.State == controller.StateLeader && s.Epoch >= bestEpoch {
			best, bestEpoch = n, s.Epoch
		}
	}
	return best
}

// WaitRecovered waits until the cluster has settled: every daemon runs and
// answers, exactly one reports leader, at the epoch the store accepts, none
// is fencing, promoting or demoting, and the store keeps accepting writes,
// all of it unchanged for 0.6s. False after timeout. The checker judges
// liveness from the history; this only paces the schedule.
func (e *Env) WaitRecovered(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	var key string
	var since time.Time
	var lastAcc int64 = -1
	for time.Now().Before(deadline) {
		k, acc, ok := e.settled()
		now := time.Now()
		switch {
		case ok && k == key && acc > lastAcc:
			if now.Sub(since) >= 600*time.Millisecond {
				return true
			}
		case ok:
			key, since = k, now
		default:
			key = ""
		}
		lastAcc = acc
		time.Sleep(150 * time.Millisecond)
	}
	return false
}

// settled is one look at the cluster for WaitRecovered: the leader and its
// epoch as a key, and the store's accepted count.
func (e *Env) settled() (string, int64, bool) {
	st, err := e.storeStats()
	if err != nil {
		return "", -1, false
	}
	leader := ""
	for _, n := range e.C.Nodes {
		if !n.Running() {
			return "", st.Accepted, false
		}
		s, ok := n.Status()
		if !ok {
			return "", st.Accepted, false
		}
		switch s.State {
		case controller.StateLeader:
			if leader != "" || s.Epoch != st.MaxEpoch {
				return "", st.Accepted, false
			}
			leader = fmt.Sprintf("%s@%d", n.ID, s.Epoch)
		case controller.StateStandby, controller.StateOut:
		default:
			return "", st.Accepted, false
		}
	}
	return leader, st.Accepted, leader != ""
}

// KnownRace is a data race in a dependency, known upstream, that the
// suite reports but does not fail on: every frame of the report must
// contain one of Frames' strings in order. Anything else in a race report
// fails.
type KnownRace struct {
	Name   string
	Frames []string
	Note   string
}

// KnownRaces is empty today: go-zookeeper v1.0.4's race on Conn.lastZxid
// (recvLoop against sendSetWatches after a reconnect) is fixed in the copy
// failoverd carries (third_party/go-zookeeper), so a report of it now fails
// the run like any other.
var KnownRaces []KnownRace

// ScanCrashes logs a crash event for every data race or panic in the
// daemons' and services' logs. Races matching KnownRaces are logged as
// what=known_race:<name>, which the checker counts without failing.
func (e *Env) ScanCrashes() {
	for _, n := range e.C.Nodes {
		for _, name := range []string{"failoverd.log", "toy.log"} {
			f, err := os.Open(filepath.Join(n.Dir(), name))
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			var race []string // lines of the race report being read
			inRace := false
			for sc.Scan() {
				line := sc.Text()
				if inRace {
					if strings.HasPrefix(line, "==================") {
						e.Log(KindCrash, "node", n.ID, "what", classifyRace(race), "file", name, "line", trim(strings.Join(race, "|"), 120))
						inRace, race = false, nil
					} else {
						race = append(race, strings.TrimSpace(line))
					}
					continue
				}
				switch {
				case strings.Contains(line, "WARNING: DATA RACE"):
					inRace = true
				case strings.HasPrefix(line, "panic: "), strings.HasPrefix(line, "fatal error: "):
					e.Log(KindCrash, "node", n.ID, "what", "panic", "file", name, "line", trim(line, 120))
				}
			}
			if inRace {
				e.Log(KindCrash, "node", n.ID, "what", classifyRace(race), "file", name, "line", trim(strings.Join(race, "|"), 120))
			}
			f.Close()
		}
	}
}

// classifyRace names a race report: known_race:<name> or data_race.
func classifyRace(lines []string) string {
	report := strings.Join(lines, "\n")
	for _, k := range KnownRaces {
		pos, ok := 0, true
		for _, fr := range k.Frames {
			i := strings.Index(report[pos:], fr)
			if i < 0 {
				ok = false
				break
			}
			pos += i + len(fr)
		}
		if ok {
			return "known_race:" + k.Name
		}
	}
	return "data_race"
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// SaveArtifacts copies the logs of the run to dir: the merged history, the
// raw events and decisions, every node's logs and, on etcd, every etcd
// member's log.
func (e *Env) SaveArtifacts(dir string, h History) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "history.log"))
	if err != nil {
		return err
	}
	h.WriteTo(f)
	f.Close()
	copies := map[string]string{"events.log": e.C.EventsPath, "decisions.jsonl": e.DecisionsPath()}
	for _, n := range e.C.Nodes {
		for _, name := range []string{"failoverd.log", "toy.log", "failoverd.yaml"} {
			copies[n.ID+"-"+name] = filepath.Join(n.Dir(), name)
		}
	}
	if e.C.Etcd != nil {
		for _, m := range e.C.Etcd.Members {
			copies["etcd-"+m.Name+".log"] = m.LogPath()
		}
	}
	names := make([]string, 0, len(copies))
	for k := range copies {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		copyFile(filepath.Join(dir, name), copies[name])
	}
	return nil
}

func copyFile(dst, src string) {
	in, err := os.Open(src)
	if err != nil {
		return
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return
	}
	defer out.Close()
	io.Copy(out, in)
}

// takeoverYAML turns election.take_over_at_deadline on with CHAOS_TAKEOVER
// set, on the ZooKeeper backend in fair mode (where it applies).
func takeoverYAML(backend, mode string) string {
	if os.Getenv("CHAOS_TAKEOVER") == "" || backend == clustertest.BackendEtcd || mode != "fair" {
		return ""
	}
	return "  take_over_at_deadline: true\n"
}

// fenceFirstOn reports whether CHAOS_FENCE_FIRST turns election.fence_first
// on: on both backends, in fair mode (where it applies).
func fenceFirstOn(mode string) bool { return os.Getenv("CHAOS_FENCE_FIRST") != "" && mode == "fair" }

// fenceFirstYAML turns election.fence_first on (suspect_after 300ms) with
// CHAOS_FENCE_FIRST set, in fair mode.
func fenceFirstYAML(mode string) string {
	if !fenceFirstOn(mode) {
		return ""
	}
	return "  fence_first: true\n  suspect_after: 300ms\n"
}

// restartYAML turns election.end_own_term_on_restart on with
// CHAOS_RESTART_ENDS_TERM set.
func restartYAML() string {
	if os.Getenv("CHAOS_RESTART_ENDS_TERM") == "" {
		return ""
	}
	return "  end_own_term_on_restart: true\n"
}
