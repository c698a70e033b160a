package bench

// Footprint: one daemon's memory and CPU while nothing happens, as leader
// and as standby, and the ZooKeeper traffic it causes.

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/zktest"
)

// footprintConfig is one way to configure the daemons for the footprint run.
type footprintConfig struct {
	name    string
	session time.Duration
	rewrite func(string) string // applied to clustertest's node config
}

var footprintConfigs = []footprintConfig{
	{name: "clustertest config (health 200ms, session 2s, debug log)", session: 2 * time.Second},
	{name: "defaults (health 1s fall 3, session 5s, info log)", session: 5 * time.Second, rewrite: func(s string) string {
		// Back to the documented defaults: health interval and timeout 1s,
		// fall 3, log level info.
		r := strings.NewReplacer(
			"  interval: 200ms\n", "  interval: 1s\n",
			"  timeout: 500ms\n  rise: 2\n  fall: 2\n", "  timeout: 1s\n  rise: 2\n  fall: 3\n",
			"  level: debug\n", "  level: info\n",
		)
		return r.Replace(s)
	}},
}

// BenchmarkFootprint runs a two-node cluster per config (a leader and a
// standby), lets it settle, and then watches both daemons for
// BENCH_IDLE (default 60s), all configs at the same time:
//   - RSS: VmRSS from /proc/<pid>/status at the end (and the peak, VmHWM);
//   - CPU: utime+stime from /proc/<pid>/stat (10 ms ticks) over the window,
//     and the same from the threads' schedstat (nanoseconds);
//   - ZooKeeper requests per second: the server's per-connection packet
//     counter (cons "recved", pings included) for the daemon's own session,
//     so it is that daemon's traffic alone; the server-wide mntr
//     zk_packets_received delta divided by the two daemons is given too.
func BenchmarkFootprint(b *testing.B) {
	idle := envDuration("BENCH_IDLE", 60*time.Second)
	type watched struct {
		cfg       footprintConfig
		c         *cluster
		role      string
		n         *clustertest.Node
		pid       int
		sid       int64
		cpu0      int64
		sched0    int64
		recv0     int64
		mntr0     map[string]string
		maxRSSkB  int64
		lastRSSkB int64
	}
	var ws []*watched
	for _, fc := range footprintConfigs {
		c := startCluster(b, clustertest.Options{Nodes: 2, SessionTimeout: fc.session})
		if fc.rewrite != nil {
			for _, n := range c.Nodes {
				cfg, err := os.ReadFile(n.Config)
				if err != nil {
					b.Fatal(err)
				}
				changed := fc.rewrite(string(cfg))
				if changed == string(cfg) {
					b.Fatalf("%s: config rewrite changed nothing (clustertest's config format moved?)", fc.name)
				}
				if err := os.WriteFile(n.Config, []byte(changed), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			for _, n := range c.Nodes { // standby first, so leadership moves once
				if s, _ := n.Status(); s.State != "leader" {
					n.Kill(syscall.SIGTERM)
					n.Start()
				}
			}
			for _, n := range c.Nodes {
				if s, _ := n.Status(); s.State == "leader" {
					n.Kill(syscall.SIGTERM)
					n.Start()
				}
			}
		}
		leader := c.ready(60 * time.Second)
		for _, n := range c.Nodes {
			role := "standby"
			if n == leader {
				role = "leader"
			}
			ws = append(ws, &watched{cfg: fc, c: c, role: role, n: n, pid: n.Pid()})
		}
	}
	time.Sleep(envDuration("BENCH_SETTLE", 5*time.Second)) // startup churn, first GCs
	for _, w := range ws {
		var err error
		if w.sid, err = w.c.memberSession(w.n); err != nil {
			b.Fatal(err)
		}
	}
	for _, w := range ws {
		w.c.zc.Close() // from here on, only the daemons talk to the servers
	}
	for _, w := range ws {
		var err error
		if w.cpu0, err = procCPU(w.pid); err != nil {
			b.Fatal(err)
		}
		w.sched0, _ = procSchedNS(w.pid)
		m, err := cons(w.c.ZK.Servers[0].Addr())
		if err != nil {
			b.Fatal(err)
		}
		e, ok := m[w.sid]
		if !ok {
			b.Fatalf("%s: session 0x%x not in cons", w.n.ID, w.sid)
		}
		w.recv0 = e.Recved
		w.mntr0, _ = zktest.Mntr(w.c.ZK.Servers[0].Addr())
	}
	t0 := time.Now()
	for time.Since(t0) < idle {
		time.Sleep(time.Second)
		for _, w := range ws {
			if kb, err := procStatusKB(w.pid, "VmRSS"); err == nil {
				w.lastRSSkB = kb
				w.maxRSSkB = max(w.maxRSSkB, kb)
			}
		}
	}
	for _, w := range ws {
		el := time.Since(t0).Seconds()
		cpu1, err := procCPU(w.pid)
		if err != nil {
			b.Fatalf("%s %s: %v (did the daemon die?)", w.cfg.name, w.n.ID, err)
		}
		sched1, _ := procSchedNS(w.pid)
		hwm, _ := procStatusKB(w.pid, "VmHWM")
		m, _ := cons(w.c.ZK.Servers[0].Addr())
		mntr1, _ := zktest.Mntr(w.c.ZK.Servers[0].Addr())
		res := Result{Scenario: scFootprint, Name: fmt.Sprintf("%s, %s", w.role, w.cfg.name), Runs: int(el)}
		res.Extra = map[string]float64{
			"rss_mib":           float64(w.lastRSSkB) / 1024,
			"rss_max_mib":       float64(w.maxRSSkB) / 1024,
			"vmhwm_mib":         float64(hwm) / 1024,
			"cpu_pct":           100 * float64(cpu1-w.cpu0) / clockTicks / el,
			"cpu_pct_schedstat": 100 * float64(sched1-w.sched0) / 1e9 / el,
		}
		if e, ok := m[w.sid]; ok {
			res.Extra["zk_req_per_s"] = float64(e.Recved-w.recv0) / el
		}
		if v, ok := mntrDelta(w.mntr0, mntr1, "zk_packets_received"); ok {
			res.Extra["zk_server_pkts_per_s_per_node"] = v / el / 2
		}
		res.Notes = "zk_req_per_s: this daemon's session (cons recved, pings included)"
		record(b, res)
	}
}
