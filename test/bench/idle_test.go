package bench

// Idle load: what one failoverd cluster costs its coordination service
// while nothing happens, at production timing, per backend, counted by the
// servers themselves (not by the daemons).

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/promtext"
	"github.com/failoverd/failoverd/test/zktest"
)

const scIdle = "idle load per failoverd cluster (3 daemons; runs = seconds watched)"

// BenchmarkIdleLoad runs a cluster of 3 daemons at production timing and
// counts, for BENCH_IDLE (default 60s), the requests and writes its
// coordination service receives, then stops the daemons and counts the
// same for half as long (at most 30s) with none: the difference is the
// cluster's own load.
//
// Production timing: the daemons' documented defaults (health 1s, fall 3,
// info log) and, on ZooKeeper, a 3-server ensemble with tickTime 2s and
// session_timeout 5s without tick_time in the configs (the default
// config); on etcd, a 3-member etcdtest cluster (etcd's default heartbeat
// and election timeout) and lease_ttl 5s (BENCH_ETCD_TTL).
//
// Counted by the servers:
//   - ZooKeeper: requests = the sum over the servers of mntr's
//     zk_packets_received (every client packet, pings included); writes =
//     the advance of the zxid (srvr), one per transaction (create, delete,
//     setData, multi, session create and close).
//   - etcd: requests = the sum over the members of
//     grpc_server_msg_received_total (a unary call is one message, every
//     keepalive or watch request on a stream one more), less one per
//     stream that ended (etcd's interceptor counts a stream's last
//     receive, the client's half-close or cancel, as a message: a
//     keepalive on a stream of its own, as the daemon sends them, counts
//     two), by method; writes
//     = the advance of the leader's etcd_server_proposals_committed_total
//     (raft entries: puts, deletes, transactions, lease grants and
//     revokes; keepalives are not raft writes) and of the store's revision
//     (etcd_debugging_mvcc_current_revision, the KV changes only).
//
// BENCH_TAKEOVER=1 turns election.take_over_at_deadline on (ZooKeeper),
// BENCH_FENCE_FIRST=1 election.fence_first (both backends; the shell fence
// marked proving), and BENCH_RENEW_INTERVAL (a duration) sets
// election.renew_interval (on ZooKeeper validation refuses anything but
// the derived tickTime/2 + 5%: run it with BENCH_BACKEND=etcd).
func BenchmarkIdleLoad(b *testing.B) {
	forEachBackend(b, idleLoad)
}

