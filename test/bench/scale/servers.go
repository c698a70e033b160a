//go:build scale

package scale

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/etcdtest"
	"github.com/failoverd/failoverd/test/promtext"
	"github.com/failoverd/failoverd/test/zktest"
)

// ensemble is the coordination service the driver started: a 3-server
// ZooKeeper ensemble or a 3-member etcd cluster, as child processes.
type ensemble struct {
	backend string
	zk      *zktest.Cluster
	etcd    *etcdtest.Cluster
	comm    string // the servers' process name in /proc: java or etcd
	desc    string
	version string // etcd's, read once by serverRequests
}

func (e *ensemble) servers() []string {
	if e.etcd != nil {
		return e.etcd.Endpoints()
	}
	return e.zk.Addrs()
}

func (e *ensemble) clientPorts() map[int]bool {
	out := map[int]bool{}
	if e.etcd != nil {
		for _, m := range e.etcd.Members {
			out[m.ClientPort] = true
		}
	} else {
		for _, s := range e.zk.Servers {
			out[s.ClientPort] = true
		}
	}
	return out
}

// pids are the server processes: this process's children named comm.
func (e *ensemble) pids() []int {
	me := os.Getpid()
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.ppid != me || st.comm != e.comm {
			continue
		}
		out = append(out, pid)
	}
	return out
}

type procStat struct {
	comm       string
	ppid       int
	cpuSeconds float64 // utime + stime
}

// clkTck is USER_HZ, 100 on every Linux this runs on.
const clkTck = 100

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return procStat{}, fmt.Errorf("stat of %d: %q", pid, s)
	}
	f := strings.Fields(s[j+2:]) // from field 3 (state)
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("stat of %d: short", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return procStat{comm: s[i+1 : j], ppid: ppid, cpuSeconds: (ut + stime) / clkTck}, nil
}

// rssMB is a process's resident set in MiB.
func rssMB(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// established counts the established TCP connections to the given ports
// (server side: a local port among them), over loopback IPv4.
func established(ports map[int]bool) int {
	var lines []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} { // Java listens on IPv6 sockets
		b, err := os.ReadFile(f)
		if err == nil {
			lines = append(lines, strings.Split(string(b), "\n")[1:]...)
		}
	}
	n := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 4 || f[3] != "01" {
			continue
		}
		_, port, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseInt(port, 16, 32)
		if err == nil && ports[int(p)] {
			n++
		}
	}
	return n
}

// counters is one reading of the servers' cumulative counters and their
// current gauges.
type counters struct {
	at       time.Time
	cpu      float64 // Σ servers' CPU-seconds
	requests float64
	writes   float64
	byMethod map[string]float64 // etcd only

	// gauges
	watches     float64 // ZooKeeper: Σ zk_watch_count; etcd: Σ watchers (keys or ranges watched)
	watchers    float64 // etcd: Σ watch streams; ZooKeeper: zk_watch_count again
	connections int
	rssMB       float64
	ephemerals  float64 // ZooKeeper only
	leases      float64 // etcd only: leases granted less revoked and expired since the start (approximate)
	driverCPU   float64 // this process's CPU-seconds
}

var zxidRE = regexp.MustCompile(`Zxid: 0x([0-9a-f]+)`)

