//go:build scale

// Package scale is make bench-scale: one process runs N failoverd clusters
// of 3 members each, every member the real backend code the daemon runs
// (its elector with lease and renewals, member and known-member records,
// join checks, the leader watch the controller and the admin API's leader
// view share (the view's freshness sync runs only when
// asked, and the driver never asks), the failover and pause watches, the
// leader's member watch), built with the same
// constructors, against a 3-server ZooKeeper ensemble and a 3-member etcd
// cluster it starts on this machine, and reads what the coordination
// servers spend (their CPU from /proc, requests and writes from mntr and
// /metrics, watches, connections, memory). The controller's decisions are
// replaced by a minimal loop (member.go); hooks do not exist.
//
//	SCALE_N=1,100 SCALE_BACKEND=zookeeper,etcd SCALE_IDLE=60s go test -tags scale -run TestScale -v -timeout 60m ./test/bench/scale
//
// SCALE_KILL=60s adds a phase that crashes the leaders of 1% of the
// clusters every 30 s; SCALE_RESTART=all (or a list of follower, leader,
// rolling) adds the coordination-server restart phases and their blast
// radius (restart.go; SCALE_RESTART_SIGNAL=KILL, SCALE_RESTART_DOWN,
// SCALE_RESTART_TAIL); SCALE_RAMP=30s starts the clusters spread over
// that time instead of all at once (the start then includes it);
// SCALE_ZK_SESSION and SCALE_ZK_TICK set zookeeper.session_timeout and
// zookeeper.tick_time, SCALE_WARM_STANDBY=0 election.warm_standby: false
// (the calibration daemons' configs too);
// SCALE_LOG=file keeps the backend code's warnings.
// Results: SCALE_OUT (default test/bench/results/scale-<date>.json).
package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
	"github.com/failoverd/failoverd/test/zktest"
)

func envDuration(k string, def time.Duration) time.Duration {
	if v := os.Getenv(k); v != "" {
		d, err := time.ParseDuration(v)
		if err == nil {
			return d
		}
	}
	return def
}

