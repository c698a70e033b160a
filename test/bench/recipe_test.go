package bench

// The reference a failoverd handoff is compared with: a bare leader-election
// recipe on the same ZooKeeper ensemble, doing only what an election needs
// (kazoo's Election: one sequential ephemeral znode per candidate; the leader
// deletes its znode; the next one sees its watch fire, lists the children
// and is leader). Once in Go over failoverd's own zk client, and, when
// python3 can import kazoo (Debian's python3-kazoo), kazoo itself.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/zktest"
)

const scBare = "bare recipe handoff (1× reference)"

// BenchmarkBareRecipeHandoff times the bare recipe's handoff (the leader's
// delete sent → the next candidate's "is leader") with 3 candidates, each
// with its own session, BENCH_BARE_RUNS times (default 100), per backend.
// ZooKeeper: on a 3-server loopback ensemble (BENCH_ZK=standalone: one
// server), the Go recipe, then kazoo when it is installed. etcd: on a
// 3-member etcdtest cluster, etcd's own concurrency.Election (Campaign,
// Resign, Observe; bareElection). BenchmarkGracefulHandoff runs the same
// recipe again, interleaved with its own runs on its cluster, for the
// ratio.
func BenchmarkBareRecipeHandoff(b *testing.B) {
	forEachBackend(b, func(b *testing.B, backend string) {
		if backend == clustertest.BackendEtcd {
			bareElectionHandoff(b)
			return
		}
		bareRecipeHandoff(b)
	})
}

func bareRecipeHandoff(b *testing.B) {
	zks := zktest.StartOpts(b, zktest.Options{Servers: handoffZKServers()})
	n := runs("BARE", 100)
	g := startBareRecipe(b, zks.Addrs(), "/bare-go", 3)
	var ds []time.Duration
	for i := 0; i < n; i++ {
		d, err := g.handoff()
		if err != nil {
			b.Fatalf("run %d: %v", i, err)
		}
		ds = append(ds, d)
	}
	res := Result{Scenario: scBare, Name: "Go recipe over failoverd's zk client, N=3", Runs: len(ds)}
	res.fill(ds)
	res.Notes = "delete sent → next candidate's watch → getChildren → leader; " + zkDesc(zks)
	record(b, res)

	k, err := startKazoo(b, zks.Addrs(), "/bare-kazoo", 3)
	if err != nil {
		b.Logf("kazoo not timed: %v", err)
		return
	}
	ds = nil
	for i := 0; i < n; i++ {
		d, err := k.handoff()
		if err != nil {
			b.Fatalf("kazoo run %d: %v", i, err)
		}
		ds = append(ds, d)
	}
	kres := Result{Scenario: scBare, Name: "kazoo Election (python3), N=3", Runs: len(ds)}
	kres.fill(ds)
	kres.Notes = "release (delete) → next candidate's leader function; " + zkDesc(zks)
	record(b, kres)
}

// handoffer is a bare reference that hands its leadership on when asked
// and says how long the next candidate took to lead.
type handoffer interface {
	handoff() (time.Duration, error)
}

// startBare starts the bare reference of c's backend on c's own
// coordination cluster: the Go recipe on ZooKeeper, concurrency.Election
// on etcd, with as many candidates as c has nodes.
func startBare(b *testing.B, c *cluster) handoffer {
	if c.Etcd != nil {
		return startBareElection(b, c.Etcd.Endpoints(), "/bare-election", len(c.Nodes))
	}
	return startBareRecipe(b, c.ZK.Addrs(), "/bare-go", len(c.Nodes))
}

// handoffZKServers is how many ZooKeeper servers the handoff scenarios
// (graceful, manual, bare recipe) run on: 3 (an ensemble, the default: a
// write is a quorum round, as in production) or 1 with BENCH_ZK=standalone.
func handoffZKServers() int {
	if os.Getenv("BENCH_ZK") == "standalone" {
		return 1
	}
	return 3
}