func (e *ensemble) read() (counters, error) {
	c := counters{at: time.Now(), byMethod: map[string]float64{}}
	for _, pid := range e.pids() {
		st, err := readStat(pid)
		if err != nil {
			return c, err
		}
		c.cpu += st.cpuSeconds
		c.rssMB += rssMB(pid)
	}
	if me, err := readStat(os.Getpid()); err == nil {
		c.driverCPU = me.cpuSeconds
	}
	c.connections = established(e.clientPorts())
	if e.etcd != nil {
		version, _ := e.etcd.Server().Version()
		leaders := 0
		for _, m := range e.etcd.Members {
			mt, err := promtext.Scrape("http://" + m.ClientAddr() + "/metrics")
			if err != nil {
				return c, err
			}
			for k, v := range mt {
				if meth, ok := strings.CutPrefix(k, "grpc_server_msg_received_total|"); ok {
					if !strings.HasPrefix(version, "3.4.") {
						v -= mt["stream_ended|"+meth]
					}
					c.requests += v
					c.byMethod[meth] += v
				}
			}
			c.watches += mt["etcd_debugging_mvcc_watcher_total"]
			c.watchers += mt["etcd_debugging_mvcc_watch_stream_total"]
			if mt["etcd_server_is_leader"] == 1 {
				leaders++
				c.writes = mt["etcd_server_proposals_committed_total"]
				c.leases = mt["etcd_debugging_lease_granted_total"] - mt["etcd_debugging_lease_revoked_total"]
			}
		}
		if leaders != 1 {
			return c, fmt.Errorf("%d etcd members say they lead", leaders)
		}
		return c, nil
	}
	for _, s := range e.zk.Servers {
		m, err := zktest.Mntr(s.Addr())
		if err != nil {
			return c, err
		}
		v, err := strconv.ParseFloat(m["zk_packets_received"], 64)
		if err != nil {
			return c, fmt.Errorf("mntr of %s: zk_packets_received %q", s.Addr(), m["zk_packets_received"])
		}
		c.requests += v
		w, _ := strconv.ParseFloat(m["zk_watch_count"], 64)
		c.watches += w
		c.watchers += w
		if eph, err := strconv.ParseFloat(m["zk_ephemerals_count"], 64); err == nil {
			c.ephemerals = max(c.ephemerals, eph)
		}
		srvr, err := zktest.FourLetter(s.Addr(), "srvr")
		if err != nil {
			return c, err
		}
		g := zxidRE.FindStringSubmatch(srvr)
		if g == nil {
			return c, fmt.Errorf("srvr of %s: no zxid", s.Addr())
		}
		z, _ := strconv.ParseUint(g[1], 16, 64)
		c.writes = max(c.writes, float64(z&0xffffffff)) // the counter within the epoch
	}
	return c, nil
}

// size is how many servers the ensemble has.
func (e *ensemble) size() int {
	if e.etcd != nil {
		return len(e.etcd.Members)
	}
	return len(e.zk.Servers)
}

// serverName is server i's name: zk1..zk3 or etcd's m0..m2.
func (e *ensemble) serverName(i int) string {
	if e.etcd != nil {
		return e.etcd.Members[i].Name
	}
	return fmt.Sprintf("zk%d", e.zk.Servers[i].ID)
}