func envList(k, def string) []string {
	v := os.Getenv(k)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

// Result is one N on one backend.
type Result struct {
	Backend  string `json:"backend"`
	Clusters int    `json:"clusters"`
	Members  int    `json:"members"`
	// StartSeconds: from the first member started to every cluster's
	// three leader views naming one leader.
	StartSeconds float64 `json:"start_seconds"`
	StartedAll   bool    `json:"started_all"`
	// ClustersLed: when the start did not settle, how many clusters had
	// an agreed leader at its deadline; Broke says what broke.
	ClustersLed int    `json:"clusters_led,omitempty"`
	Broke       string `json:"broke,omitempty"`
	// Baseline: the servers with no member running, just before.
	Baseline rates `json:"baseline"`
	// Idle: the N clusters at rest.
	Idle rates `json:"idle"`
	// PerCluster: (Idle - Baseline) / Clusters for the rates; gauges
	// divided as they are (the baseline holds no session).
	PerCluster perCluster `json:"per_cluster"`
	// Terms: won during the whole run; lost while nothing was injected
	// (every one unexplained in the idle phase).
	TermsWon          int64   `json:"terms_won"`
	TermsLostNoFault  int64   `json:"terms_lost_no_fault"`
	Errors            int64   `json:"errors"`
	LastError         string  `json:"last_error,omitempty"`
	MinLeaseMarginMS  float64 `json:"min_lease_margin_ms"`
	P01LeaseMarginMS  float64 `json:"p01_lease_margin_ms"`
	MedianMarginMS    float64 `json:"median_lease_margin_ms"`
	LeaseMarginSample int     `json:"lease_margin_samples"`
	// Busy: every member's position moving every second (SCALE_BUSY
	// long; absent: not run).
	Busy *busyResult `json:"busy_phase,omitempty"`
	// Kill: the leaders of 1% of the clusters (at least one) crashed
	// every 30 s (SCALE_KILL long; absent: not run).
	Kill *killResult `json:"kill_phase,omitempty"`
	// MassKill: the leaders of 10% of the clusters crashed at once
	// (SCALE_MASS=1; absent: not run).
	MassKill *killResult `json:"mass_kill_phase,omitempty"`
	// Restarts: the coordination servers restarted, one phase each
	// (SCALE_RESTART; absent: not run).
	Restarts   []*restartResult `json:"restart_phases,omitempty"`
	Load1Start float64          `json:"load1_start"`
	Load1End   float64          `json:"load1_end"`
	Server     string           `json:"server"`
}

type perCluster struct {
	CPUMilliPerSec float64 `json:"server_cpu_ms_per_second"`
	RequestsPerSec float64 `json:"requests_per_second"`
	WritesPerSec   float64 `json:"writes_per_second"`
	Watches        float64 `json:"watches"`
	Connections    float64 `json:"connections"`
	RSSMiB         float64 `json:"server_rss_mib"`
	DriverCPUMs    float64 `json:"driver_cpu_ms_per_second"`
}

// Report is the results file.
type Report struct {
	Generated string `json:"generated"`
	Code      string `json:"code"`
	Machine   string `json:"machine"`
	Note      string `json:"note"`
	Idle      string `json:"idle_window"`
	Kill      string `json:"kill_window"`
	Restart   string `json:"restart_phases,omitempty"`
	Ramp      string `json:"start_ramp,omitempty"`
	Pin       string `json:"pinning"`
	// Calibration: three real daemons per backend, same servers, same
	// counting (SCALE_CALIBRATE=0: not run).
	Calibration map[string]*calibration `json:"calibration,omitempty"`
	Busy        string                  `json:"busy_window,omitempty"`
	Results     []Result                `json:"results"`
}

func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func TestScale(t *testing.T) {
	idle := envDuration("SCALE_IDLE", 60*time.Second)
	base := envDuration("SCALE_BASE", 15*time.Second)
	settle := envDuration("SCALE_SETTLE", 10*time.Second)
	kill := envDuration("SCALE_KILL", 0)
	ramp := envDuration("SCALE_RAMP", 0)
	po := phaseOpts{busy: envDuration("SCALE_BUSY", 0), mass: os.Getenv("SCALE_MASS") == "1"}
	phases, err := restartList(os.Getenv("SCALE_RESTART"))
	if err != nil {
		t.Fatal(err)
	}
	ro := restartOpts{phases: phases, kill: strings.EqualFold(strings.TrimPrefix(strings.ToUpper(os.Getenv("SCALE_RESTART_SIGNAL")), "SIG"), "KILL"),
		down: envDuration("SCALE_RESTART_DOWN", 5*time.Second), tail: envDuration("SCALE_RESTART_TAIL", 15*time.Second)}
	var ns []int
	for _, s := range envList("SCALE_N", "1,100") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			t.Fatalf("SCALE_N: %q", s)
		}
		ns = append(ns, n)
	}
	rep := Report{
		Generated: time.Now().UTC().Format(time.RFC3339),
		Code:      os.Getenv("SCALE_CODE"),
		Machine:   fmt.Sprintf("%d CPUs (shared with other test suites), %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version()),
		Note: "first figures: one driver process runs every member (3 per cluster) beside the servers on the same cores; " +
			"ZooKeeper: 3 servers, tickTime 2s, forceSync=no, session_timeout 5s; etcd: 3 members, heartbeat 100ms, election 1s, lease_ttl 5s; " +
			"requests: Σ servers' mntr zk_packets_received (pings included) / Σ members' grpc_server_msg_received_total less one per ended stream; " +
			"writes: zxid advance / the leader's etcd_server_proposals_committed_total; per cluster: net of the baseline window",
		Idle: idle.String(),
		Kill: kill.String(),
		Pin:  pinDesc(),
	}
	if po.busy > 0 {
		rep.Busy = po.busy.String()
	}
	for _, k := range []string{"SCALE_ZK_SESSION", "SCALE_ZK_TICK", "SCALE_WARM_STANDBY"} {
		if v := os.Getenv(k); v != "" {
			rep.Note += "; " + k + "=" + v
		}
	}
	if ramp > 0 {
		rep.Ramp = "the clusters started spread over " + ramp.String() + " (start_seconds includes it)"
	}
	if len(phases) > 0 {
		rep.Restart = fmt.Sprintf("%s, %s, down %v, watched until every cluster has a leader and %v more",
			strings.Join(phases, ", "), ro.signal(), ro.down, ro.tail)
	}
	for _, backend := range envList("SCALE_BACKEND", "zookeeper,etcd") {
		backend := strings.TrimSpace(backend)
		t.Run(backend, func(t *testing.T) {
			e := startEnsemble(t, backend)
			if err := e.pin(); err != nil {
				t.Fatal(err)
			}
			var cal *calibration
			if os.Getenv("SCALE_CALIBRATE") != "0" {
				cal = calibrate(t, e, base, settle, idle)
				if rep.Calibration == nil {
					rep.Calibration = map[string]*calibration{}
				}
				rep.Calibration[backend] = cal
				t.Logf("%s calibration, 3 real daemons: %.2f requests/s, %.3f writes/s, %.2f server CPU ms/s",
					backend, cal.RequestsPerSec, cal.WritesPerSec, cal.CPUMilliPerSec)
			}
			for _, n := range ns {
				r := runN(t, e, n, base, settle, idle, kill, ramp, ro, po)
				rep.Results = append(rep.Results, r)
				if cal != nil && cal.DriverRequests == 0 {
					cal.DriverRequests, cal.DriverWrites = r.PerCluster.RequestsPerSec, r.PerCluster.WritesPerSec
					cal.RequestsRatio = round(cal.DriverRequests/cal.RequestsPerSec, 3)
					if cal.WritesPerSec > 0 {
						cal.WritesRatio = round(cal.DriverWrites/cal.WritesPerSec, 3)
					}
					t.Logf("%s calibration: the driver's cluster at N=%d is %.2f× the daemons' requests and %.2f× their writes",
						backend, n, cal.RequestsRatio, cal.WritesRatio)
				}
				b, _ := json.MarshalIndent(r, "", "  ")
				t.Logf("%s N=%d:\n%s", backend, n, b)
			}
		})
	}
	out := os.Getenv("SCALE_OUT")
	if out == "" {
		out = filepath.Join("..", "results", "scale-"+time.Now().UTC().Format("2006-01-02")+".json")
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s", out)
	printTable(t, rep.Results)
}

func startEnsemble(t *testing.T, backend string) *ensemble {
	switch backend {
	case "zookeeper":
		zc := zktest.StartOpts(t, zktest.Options{Servers: 3, TickTime: 2 * time.Second})
		return &ensemble{backend: backend, zk: zc, comm: "java", desc: "ZooKeeper (Debian's zookeeper.jar), 3 servers, tickTime 2s"}
	case "etcd":
		ec := etcdtest.Start(t, etcdtest.Options{})
		v, _ := ec.Server().Version()
		return &ensemble{backend: backend, etcd: ec, comm: "etcd", desc: "etcd " + v + ", 3 members"}
	}
	t.Fatalf("SCALE_BACKEND: %q", backend)
	return nil
}

// phaseOpts are the optional phases besides the kill and restart ones.
type phaseOpts struct {
	busy time.Duration // the busy phase's length (0: none)
	mass bool          // 10% of the leaders crashed at once
}

func runN(t *testing.T, e *ensemble, n int, base, settle, idle, kill, ramp time.Duration, ro restartOpts, po phaseOpts) Result {
	r := Result{Backend: e.backend, Clusters: n, Members: 3 * n, Server: e.desc, Load1Start: load1()}
	// After a start that did not settle, the servers may stop answering:
	// what broke is recorded and the later phases are left out.
	read := func() counters {
		c, err := e.read()
		if err != nil {
			if r.StartedAll {
				t.Fatalf("reading the servers: %v", err)
			}
			r.Broke += "; reading the servers failed: " + err.Error()
		}
		return c
	}
	b0 := read()
	time.Sleep(base)
	r.Baseline = between(b0, read())

	st := &stats{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var clusters []*clusterRun
	prefix := fmt.Sprintf("s%d-%d", n, time.Now().Unix()%100000)
	start := time.Now()
	for i := range n {
		if i > 0 && ramp > 0 {
			time.Sleep(ramp / time.Duration(n))
		}
		cr := &clusterRun{name: fmt.Sprintf("%s-c%04d", prefix, i),
			cs: &clusterState{views: map[string]*cluster.Leader{}, agreed: make(chan struct{}), size: 3}}
		clusters = append(clusters, cr)
		for j := range 3 {
			cr.members = append(cr.members, startMember(t, ctx, &wg, e, cr, fmt.Sprintf("n%d", j+1), st))
		}
	}
	deadline := time.After(max(60*time.Second, time.Duration(n)*300*time.Millisecond))
	r.StartedAll = true
wait:
	for _, cr := range clusters {
		select {
		case <-cr.cs.agreed:
		case <-deadline:
			r.StartedAll = false
			break wait
		}
	}
	r.StartSeconds = round(time.Since(start).Seconds(), 1)
	if !r.StartedAll {
		left := 0
		for _, cr := range clusters {
			select {
			case <-cr.cs.agreed:
			default:
				left++
			}
		}
		r.ClustersLed = n - left
		r.Broke = fmt.Sprintf("the start: %d of %d clusters had no agreed leader after %.0fs", left, n, r.StartSeconds)
		t.Errorf("N=%d: %s", n, r.Broke)
	}
	time.Sleep(settle)
	lostBefore := st.termsLost.Load()
	i0 := read()
	time.Sleep(idle)
	i1 := read()
	r.Idle = between(i0, i1)
	r.TermsLostNoFault = st.termsLost.Load() - lostBefore
	r.TermsWon = st.wins.Load()
	r.Errors = st.errors.Load()
	st.mu.Lock()
	r.LastError = st.lastErr
	if ms := slices.Clone(st.margins); len(ms) > 0 {
		slices.Sort(ms)
		r.MinLeaseMarginMS = float64(ms[0].Milliseconds())
		r.P01LeaseMarginMS = float64(ms[len(ms)/100].Milliseconds())
		r.MedianMarginMS = float64(ms[len(ms)/2].Milliseconds())
		r.LeaseMarginSample = len(ms)
	}
	st.mu.Unlock()
	nf := float64(n)
	r.PerCluster = perCluster{
		CPUMilliPerSec: round(1000*(r.Idle.CPUPerSec-r.Baseline.CPUPerSec)/nf, 2),
		RequestsPerSec: round((r.Idle.RequestsPerSec-r.Baseline.RequestsPerSec)/nf, 2),
		WritesPerSec:   round((r.Idle.WritesPerSec-r.Baseline.WritesPerSec)/nf, 3),
		Watches:        round((r.Idle.Watches-r.Baseline.Watches)/nf, 1),
		Connections:    round(float64(r.Idle.Connections-r.Baseline.Connections)/nf, 1),
		RSSMiB:         round((r.Idle.RSSMB-r.Baseline.RSSMB)/nf, 3),
		DriverCPUMs:    round(1000*r.Idle.DriverCPU/nf, 2),
	}
	if !r.StartedAll {
		po, kill, ro.phases = phaseOpts{}, 0, nil // phases on an unsettled start measure nothing
	}
	if po.busy > 0 {
		r.Busy = busyPhase(clusters, st, po.busy, read)
		r.Busy.PerClusterReq = round((r.Busy.Rates.RequestsPerSec-r.Baseline.RequestsPerSec)/nf, 2)
		r.Busy.PerClusterWrites = round((r.Busy.Rates.WritesPerSec-r.Baseline.WritesPerSec)/nf, 3)
		t.Logf("%s N=%d busy: %.2f requests/s and %.3f writes/s per cluster, %d terms lost, smallest lease margin %.0f ms",
			e.backend, n, r.Busy.PerClusterReq, r.Busy.PerClusterWrites, r.Busy.TermsLost, r.Busy.MinLeaseMarginMS)
		time.Sleep(settle)
	}
	if kill > 0 {
		r.Kill = killPhase(t, ctx, &wg, e, clusters, st, kill, read)
		t.Logf("%s N=%d kill: %d killed, failover p50 %.0f ms, p99 %.0f ms, %d terms lost elsewhere",
			e.backend, n, r.Kill.Killed, r.Kill.FailoverP50MS, r.Kill.FailoverP99MS, r.Kill.TermsLostElsewhere)
		time.Sleep(settle)
	}
	if po.mass {
		r.MassKill = massKill(t, ctx, &wg, e, clusters, st, 15*time.Second, read)
		t.Logf("%s N=%d 10%% at once: %d killed, %d failovers seen, p50 %.0f ms, p99 %.0f ms, %d terms lost elsewhere",
			e.backend, n, r.MassKill.Killed, r.MassKill.Recovered, r.MassKill.FailoverP50MS, r.MassKill.FailoverP99MS, r.MassKill.TermsLostElsewhere)
		time.Sleep(settle)
	}
	for _, p := range ro.phases {
		rr := restartPhase(t, e, clusters, st, p, ro)
		r.Restarts = append(r.Restarts, rr)
		t.Logf("%s N=%d %s restart (%s): %d clusters lost their leader's term (%d terms), %d without a leader at some point, %d at the end",
			e.backend, n, p, rr.Signal, rr.ClustersLostTerm, rr.TermsLost, rr.ClustersLeaderless, rr.LeaderlessAtEnd)
	}
	r.Load1End = load1()
	cancel()
	wg.Wait()
	for _, cr := range clusters {
		for _, mr := range cr.members {
			mr.be.close()
		}
	}
	time.Sleep(2 * time.Second) // sessions closed, leases revoked
	return r
}

func printTable(t *testing.T, rs []Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| backend | N | server CPU s/s | req/s | writes/s | per cluster: req/s, writes/s | watches | conns | server RSS MiB | terms lost (no fault) | min lease margin ms | load |\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %.3f | %.1f | %.1f | %.2f, %.3f | %.0f | %d | %.0f | %d | %.0f | %.1f–%.1f |\n",
			r.Backend, r.Clusters, r.Idle.CPUPerSec, r.Idle.RequestsPerSec, r.Idle.WritesPerSec,
			r.PerCluster.RequestsPerSec, r.PerCluster.WritesPerSec, r.Idle.Watches, r.Idle.Connections, r.Idle.RSSMB,
			r.TermsLostNoFault, r.MinLeaseMarginMS, r.Load1Start, r.Load1End)
	}
	restarts := false
	for _, r := range rs {
		restarts = restarts || len(r.Restarts) > 0
	}
	if restarts {
		fmt.Fprintf(&b, "\n| backend | N | server restart | servers (role) | clusters that lost the leader's term | terms lost | clusters ever leaderless (at end) | all led again after s | longest leaderless ms | min lease margin ms | server req/s | server CPU s |\n")
		for _, r := range rs {
			for _, rr := range r.Restarts {
				var who []string
				for _, sr := range rr.Restarts {
					who = append(who, sr.Server+" ("+sr.Role+")")
				}
				fmt.Fprintf(&b, "| %s | %d | %s, %s | %s | %d of %d | %d | %d (%d) | %.2f | %.0f | %.0f | %.1f | %.2f |\n",
					r.Backend, r.Clusters, rr.Phase, rr.Signal, strings.Join(who, ", "), rr.ClustersLostTerm, r.Clusters, rr.TermsLost,
					rr.ClustersLeaderless, rr.LeaderlessAtEnd, rr.LedAgainSeconds, rr.LongestLeaderlessMS, rr.MinLeaseMarginMS,
					rr.ServerRequestsSec, rr.ServerCPUSeconds)
			}
		}
	}
	t.Log(b.String())
}

