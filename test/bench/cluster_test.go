package bench

// Shared plumbing of the benchmarks that run whole failoverd clusters
// (test/clustertest): run counts, waiting for events, reading /proc and
// ZooKeeper's per-connection figures.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/zktest"
)

func init() {
	// Timings of race-instrumented binaries say nothing about failoverd:
	// clustertest builds without -race when this is set. init runs before
	// TestMain and before any benchmark builds the binaries.
	if os.Getenv("CLUSTERTEST_NORACE") == "" {
		os.Setenv("CLUSTERTEST_NORACE", "1")
	}
}

// runs is how often a scenario repeats: BENCH_<NAME>_RUNS, else BENCH_RUNS
// (one override for every scenario, e.g. 3 for a smoke run), else def.
func runs(name string, def int) int {
	for _, k := range []string{"BENCH_" + name + "_RUNS", "BENCH_RUNS"} {
		if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
			return n
		}
	}
	return def
}

// envDuration reads a duration from the environment, or def.
func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil && d > 0 {
		return d
	}
	return def
}

var (
	hookevOnce sync.Once
	hookevPath string
	hookevLang string
	hookevErr  error
)

// hookevC is test/bench/hookev in C: a static C program starts in a
// fraction of the time a Go program's runtime needs (a Go package cannot
// hold .c files without cgo, hence the string).
const hookevC = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <libgen.h>
static const char *env(const char *k) { const char *v = getenv(k); return v ? v : ""; }
int main(int argc, char **argv) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char self[4096], self2[4096], path[4200], kind[256];
	snprintf(self, sizeof self, "%s", argv[0]);
	snprintf(self2, sizeof self2, "%s", argv[0]);
	snprintf(path, sizeof path, "%s/events.log", dirname(self));
	snprintf(kind, sizeof kind, "%s", basename(self2));
	size_t n = strlen(kind);
	if (n > 3 && strcmp(kind + n - 3, ".sh") == 0) kind[n - 3] = 0;
	char line[2048];
	int len = snprintf(line, sizeof line, "%lld%09ld %s node=%s epoch=%s role=%s reason=%s",
		(long long)ts.tv_sec, ts.tv_nsec, kind, env("FAILOVERD_NODE_ID"), env("FAILOVERD_EPOCH"),
		env("FAILOVERD_ROLE"), env("FAILOVERD_REASON"));
	if (strcmp(kind, "promote") == 0)
		len += snprintf(line + len, sizeof line - len, " prev=%s prev_epoch=%s",
			env("FAILOVERD_PREVIOUS_LEADER"), env("FAILOVERD_PREVIOUS_EPOCH"));
	snprintf(line + len, sizeof line - len, "\n");
	FILE *f = fopen(path, "a");
	if (!f || fputs(line, f) < 0 || fclose(f) != 0) { perror(path); return 1; }
	return 0;
}
`

// hookev builds the compiled trivial hook once: the C version when a C
// compiler is at hand (static, else dynamic), else test/bench/hookev (Go).
// It returns the binary and its language.
func hookev(b *testing.B) (string, string) {
	b.Helper()
	hookevOnce.Do(func() {
		dir, err := os.MkdirTemp("", "failoverd-hookev-")
		if err != nil {
			hookevErr = err
			return
		}
		hookevPath = filepath.Join(dir, "hookev")
		if os.Getenv("BENCH_HOOK_GO") == "" {
			src := filepath.Join(dir, "hookev.c")
			if err := os.WriteFile(src, []byte(hookevC), 0o644); err == nil {
				for _, args := range [][]string{{"-O2", "-static"}, {"-O2"}} {
					if exec.Command("cc", append(args, "-o", hookevPath, src)...).Run() == nil {
						hookevLang = "C"
						return
					}
				}
			}
		}
		hookevLang = "Go"
		cmd := exec.Command("go", "build", "-o", hookevPath, "./hookev")
		if out, err := cmd.CombinedOutput(); err != nil {
			hookevErr = fmt.Errorf("building hookev: %v\n%s", err, out)
		}
	})
	if hookevErr != nil {
		b.Fatal(hookevErr)
	}
	return hookevPath, hookevLang
}

// cluster is a clustertest cluster plus a client of our own for looking at
// the election queue: a ZooKeeper session, or an etcd client.
type cluster struct {
	*clustertest.Cluster
	b  *testing.B
	zc *zk.Client       // ZooKeeper backend
	ec *clientv3.Client // etcd backend
}

func startCluster(b *testing.B, o clustertest.Options) *cluster {
	b.Helper()
	c := clustertest.Start(b, o)
	if c.Etcd != nil {
		return &cluster{Cluster: c, b: b, ec: etcdClient(b, c.Etcd.Endpoints())}
	}
	zc, err := zk.NewClient(zk.Config{Servers: c.ZK.Addrs(), SessionTimeout: 10 * time.Second}, zk.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(zc.Close)
	return &cluster{Cluster: c, b: b, zc: zc}
}

// queueLen counts the candidates in the election directory.
func (c *cluster) queueLen() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c.ec != nil {
		resp, err := c.ec.Get(ctx, layout.ElectionDir()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return -1
		}
		return int(resp.Count)
	}
	s, err := c.zc.Session(ctx)
	if err != nil {
		return -1
	}
	kids, err := s.Children(ctx, layout.ElectionDir())
	if err != nil {
		return -1
	}
	return len(kids)
}

// ready waits until one node leads and every other one campaigns, and
// returns the leader. In fair mode the queue is the truth: a node that stood
// aside (cede, manual failover) rejoins the queue when its time is up but
// may keep reporting state "out" for a moment. In unfair mode only the lock
// holder has a znode, so every other node must report "standby" (a node
// standing aside reports "out" until its cede ends), and the lock must be
// there.
func (c *cluster) ready(timeout time.Duration) *clustertest.Node {
	c.b.Helper()
	unfair := c.Opts.Mode == "unfair"
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var leader *clustertest.Node
		standbys := 0
		for _, n := range c.Nodes {
			s, ok := n.Status()
			switch {
			case !ok:
			case s.State == controller.StateLeader:
				leader = n
			case s.State == controller.StateStandby || (!unfair && s.State == controller.StateOut):
				standbys++
			}
		}
		want := len(c.Nodes)
		if unfair {
			want = 1
		}
		if leader != nil && standbys == len(c.Nodes)-1 && c.queueLen() == want {
			if unfair {
				// A standby reports "standby" as soon as its cede is over;
				// give its elector a moment to set its watch on the lock.
				time.Sleep(100 * time.Millisecond)
			}
			return leader
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.DumpLogs()
	c.b.Fatalf("cluster not ready (one leader, %d standbys campaigning) within %v", len(c.Nodes)-1, timeout)
	return nil
}

// waitEvent polls the events log for the first event of kind after t that
// match accepts.
func (c *cluster) waitEvent(kind string, after time.Time, timeout time.Duration, match func(clustertest.Event) bool) clustertest.Event {
	c.b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if e, ok := findEvent(c.Events(), kind, after, match); ok {
			return e
		}
		if time.Now().After(deadline) {
			c.DumpLogs()
			c.b.Fatalf("no %s event within %v", kind, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func findEvent(evs []clustertest.Event, kind string, after time.Time, match func(clustertest.Event) bool) (clustertest.Event, bool) {
	for _, e := range evs {
		if e.Kind == kind && e.At.After(after) && (match == nil || match(e)) {
			return e, true
		}
	}
	return clustertest.Event{}, false
}

// firstLog returns the node's first log line with msg after t.
func firstLog(n *clustertest.Node, msg string, after time.Time, kv ...string) (clustertest.LogLine, bool) {
	lines, err := clustertest.ReadLog(n.LogPath())
	if err != nil {
		return clustertest.LogLine{}, false
	}
	l := clustertest.FindLog(lines, msg, after, kv...)
	if len(l) == 0 {
		return clustertest.LogLine{}, false
	}
	return l[0], true
}

// hookDuration is duration_seconds of the node's first "hook done" line of
// hook after t (exact, to the nanosecond; the daemons' debug log stamps
// have microseconds).
func hookDuration(n *clustertest.Node, hook string, after time.Time) (time.Duration, bool) {
	l, ok := firstLog(n, "hook done", after, "hook", hook)
	if !ok {
		return 0, false
	}
	s, err := strconv.ParseFloat(l.KV["duration_seconds"], 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(s * float64(time.Second)), true
}

func others(c *cluster, not *clustertest.Node) func(clustertest.Event) bool {
	return func(e clustertest.Event) bool { return e.KV["node"] != not.ID }
}

func nodeIs(n *clustertest.Node) func(clustertest.Event) bool {
	return func(e clustertest.Event) bool { return e.KV["node"] == n.ID }
}

// series collects named durations of the runs of one scenario.
type series map[string][]time.Duration

func (s series) add(name string, d time.Duration) { s[name] = append(s[name], d) }

// p50ms is the median of a series in milliseconds.
func (s series) p50ms(name string) float64 {
	var r Result
	r.fill(s[name])
	return r.P50ms
}

func (s series) p99ms(name string) float64 {
	var r Result
	r.fill(s[name])
	return r.P99ms
}

// ---- /proc ----

// procCPU is utime+stime of a process (all threads), in clock ticks.
func procCPU(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may contain spaces
	if i < 0 {
		return 0, fmt.Errorf("odd /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return u + st, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every
// Linux architecture Go runs on.
const clockTicks = 100

// procSchedNS sums the on-CPU nanoseconds of every live thread of pid from
// /proc/<pid>/task/*/schedstat: finer than clock ticks, but blind to
// threads that exited (Go rarely ends threads).
func procSchedNS(pid int) (int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += n
		}
	}
	return sum, nil
}

// procStatusKB reads a kB field (VmRSS, VmHWM) of /proc/<pid>/status.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// ---- ZooKeeper per connection ----

// consEntry is one client connection as the server's "cons" command lists it.
type consEntry struct {
	Recved, Sent int64
	TimeoutMS    int64
}

var consRE = regexp.MustCompile(`recved=(\d+),sent=(\d+),sid=0x([0-9a-f]+).*?,to=(\d+)`)

// cons maps session id to the server's packet counters for it.
func cons(addr string) (map[int64]consEntry, error) {
	out, err := zktest.FourLetter(addr, "cons")
	if err != nil {
		return nil, err
	}
	m := map[int64]consEntry{}
	for _, line := range strings.Split(out, "\n") {
		g := consRE.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		sid, err := strconv.ParseUint(g[3], 16, 64)
		if err != nil {
			continue
		}
		r, _ := strconv.ParseInt(g[1], 10, 64)
		s, _ := strconv.ParseInt(g[2], 10, 64)
		to, _ := strconv.ParseInt(g[4], 10, 64)
		m[int64(sid)] = consEntry{Recved: r, Sent: s, TimeoutMS: to}
	}
	return m, nil
}

// memberSession is the session id of a node's daemon: the owner of its
// ephemeral member znode.
func (c *cluster) memberSession(n *clustertest.Node) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.zc.Session(ctx)
	if err != nil {
		return 0, err
	}
	ok, st, err := s.Exists(ctx, layout.Member(n.ID))
	if err != nil {
		return 0, err
	}
	if !ok || st.EphemeralOwner == 0 {
		return 0, fmt.Errorf("%s has no member znode", n.ID)
	}
	return st.EphemeralOwner, nil
}

// keepLogs copies every node's failoverd.log to $BENCH_KEEP_LOGS/<bench>/
// when that is set: the daemons' debug logs time each step of a run.
func keepLogs(b *testing.B, c *clustertest.Cluster) {
	dir := os.Getenv("BENCH_KEEP_LOGS")
	if dir == "" {
		return
	}
	dst := filepath.Join(dir, strings.ReplaceAll(b.Name(), "/", "_"))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		b.Logf("keeping the logs: %v", err)
		return
	}
	for _, n := range c.Nodes {
		data, err := os.ReadFile(filepath.Join(c.Dir, n.ID, "failoverd.log"))
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, n.ID+".log"), data, 0o644)
		}
		if err != nil {
			b.Logf("keeping %s's log: %v", n.ID, err)
		}
	}
}