func idleLoad(b *testing.B, backend string) {
	idle := envDuration("BENCH_IDLE", 60*time.Second)
	base := min(idle/2, 30*time.Second)
	o := clustertest.Options{Backend: backend, EtcdLeaseTTL: etcdLeaseTTL()}
	if backend != clustertest.BackendEtcd {
		o = clustertest.Options{ZooKeepers: 3, ZKTickTime: 2 * time.Second, SessionTimeout: 5 * time.Second, TickTimeUnknown: true}
		if os.Getenv("BENCH_TAKEOVER") != "" { // election.take_over_at_deadline
			o.ElectionYAML = "  take_over_at_deadline: true\n"
		}
	}
	var suffix string // the options set, for the result's name
	if strings.Contains(o.ElectionYAML, "take_over_at_deadline") {
		suffix += ", take_over_at_deadline"
	}
	if os.Getenv("BENCH_FENCE_FIRST") != "" {
		o.ElectionYAML += "  fence_first: true\n"
		o.ShellProves = true
		suffix += ", fence_first"
	}
	if v := os.Getenv("BENCH_RENEW_INTERVAL"); v != "" {
		o.ElectionYAML += "  renew_interval: " + v + "\n"
		suffix += ", renew_interval " + v
	}
	c := startCluster(b, o)
	defaults := footprintConfigs[1]
	for _, n := range c.Nodes {
		cfg, err := os.ReadFile(n.Config)
		if err != nil {
			b.Fatal(err)
		}
		changed := defaults.rewrite(string(cfg))
		if changed == string(cfg) {
			b.Fatal("config rewrite changed nothing (clustertest's config format moved?)")
		}
		if err := os.WriteFile(n.Config, []byte(changed), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// Restart every daemon on the new config, standbys first.
	for _, leaderLast := range []bool{false, true} {
		for _, n := range c.Nodes {
			if s, _ := n.Status(); (s.State == "leader") == leaderLast {
				n.Kill(syscall.SIGTERM)
				n.Start()
			}
		}
	}
	c.ready(120 * time.Second)
	time.Sleep(envDuration("BENCH_SETTLE", 5*time.Second))
	// From here on only the daemons talk to the servers.
	if c.zc != nil {
		c.zc.Close()
	}
	if c.ec != nil {
		c.ec.Close()
	}
	time.Sleep(time.Second)
	snap := func() idleCounters {
		s, err := c.idleCounters()
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	s0 := snap()
	time.Sleep(idle)
	s1 := snap()
	for _, n := range c.Nodes {
		if !n.Running() {
			b.Fatalf("%s exited during the idle window", n.ID)
		}
	}
	load := loadAvg()
	for _, n := range c.Nodes {
		n.Kill(syscall.SIGTERM)
	}
	time.Sleep(3 * time.Second) // sessions closed, leases revoked
	s2 := snap()
	time.Sleep(base)
	s3 := snap()

	on, off := s1.Sub(s0).per(s1.at.Sub(s0.at)), s3.Sub(s2).per(s3.at.Sub(s2.at))
	res := Result{Backend: backend, Scenario: scIdle, Name: "3 daemons idle, production timing", Runs: int(s1.at.Sub(s0.at).Seconds())}
	res.Extra = map[string]float64{
		"req_per_s":           on.requests - off.requests,
		"writes_per_s":        on.writes - off.writes,
		"req_per_s_raw":       on.requests,
		"writes_per_s_raw":    on.writes,
		"req_per_s_baseline":  off.requests,
		"writes_per_s_base":   off.writes,
		"baseline_s":          s3.at.Sub(s2.at).Seconds(),
		"req_per_s_per_node":  (on.requests - off.requests) / float64(len(c.Nodes)),
		"kv_revisions_per_s":  on.revisions - off.revisions,
		"loadavg_during_idle": load,
	}
	for _, m := range sortedKeys(on.byMethod) {
		if v := on.byMethod[m] - off.byMethod[m]; v != 0 {
			res.Extra["req_per_s_"+m] = v
		}
	}
	if backend == clustertest.BackendEtcd {
		res.Name = fmt.Sprintf("3 daemons idle, lease_ttl %v, health 1s", c.Opts.EtcdLeaseTTL)
		res.Notes = "requests: Σ members' grpc_server_msg_received_total less one per stream that ended; writes: the leader's etcd_server_proposals_committed_total; net of a window without daemons; " + c.desc()
	} else {
		res.Name = "3 daemons idle, session 5s, tick_time unset, health 1s"
		res.Notes = "requests: Σ servers' mntr zk_packets_received (pings included); writes: zxid advance; net of a window without daemons; " + c.desc()
	}
	res.Name += suffix
	record(b, res)
}

// idleCounters is one reading of a coordination service's counters.
type idleCounters struct {
	at        time.Time
	requests  float64
	writes    float64
	revisions float64            // etcd: the store's revision
	byMethod  map[string]float64 // etcd: requests by gRPC method
}

func (a idleCounters) Sub(b idleCounters) idleCounters {
	d := idleCounters{at: a.at, requests: a.requests - b.requests, writes: a.writes - b.writes, revisions: a.revisions - b.revisions, byMethod: map[string]float64{}}
	for k, v := range a.byMethod {
		d.byMethod[k] = v - b.byMethod[k]
	}
	return d
}

// per turns the differences into rates over d.
func (a idleCounters) per(d time.Duration) idleCounters {
	s := d.Seconds()
	r := idleCounters{requests: a.requests / s, writes: a.writes / s, revisions: a.revisions / s, byMethod: map[string]float64{}}
	for k, v := range a.byMethod {
		r.byMethod[k] = v / s
	}
	return r
}

func (c *cluster) idleCounters() (idleCounters, error) {
	out := idleCounters{at: time.Now(), byMethod: map[string]float64{}}
	if c.Etcd != nil {
		var leaderCommitted float64
		leaders := 0
		version, _ := c.Etcd.Server().Version()
		for _, m := range c.Etcd.Members {
			mt, err := promtext.Scrape("http://" + m.ClientAddr() + "/metrics")
			if err != nil {
				return out, err
			}
			for _, k := range []string{"etcd_server_is_leader", "etcd_server_proposals_committed_total", "etcd_debugging_mvcc_current_revision", "grpc_server_msg_received_total"} {
				if _, ok := mt[k]; !ok {
					return out, fmt.Errorf("member %s exports no %s", m.Name, k)
				}
			}
			for k, v := range mt {
				if meth, ok := strings.CutPrefix(k, "grpc_server_msg_received_total|"); ok {
					// etcd 3.5+ counts a stream's last receive (the
					// client's half-close read as EOF, or its cancel)
					// as a message received: a keepalive on a stream of
					// its own is two. Each stream that ended is one
					// less request. (etcd 3.4's interceptor counts
					// only the messages.)
					if !strings.HasPrefix(version, "3.4.") {
						v -= mt["stream_ended|"+meth]
					}
					out.requests += v
					out.byMethod[meth] += v
				}
			}
			if mt["etcd_server_is_leader"] == 1 {
				leaders++
				leaderCommitted = mt["etcd_server_proposals_committed_total"]
			}
			out.revisions = max(out.revisions, mt["etcd_debugging_mvcc_current_revision"])
		}
		if leaders != 1 {
			return out, fmt.Errorf("%d etcd members say they lead", leaders)
		}
		out.writes = leaderCommitted
		return out, nil
	}
	for _, s := range c.ZK.Servers {
		m, err := zktest.Mntr(s.Addr())
		if err != nil {
			return out, err
		}
		v, err := strconv.ParseFloat(m["zk_packets_received"], 64)
		if err != nil {
			return out, fmt.Errorf("mntr of %s: zk_packets_received %q", s.Addr(), m["zk_packets_received"])
		}
		out.requests += v
		srvr, err := zktest.FourLetter(s.Addr(), "srvr")
		if err != nil {
			return out, err
		}
		g := zxidRE.FindStringSubmatch(srvr)
		if g == nil {
			return out, fmt.Errorf("srvr of %s: no zxid", s.Addr())
		}
		z, _ := strconv.ParseUint(g[1], 16, 64)
		out.writes = max(out.writes, float64(z&0xffffffff)) // the counter within the epoch
	}
	return out, nil
}

var zxidRE = regexp.MustCompile(`Zxid: 0x([0-9a-f]+)`)