// handoffOptions is the cluster of the handoff scenarios: 3 nodes in mode,
// handoffZKServers() servers, ZooKeeper's tickTime BENCH_ZK_TICK (default
// zktest's 200 ms; production ensembles run 2s, which makes the elector's
// renew interval 1.05 s) and the session timeout BENCH_SESSION (default
// clustertest's 2s; at least 2 ticks); BENCH_TICK_UNKNOWN=1 leaves
// zookeeper.tick_time out of the daemons' configs, as the default config does;
// BENCH_COLD=1 sets election.warm_standby: false on every node (on by default).
// On etcd: a 3-member etcdtest cluster and etcd.lease_ttl BENCH_ETCD_TTL
// (default 5s, the daemon's default); the ZooKeeper knobs do not apply.
func handoffOptions(backend, mode string) clustertest.Options {
	if backend == clustertest.BackendEtcd {
		return clustertest.Options{Backend: backend, Mode: mode, EtcdLeaseTTL: etcdLeaseTTL(), ColdStandby: os.Getenv("BENCH_COLD") != ""}
	}
	o := clustertest.Options{ZooKeepers: handoffZKServers(), Mode: mode}
	o.ZKTickTime = envDuration("BENCH_ZK_TICK", 0)
	o.SessionTimeout = envDuration("BENCH_SESSION", 0)
	o.TickTimeUnknown = os.Getenv("BENCH_TICK_UNKNOWN") != ""
	o.ColdStandby = os.Getenv("BENCH_COLD") != ""
	return o
}

func zkDesc(zks *zktest.Cluster) string {
	d := "standalone ZooKeeper"
	if len(zks.Servers) > 1 {
		d = fmt.Sprintf("%d-server ZooKeeper ensemble", len(zks.Servers))
	}
	return d + ", tickTime " + zks.Options().TickTime.String()
}

// bareRecipe is N candidates of the Go recipe, each on its own session.
type bareRecipe struct {
	b      testing.TB
	won    chan bareWin
	leader *bareWin
}

// bareWin is a candidate's "is leader"; it hands its leadership back when
// told to over release and answers with the time it sent the delete.
type bareWin struct {
	at      time.Time
	release chan chan time.Time
}

func startBareRecipe(b testing.TB, addrs []string, dir string, n int) *bareRecipe {
	b.Helper()
	g := &bareRecipe{b: b, won: make(chan bareWin, n)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var clients []*zk.Client
	b.Cleanup(func() {
		cancel()
		wg.Wait() // before the sessions close: a candidate's call must not fail on its way out
		for _, c := range clients {
			c.Close()
		}
	})
	for i := range n {
		c, err := zk.NewClient(zk.Config{Servers: addrs, SessionTimeout: 10 * time.Second}, zk.Deps{})
		if err != nil {
			b.Fatal(err)
		}
		clients = append(clients, c)
		s, err := c.Session(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.EnsurePath(ctx, dir); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := g.candidate(ctx, s, dir, fmt.Sprintf("c%d", i)); err != nil && ctx.Err() == nil {
					b.Errorf("bare recipe candidate %d: %v", i, err)
					return
				}
			}
		}()
	}
	return g
}