// clusterRun is one cluster's three members.
type clusterRun struct {
	mu      sync.Mutex // guards members (the kill phase replaces one)
	name    string
	cs      *clusterState
	members []*memberRun
}

type memberRun struct {
	id     string
	m      *member
	be     *backendConn
	cancel context.CancelFunc
}

func startMember(t *testing.T, ctx context.Context, wg *sync.WaitGroup, e *ensemble, cr *clusterRun, id string, st *stats) *memberRun {
	cfg := memberConfig(e.backend, cr.name, id, e.servers())
	inst := fmt.Sprintf("%s-%s-%d", cr.name, id, time.Now().UnixNano())
	be, err := open(cfg, inst)
	if err != nil {
		t.Fatalf("cluster %s member %s: %v", cr.name, id, err)
	}
	mctx, cancel := context.WithCancel(ctx)
	m := &member{cfg: cfg, instance: inst, be: be, st: st, cl: cr.cs, state: "standby", since: time.Now().UTC(), poke: make(chan struct{}, 1)}
	wg.Add(1)
	go func() { defer wg.Done(); m.run(mctx) }()
	return &memberRun{id: id, m: m, be: be, cancel: cancel}
}

type killResult struct {
	Phase     string  `json:"phase"`
	Seconds   float64 `json:"seconds"`
	Rounds    int     `json:"rounds"`
	Killed    int     `json:"leaders_killed"`
	Recovered int     `json:"failovers_seen"`
	// Failover: crash of the leader's member to both survivors' leader
	// views naming a new leader (ms).
	FailoverP50MS float64 `json:"failover_p50_ms"`
	FailoverP99MS float64 `json:"failover_p99_ms"`
	FailoverMaxMS float64 `json:"failover_max_ms"`
	// TermsLostElsewhere: terms lost in clusters nothing was done to.
	TermsLostElsewhere int64 `json:"terms_lost_no_fault"`
	Rates              rates `json:"rates"`
}