// leader is the index of the coordination service's leader: the
// ZooKeeper server whose srvr says "Mode: leader", the etcd member whose
// status names itself leader (IsLeader). It fails the test when there is
// none within 30 s.
func (e *ensemble) leader(t *testing.T) int {
	t.Helper()
	if e.etcd != nil {
		return e.etcd.Leader()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for i, s := range e.zk.Servers {
			if !e.zk.Running(i) {
				continue
			}
			if m, _ := zktest.Mode(s.Addr()); m == "leader" {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no ZooKeeper server says it leads")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// zkPid is ZooKeeper server i's process (0: not running): the java child
// whose command line ends in its zoo.cfg.
func (e *ensemble) zkPid(i int) int {
	suffix := fmt.Sprintf("/zk%d/zoo.cfg", e.zk.Servers[i].ID)
	for _, pid := range e.pids() {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if strings.HasSuffix(args[len(args)-1], suffix) {
			return pid
		}
	}
	return 0
}

// exited reports whether pid has exited (gone, or a zombie not yet reaped).
func exited(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	return j < 0 || j+2 >= len(s) || s[j+2] == 'Z' || s[j+2] == 'X'
}

// stopServer stops server i as its service manager would: SIGTERM and
// waiting up to 10 s for it to exit (etcd: a leader hands its leadership
// over first; ZooKeeper: the JVM's shutdown), then SIGKILL; or SIGKILL at
// once (kill true), as a crash.
func (e *ensemble) stopServer(i int, kill bool) {
	if e.etcd != nil {
		if kill {
			e.etcd.Kill(i)
		} else {
			e.etcd.Stop(i)
		}
		return
	}
	if !kill {
		if pid := e.zkPid(i); pid != 0 {
			syscall.Kill(pid, syscall.SIGTERM)
			for end := time.Now().Add(10 * time.Second); !exited(pid) && time.Now().Before(end); {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	e.zk.Stop(i) // SIGKILL to what is left; forgets the process
}

// startServer starts server i again with its data and waits until every
// running server serves: ZooKeeper: each answers srvr with a mode (it is
// in a quorum with a leader); etcd: each answers a linearizable read.
func (e *ensemble) startServer(i int) {
	if e.etcd != nil {
		e.etcd.StartMember(i)
	} else {
		e.zk.Restart(i)
	}
	if err := e.pin(); err != nil {
		fmt.Fprintf(os.Stderr, "pinning the restarted server: %v\n", err)
	}
}

// serverRequests is server i's request counter, as read counts it:
// ZooKeeper's zk_packets_received, etcd's gRPC messages received less one
// per ended stream. It starts again from 0 when the server restarts.
func (e *ensemble) serverRequests(i int) (float64, error) {
	if e.etcd != nil {
		mt, err := promtext.Scrape("http://" + e.etcd.Members[i].ClientAddr() + "/metrics")
		if err != nil {
			return 0, err
		}
		if e.version == "" {
			e.version, _ = e.etcd.Server().Version()
		}
		version, sum := e.version, 0.0
		for k, v := range mt {
			if meth, ok := strings.CutPrefix(k, "grpc_server_msg_received_total|"); ok {
				if !strings.HasPrefix(version, "3.4.") {
					v -= mt["stream_ended|"+meth]
				}
				sum += v
			}
		}
		return sum, nil
	}
	m, err := zktest.Mntr(e.zk.Servers[i].Addr())
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(m["zk_packets_received"], 64)
}

// rates is what happened between two readings, per second, with the
// gauges of the later one.
type rates struct {
	Seconds        float64            `json:"seconds"`
	CPUPerSec      float64            `json:"server_cpu_seconds_per_second"`
	DriverCPU      float64            `json:"driver_cpu_seconds_per_second"`
	RequestsPerSec float64            `json:"requests_per_second"`
	WritesPerSec   float64            `json:"writes_per_second"`
	ByMethod       map[string]float64 `json:"requests_per_second_by_method,omitempty"`
	Watches        float64            `json:"watches"`
	WatchStreams   float64            `json:"watch_streams,omitempty"`
	Connections    int                `json:"connections"`
	RSSMB          float64            `json:"server_rss_mib"`
	Ephemerals     float64            `json:"ephemerals,omitempty"`
}

func between(a, b counters) rates {
	s := b.at.Sub(a.at).Seconds()
	r := rates{Seconds: round(s, 1), CPUPerSec: round((b.cpu-a.cpu)/s, 4), DriverCPU: round((b.driverCPU-a.driverCPU)/s, 4),
		RequestsPerSec: round((b.requests-a.requests)/s, 2), WritesPerSec: round((b.writes-a.writes)/s, 2),
		Watches: b.watches, Connections: b.connections, RSSMB: round(b.rssMB, 1), Ephemerals: b.ephemerals}
	if b.watchers != b.watches {
		r.WatchStreams = b.watchers
	}
	if len(b.byMethod) > 0 {
		r.ByMethod = map[string]float64{}
		for k, v := range b.byMethod {
			if d := (v - a.byMethod[k]) / s; d > 0.005 {
				r.ByMethod[k] = round(d, 2)
			}
		}
	}
	return r
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	if v < 0 {
		return -float64(int64(-v*p+0.5)) / p
	}
	return float64(int64(v*p+0.5)) / p
}