// candidate is one term of kazoo's Lock as Election uses it: create
// "<id>__lock__<seq>", then until ours is the lowest: list the children,
// watch the predecessor (exists), wait for its event, list again.
func (g *bareRecipe) candidate(ctx context.Context, s *zk.Session, dir, id string) error {
	node, _, err := s.Create(ctx, dir+"/"+id+"__lock__", nil, zk.EphemeralSequential)
	if err != nil {
		return err
	}
	name := node[strings.LastIndexByte(node, '/')+1:]
	for {
		kids, err := s.Children(ctx, dir)
		if err != nil {
			return err
		}
		sort.Slice(kids, func(i, j int) bool { return lockSeq(kids[i]) < lockSeq(kids[j]) })
		idx := -1
		for i, k := range kids {
			if k == name {
				idx = i
			}
		}
		if idx < 0 {
			return fmt.Errorf("our znode %s is gone", node)
		}
		if idx == 0 {
			break
		}
		ok, _, ch, err := s.ExistsW(ctx, dir+"/"+kids[idx-1])
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
	w := bareWin{at: time.Now(), release: make(chan chan time.Time, 1)}
	select {
	case g.won <- w:
	case <-ctx.Done():
		return nil
	}
	select {
	case reply := <-w.release:
		t0 := time.Now()
		reply <- t0
		return s.Delete(ctx, node, -1)
	case <-ctx.Done():
		return nil
	}
}

func lockSeq(name string) int64 {
	i := strings.LastIndex(name, "__lock__")
	n, err := strconv.ParseInt(name[i+len("__lock__"):], 10, 64)
	if i < 0 || err != nil {
		return -1
	}
	return n
}

// handoff makes the current leader (the first one, on the first call)
// delete its znode and returns the time until the next one is leader. The
// old leader rejoins at the back of the queue; handoff waits a moment for
// that, so every run starts with N candidates.
func (g *bareRecipe) handoff() (time.Duration, error) {
	if g.leader == nil {
		select {
		case w := <-g.won:
			g.leader = &w
		case <-time.After(30 * time.Second):
			return 0, errors.New("no first leader")
		}
	}
	reply := make(chan time.Time, 1)
	g.leader.release <- reply
	var next bareWin
	select {
	case next = <-g.won:
	case <-time.After(30 * time.Second):
		return 0, errors.New("no next leader")
	}
	t0 := <-reply
	g.leader = &next
	time.Sleep(50 * time.Millisecond) // the old leader rejoins
	return next.at.Sub(t0), nil
}

// kazooScript runs N kazoo Election candidates (threads, one KazooClient
// each) and, for every line read on stdin, makes the leader return from its
// leader function (kazoo then deletes its lock znode) and prints the time
// until the next leader's function was called, in nanoseconds.
const kazooScript = `
import sys, time, threading, queue
from kazoo.client import KazooClient
hosts, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
won = queue.Queue()
def candidate(i):
    zk = KazooClient(hosts=hosts, timeout=10.0)
    zk.start()
    el = zk.Election(path, "c%d" % i)
    while True:
        release, box = threading.Event(), {}
        def lead():
            won.put((time.time_ns(), release, box))
            release.wait()
            box["t0"] = time.time_ns()  # kazoo deletes our lock znode right after we return
        el.run(lead)
for i in range(n):
    threading.Thread(target=candidate, args=(i,), daemon=True).start()
leader = won.get(timeout=30)
print("ready", flush=True)
for line in sys.stdin:
    leader[1].set()
    nxt = won.get(timeout=30)
    while "t0" not in leader[2]:
        time.sleep(0.0001)
    print(nxt[0] - leader[2]["t0"], flush=True)
    leader = nxt
    time.sleep(0.05)  # the old leader rejoins
`

// kazooRun drives kazooScript.
type kazooRun struct {
	in  io.Writer
	out *bufio.Scanner
}

// kazooPython is the first python3 that imports kazoo ("python3" on the
// PATH may be another installation than Debian's, which python3-kazoo serves).
func kazooPython() (string, error) {
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import kazoo").Run() == nil {
			return py, nil
		}
	}
	return "", errors.New("no python3 imports kazoo (apt-get install python3-kazoo)")
}

func startKazoo(b testing.TB, addrs []string, path string, n int) (*kazooRun, error) {
	py, err := kazooPython()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(py, "-c", kazooScript, strings.Join(addrs, ","), strconv.Itoa(n), path)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	k := &kazooRun{in: in, out: bufio.NewScanner(out)}
	if !k.out.Scan() || k.out.Text() != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("kazoo candidates did not start: %s", stderr.String())
	}
	return k, nil
}

func (k *kazooRun) handoff() (time.Duration, error) {
	if _, err := io.WriteString(k.in, "go\n"); err != nil {
		return 0, err
	}
	if !k.out.Scan() {
		return 0, fmt.Errorf("kazoo: no answer: %v", k.out.Err())
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(k.out.Text()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("kazoo: %q: %v", k.out.Text(), err)
	}
	return time.Duration(ns), nil
}
