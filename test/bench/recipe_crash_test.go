package bench

// The bare references of a crash failover: two candidates of a bare
// election recipe, each in a process of its own, on the coordination
// service at the daemons' timing; the leader's process is SIGKILLed and
// the time until the other one is leader is what the recipe alone costs
// (its session or lease has to end on the server). ZooKeeper: kazoo's
// Election (python3-kazoo), a 3-server ensemble or one server as
// BENCH_CRASH_ZK_SERVERS says, tickTime BENCH_ZK_TICK. etcd: etcd's
// concurrency.Election, run by this test binary started again as a
// candidate (bareCandidateEnv), on a 3-member etcdtest cluster.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/etcdtest"
	"github.com/failoverd/failoverd/test/zktest"
)

// scCrashBare is the bare references' scenario (not a failoverd crash:
// the targets leave it out).
const scCrashBare = "bare recipe crash (1× reference)"

// bareCandidateEnv, set in a process started from this test binary,
// makes TestMain run one concurrency.Election candidate instead of the
// benchmarks: "endpoints|prefix|ttl seconds|value".
const bareCandidateEnv = "BENCH_BARE_CANDIDATE"

// runBareCandidate campaigns once and prints "leader UNIXNANO" when
// Campaign returns; then it holds the leadership (its session's
// keepalives run) until it is killed. It returns the exit code.
func runBareCandidate(spec string) int {
	f := strings.Split(spec, "|")
	if len(f) != 4 {
		fmt.Fprintf(os.Stderr, "%s: want endpoints|prefix|ttl|value, got %q\n", bareCandidateEnv, spec)
		return 2
	}
	ttl, err := strconv.Atoi(f[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(f[0], ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e := concurrency.NewElection(s, f[1])
	if err := e.Campaign(context.Background(), f[3]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("leader %d\n", time.Now().UnixNano())
	select {}
}

// kazooCandidateScript is one kazoo Election candidate: it prints
// "leader UNIXNANO" when its leader function is called and holds the
// leadership until it is killed.
const kazooCandidateScript = `
import sys, time, threading
from kazoo.client import KazooClient
hosts, path, ident, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
zk = KazooClient(hosts=hosts, timeout=timeout)
zk.start()
def lead():
    print("leader", time.time_ns(), flush=True)
    threading.Event().wait()
zk.Election(path, ident).run(lead)
`

// bareProc is one candidate process; leader carries the time it said it
// leads.
type bareProc struct {
	cmd    *exec.Cmd
	leader chan time.Time
	stderr *strings.Builder
}

// bareCrasher keeps two candidate processes running and crashes the
// leader's.
type bareCrasher struct {
	b      testing.TB
	start  func(id string) *exec.Cmd
	queued func() int // candidates in the election, as the server sees them
	procs  []*bareProc
	seq    int
}

func (g *bareCrasher) spawn() error {
	g.seq++
	cmd := g.start(fmt.Sprintf("c%d", g.seq))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p := &bareProc{cmd: cmd, leader: make(chan time.Time, 1), stderr: &strings.Builder{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	g.b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "leader "); ok {
				if ns, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					p.leader <- time.Unix(0, ns)
				}
			}
		}
	}()
	g.procs = append(g.procs, p)
	return nil
}

// ready waits until two candidates are in the election and one of them
// leads, and returns the leader's and the other's process.
func (g *bareCrasher) ready(timeout time.Duration) (leader, next *bareProc, err error) {
	for len(g.procs) < 2 {
		if err := g.spawn(); err != nil {
			return nil, nil, err
		}
	}
	deadline := time.Now().Add(timeout)
	for leader == nil {
		for _, p := range g.procs {
			select {
			case at := <-p.leader:
				p.leader <- at // keep it for the next look
				leader = p
			default:
			}
		}
		if time.Now().After(deadline) {
			return nil, nil, errors.New("no bare leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for g.queued() < 2 {
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("the second candidate did not join (%d in the election; %s)", g.queued(), strings.TrimSpace(g.procs[len(g.procs)-1].stderr.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range g.procs {
		if p != leader {
			next = p
		}
	}
	return leader, next, nil
}

// crash SIGKILLs the leader's process and returns the time until the
// other candidate leads; a new candidate then takes the dead one's place.
// With settle (BENCH_CRASH_SETTLE), the kill waits that long plus a
// random part of up to half of it once both candidates are in, as the
// daemons' crashes do: at any phase of the leader's keepalives.
func (g *bareCrasher) crash(timeout, settle time.Duration) (time.Duration, error) {
	leader, next, err := g.ready(60 * time.Second)
	if err != nil {
		return 0, err
	}
	<-leader.leader
	if settle > 0 {
		time.Sleep(settle + rand.N(settle/2))
	}
	t0 := time.Now()
	leader.cmd.Process.Signal(syscall.SIGKILL)
	leader.cmd.Wait()
	g.procs = []*bareProc{next}
	select {
	case at := <-next.leader:
		next.leader <- at
		return at.Sub(t0), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("no next leader within %v", timeout)
	}
}

// bareCrash is BenchmarkCrashFailover's bare reference at session
// timeout (ZooKeeper) or lease TTL (etcd) st.
func bareCrash(b *testing.B, backend string, st time.Duration) {
	n := crashRuns(st)
	g := &bareCrasher{b: b}
	var res Result
	if backend == clustertest.BackendEtcd {
		ec := etcdtest.Start(b, etcdtest.Options{})
		cli := etcdClient(b, ec.Endpoints())
		const prefix = "/bare-crash"
		ttl := int(st.Round(time.Second) / time.Second)
		self, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		g.start = func(id string) *exec.Cmd {
			cmd := exec.Command(self)
			cmd.Env = append(os.Environ(), bareCandidateEnv+"="+strings.Join(ec.Endpoints(), ",")+"|"+prefix+"|"+strconv.Itoa(ttl)+"|"+id)
			return cmd
		}
		g.queued = func() int {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return -1
			}
			return int(r.Count)
		}
		res = Result{Backend: backend, Scenario: scCrashBare, Name: fmt.Sprintf("bare concurrency.Election, lease TTL %v, leader process killed", st)}
		res.Notes = "2 candidates in separate processes (own client and session each); SIGKILL → the other's Campaign returns; " + etcdDesc(ec)
	} else {
		py, err := kazooPython()
		if err != nil {
			b.Fatalf("bare kazoo crash: %v", err)
		}
		zks := zktest.StartOpts(b, zktest.Options{Servers: crashZKServers(), TickTime: envDuration("BENCH_ZK_TICK", 0)})
		zc, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 10 * time.Second}, zk.Deps{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(zc.Close)
		const path = "/bare-kazoo-crash"
		g.start = func(id string) *exec.Cmd {
			return exec.Command(py, "-c", kazooCandidateScript, strings.Join(zks.Addrs(), ","), path, id, strconv.FormatFloat(st.Seconds(), 'f', 3, 64))
		}
		g.queued = func() int {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := zc.Session(ctx)
			if err != nil {
				return -1
			}
			kids, err := s.Children(ctx, path)
			if err != nil {
				return -1
			}
			return len(kids)
		}
		res = Result{Backend: backend, Scenario: scCrashBare, Name: fmt.Sprintf("bare kazoo Election, session %v, leader process killed", st)}
		res.Notes = "2 candidates in separate python3 processes (own KazooClient each); SIGKILL → the other's leader function; " + zkDesc(zks) + ": sessions expire on tick boundaries"
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		d, err := g.crash(3*st+30*time.Second, envDuration("BENCH_CRASH_SETTLE", 0))
		if err != nil {
			b.Fatalf("run %d: %v", i, err)
		}
		ds = append(ds, d)
		if testing.Verbose() {
			b.Logf("run %d: bare leader killed, next leads after %.1f ms", i, ms(d))
		}
	}
	res.Runs = len(ds)
	res.fill(ds)
	res.Extra = map[string]float64{"timeout_ms": float64(st.Milliseconds()), "p50_over_timeout": res.P50ms / float64(st.Milliseconds())}
	record(b, res)
}