// crasher crashes leaders and times their clusters' failovers.
type crasher struct {
	t        *testing.T
	ctx      context.Context
	wg       *sync.WaitGroup // the members' goroutines
	e        *ensemble
	st       *stats
	mu       sync.Mutex
	times    []time.Duration
	pending  sync.WaitGroup
	hit      map[*clusterRun]bool
	killed   int
	clusters []*clusterRun
	lost0    map[*clusterRun]int64
}

func newCrasher(t *testing.T, ctx context.Context, wg *sync.WaitGroup, e *ensemble, clusters []*clusterRun, st *stats) *crasher {
	c := &crasher{t: t, ctx: ctx, wg: wg, e: e, st: st, hit: map[*clusterRun]bool{}, clusters: clusters, lost0: map[*clusterRun]int64{}}
	for _, cr := range clusters {
		c.lost0[cr] = cr.cs.lost.Load()
	}
	return c
}

// crash crashes cr's leader (its connections cut without closing its
// session or revoking its lease), waits in the background until both
// survivors' leader views name a successor at a later epoch, and starts
// the crashed member again (a new process, as systemd would: its old
// session or lease expires on its own meanwhile).
func (c *crasher) crash(cr *clusterRun) {
	c.hit[cr] = true
	var victim *memberRun
	var epoch int64
	cr.mu.Lock()
	members := slices.Clone(cr.members)
	cr.mu.Unlock()
	for _, mr := range members {
		if ep, ok := mr.m.leading(); ok {
			victim, epoch = mr, ep
		}
	}
	if victim == nil {
		c.t.Logf("cluster %s: no leader to kill", cr.name)
		return
	}
	c.killed++
	at := time.Now()
	victim.be.crash()
	victim.cancel()
	c.pending.Add(1)
	go func() {
		defer c.pending.Done()
		for time.Since(at) < 60*time.Second && c.ctx.Err() == nil {
			ok := true
			for _, mr := range members {
				if mr == victim {
					continue
				}
				if l := mr.m.cl.view(mr.id); l == nil || l.Epoch <= epoch || l.NodeID == victim.id {
					ok = false
				}
			}
			if ok {
				c.mu.Lock()
				c.times = append(c.times, time.Since(at))
				c.mu.Unlock()
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		back := startMember(c.t, c.ctx, c.wg, c.e, cr, victim.id, c.st)
		cr.mu.Lock()
		for i, mr := range cr.members {
			if mr == victim {
				cr.members[i] = back
			}
		}
		cr.mu.Unlock()
		go victim.be.close()
	}()
}

// result waits for every failover and sums the phase up.
func (c *crasher) result(res *killResult) {
	c.pending.Wait()
	res.Killed = c.killed
	res.Recovered = len(c.times)
	if n := len(c.times); n > 0 {
		slices.Sort(c.times)
		res.FailoverP50MS = float64(c.times[n/2].Milliseconds())
		res.FailoverP99MS = float64(c.times[min(n-1, n*99/100)].Milliseconds())
		res.FailoverMaxMS = float64(c.times[n-1].Milliseconds())
	}
	for _, cr := range c.clusters {
		if !c.hit[cr] {
			res.TermsLostElsewhere += cr.cs.lost.Load() - c.lost0[cr]
		}
	}
}

// killPhase crashes the leaders of 1% of the clusters (at least one)
// every 30 s for d, taking the clusters in turn.
func killPhase(t *testing.T, ctx context.Context, wg *sync.WaitGroup, e *ensemble, clusters []*clusterRun, st *stats, d time.Duration, read func() counters) *killResult {
	res := &killResult{Phase: "1% of the leaders crashed every 30 s"}
	c := newCrasher(t, ctx, wg, e, clusters, st)
	per := max(1, len(clusters)/100)
	c0 := read()
	end := time.Now().Add(d)
	next := 0
	for time.Now().Before(end) {
		res.Rounds++
		for range min(per, len(clusters)) {
			c.crash(clusters[next%len(clusters)])
			next++
		}
		sleep(ctx, min(30*time.Second, time.Until(end)))
	}
	c.result(res)
	res.Rates = between(c0, read())
	res.Seconds = res.Rates.Seconds
	return res
}

// massKill crashes the leaders of 10% of the clusters (at least one) at
// once and waits for every failover and tail more.
func massKill(t *testing.T, ctx context.Context, wg *sync.WaitGroup, e *ensemble, clusters []*clusterRun, st *stats, tail time.Duration, read func() counters) *killResult {
	res := &killResult{Phase: "10% of the leaders crashed at once", Rounds: 1}
	c := newCrasher(t, ctx, wg, e, clusters, st)
	c0 := read()
	step := 10 // every tenth cluster, spread over the run's start order
	for i := 0; i < len(clusters); i += step {
		c.crash(clusters[i])
	}
	c.result(res)
	sleep(ctx, tail)
	res.Rates = between(c0, read())
	res.Seconds = res.Rates.Seconds
	return res
}

// busyPhase runs d with every member's replication position moving every
// second (see busy) and returns the servers' rates, the terms lost and
// the smallest lease margin in it.
func busyPhase(clusters []*clusterRun, st *stats, d time.Duration, read func() counters) *busyResult {
	lost0 := st.termsLost.Load()
	st.resetPhase()
	busy.Store(true)
	sleep(context.Background(), 3*time.Second) // every member moved once
	c0 := read()
	sleep(context.Background(), d)
	res := &busyResult{Rates: between(c0, read())}
	busy.Store(false)
	res.Seconds = res.Rates.Seconds
	res.TermsLost = st.termsLost.Load() - lost0
	res.MinLeaseMarginMS = st.phaseMargin()
	return res
}

type busyResult struct {
	Seconds          float64 `json:"seconds"`
	Rates            rates   `json:"rates"`
	PerClusterReq    float64 `json:"per_cluster_requests_per_second"`
	PerClusterWrites float64 `json:"per_cluster_writes_per_second"`
	TermsLost        int64   `json:"terms_lost_no_fault"`
	MinLeaseMarginMS float64 `json:"min_lease_margin_ms"`
}
