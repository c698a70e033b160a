//go:build scale

package scale

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The restart phases (SCALE_RESTART): the coordination servers restarted
// under the N clusters, one phase each:
//
//	follower  one server that does not lead: stopped, down for
//	          SCALE_RESTART_DOWN (5 s), started, waited for until the
//	          ensemble serves again
//	leader    the same for the server that leads (ZooKeeper: srvr's
//	          "Mode: leader"; etcd: the member whose status names itself)
//	rolling   every server in turn, the followers first and the leader
//	          last, each waited for (rejoined, the quorum serving) before
//	          the next
//
// SCALE_RESTART=1 or all runs the three. Stopped with SIGTERM (etcd's
// leader hands its leadership over before it exits) or, with
// SCALE_RESTART_SIGNAL=KILL, SIGKILL. Each phase is watched until every
// cluster has a leader again and SCALE_RESTART_TAIL (15 s) after that.
// The figure is the blast radius: the clusters whose leader ended its
// term during the phase.

var restartPhases = []string{"follower", "leader", "rolling"}

// restartList parses SCALE_RESTART: "", "0": none; "1", "all": the three.
func restartList(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "", "0":
		return nil, nil
	case "1", "all":
		return restartPhases, nil
	}
	var out []string
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		if !slices.Contains(restartPhases, p) {
			return nil, fmt.Errorf("SCALE_RESTART: %q is none of %s", p, strings.Join(restartPhases, ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

type restartOpts struct {
	phases []string
	kill   bool          // SIGKILL instead of SIGTERM
	down   time.Duration // stopped to started
	tail   time.Duration // watched after every cluster has a leader again
}

func (o restartOpts) signal() string {
	if o.kill {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// serverRestart is one server's stop and start within a phase.
type serverRestart struct {
	Server string `json:"server"`
	Role   string `json:"role"` // leader or follower when stopped
	// StopSeconds: the signal to the process gone; RejoinSeconds: started
	// to every running server serving again.
	StopSeconds   float64 `json:"stop_seconds"`
	RejoinSeconds float64 `json:"rejoin_seconds"`
	// NewLeader: the service's leader once it serves again.
	NewLeader string `json:"new_leader"`
}

// restartResult is one restart phase.
type restartResult struct {
	Phase    string          `json:"phase"`
	Signal   string          `json:"signal"`
	Restarts []serverRestart `json:"restarts"`
	// Seconds: the first stop to the end of the watch.
	Seconds float64 `json:"seconds"`
	// ClustersLostTerm is the blast radius: clusters in which a member
	// that was leader ended its term during the phase; TermsLost counts
	// every term ended.
	ClustersLostTerm int   `json:"clusters_lost_term"`
	TermsLost        int64 `json:"terms_lost"`
	// ClustersLeaderless: clusters seen (every 100 ms) with no member in
	// leader state at some point; LeaderlessAtEnd: still none when the
	// watch ended; LedAgainSeconds: the first stop to the last moment a
	// cluster was without a leader (0: none ever was); LongestLeaderlessMS:
	// one cluster's longest stretch without one.
	ClustersLeaderless  int     `json:"clusters_leaderless"`
	LeaderlessAtEnd     int     `json:"clusters_leaderless_at_end"`
	LedAgainSeconds     float64 `json:"led_again_seconds"`
	LongestLeaderlessMS float64 `json:"longest_leaderless_ms"`
	// MinLeaseMarginMS: the smallest Expiry − now the leaders saw during
	// the phase (sampled every 250 ms); negative: a leader past its lease
	// before it noticed.
	MinLeaseMarginMS   float64 `json:"min_lease_margin_ms"`
	LeaseMarginSamples int     `json:"lease_margin_samples"`
	// ServerRequests: Σ servers' request counters over the phase (read
	// every second, a restarted server counted from its start: what a
	// server received in its last second before it stopped is missed);
	// ServerCPUSeconds: Σ servers' CPU-seconds, a restarted server's start
	// included.
	ServerRequests    float64 `json:"server_requests"`
	ServerRequestsSec float64 `json:"server_requests_per_second"`
	ServerCPUSeconds  float64 `json:"server_cpu_seconds"`
	Errors            int64   `json:"errors"`
	LastError         string  `json:"last_error,omitempty"`
}

// restartPhase runs one phase over the clusters and reports it.
func restartPhase(t *testing.T, e *ensemble, clusters []*clusterRun, st *stats, phase string, o restartOpts) *restartResult {
	t.Helper()
	res := &restartResult{Phase: phase, Signal: o.signal()}
	waitLed(clusters, 60*time.Second)
	lostBefore := make([]int64, len(clusters))
	for i, cr := range clusters {
		lostBefore[i] = cr.cs.lost.Load()
	}
	termsBefore, errsBefore := st.termsLost.Load(), st.errors.Load()
	st.mu.Lock()
	marginsFrom := len(st.margins)
	st.mu.Unlock()

	w := startWatch(e, clusters)
	var order []int
	switch phase {
	case "follower":
		l := e.leader(t)
		order = []int{(l + 1) % e.size()}
	case "leader":
		order = []int{e.leader(t)}
	case "rolling":
		l := e.leader(t)
		for i := range e.size() {
			if i != l {
				order = append(order, i)
			}
		}
		order = append(order, l)
	}
	start := time.Now()
	w.mark(start)
	for _, i := range order {
		role := "follower"
		if i == e.leader(t) {
			role = "leader"
		}
		sr := serverRestart{Server: e.serverName(i), Role: role}
		at := time.Now()
		e.stopServer(i, o.kill)
		sr.StopSeconds = round(time.Since(at).Seconds(), 2)
		time.Sleep(o.down)
		at = time.Now()
		e.startServer(i)
		sr.RejoinSeconds = round(time.Since(at).Seconds(), 2)
		sr.NewLeader = e.serverName(e.leader(t))
		res.Restarts = append(res.Restarts, sr)
		t.Logf("%s restart: %s (%s) stopped in %.2fs, down %v, serving %.2fs after its start; leader %s",
			phase, sr.Server, role, sr.StopSeconds, o.down, sr.RejoinSeconds, sr.NewLeader)
	}
	waitLed(clusters, 60*time.Second)
	time.Sleep(o.tail)
	ws := w.stop()

	res.Seconds = round(time.Since(start).Seconds(), 1)
	for i, cr := range clusters {
		if cr.cs.lost.Load() > lostBefore[i] {
			res.ClustersLostTerm++
		}
	}
	res.TermsLost = st.termsLost.Load() - termsBefore
	res.Errors = st.errors.Load() - errsBefore
	res.ClustersLeaderless, res.LeaderlessAtEnd = ws.leaderless, ws.leaderlessAtEnd
	if !ws.lastLeaderless.IsZero() {
		res.LedAgainSeconds = round(ws.lastLeaderless.Sub(start).Seconds(), 2)
	}
	res.LongestLeaderlessMS = float64(ws.longest.Milliseconds())
	res.ServerRequests = round(ws.requests, 0)
	res.ServerRequestsSec = round(ws.requests/ws.seconds, 1)
	res.ServerCPUSeconds = round(ws.cpu, 2)
	st.mu.Lock()
	if ms := st.margins[min(marginsFrom, len(st.margins)):]; len(ms) > 0 {
		res.MinLeaseMarginMS = float64(slices.Min(ms).Milliseconds())
		res.LeaseMarginSamples = len(ms)
	}
	if res.Errors > 0 {
		res.LastError = st.lastErr
	}
	st.mu.Unlock()
	return res
}

// leads reports whether a member of cr is in leader state.
func leads(cr *clusterRun) bool {
	cr.mu.Lock()
	members := slices.Clone(cr.members)
	cr.mu.Unlock()
	for _, mr := range members {
		if _, ok := mr.m.leading(); ok {
			return true
		}
	}
	return false
}

// waitLed waits until every cluster has a member in leader state.
func waitLed(clusters []*clusterRun, d time.Duration) bool {
	end := time.Now().Add(d)
	for {
		all := true
		for _, cr := range clusters {
			if !leads(cr) {
				all = false
				break
			}
		}
		if all {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// watch samples, during a phase, which clusters have a leader (every
// 100 ms) and the servers' request counters and CPU (every second).
type watch struct {
	e        *ensemble
	clusters []*clusterRun
	done     chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	from  time.Time // leaderless stretches count from here
	stats watchStats
}

type watchStats struct {
	leaderless      int // clusters ever without a leader
	leaderlessAtEnd int
	lastLeaderless  time.Time
	longest         time.Duration
	requests        float64
	cpu             float64
	seconds         float64
}

func startWatch(e *ensemble, clusters []*clusterRun) *watch {
	w := &watch{e: e, clusters: clusters, done: make(chan struct{})}
	w.wg.Add(2)
	go w.leaders()
	go w.servers()
	return w
}

// mark starts counting leaderless stretches.
func (w *watch) mark(at time.Time) {
	w.mu.Lock()
	w.from = at
	w.mu.Unlock()
}

func (w *watch) stop() watchStats {
	close(w.done)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

func (w *watch) leaders() {
	defer w.wg.Done()
	since := make([]time.Time, len(w.clusters)) // zero: has a leader
	ever := make([]bool, len(w.clusters))
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-w.done:
			w.mu.Lock()
			for i := range w.clusters {
				if ever[i] {
					w.stats.leaderless++
				}
				if !since[i].IsZero() {
					w.stats.leaderlessAtEnd++
					w.stats.longest = max(w.stats.longest, time.Since(since[i]))
				}
			}
			w.mu.Unlock()
			return
		case <-tk.C:
		}
		w.mu.Lock()
		from := w.from
		w.mu.Unlock()
		if from.IsZero() {
			continue
		}
		now := time.Now()
		for i, cr := range w.clusters {
			if leads(cr) {
				if !since[i].IsZero() {
					w.mu.Lock()
					w.stats.longest = max(w.stats.longest, now.Sub(since[i]))
					w.mu.Unlock()
					since[i] = time.Time{}
				}
				continue
			}
			if since[i].IsZero() {
				since[i] = now
			}
			ever[i] = true
			w.mu.Lock()
			w.stats.lastLeaderless = now
			w.mu.Unlock()
		}
	}
}

// servers accumulates the servers' request counters (a counter that went
// down is a restarted server's: counted from 0) and their processes' CPU
// (a process first seen during the phase: from its start).
func (w *watch) servers() {
	defer w.wg.Done()
	start := time.Now()
	last := make([]float64, w.e.size())
	seen := make([]bool, w.e.size())
	cpu := map[int]float64{}
	var requests, cpuSum float64
	sample := func(first bool) {
		for i := range last {
			v, err := w.e.serverRequests(i)
			if err != nil {
				continue
			}
			switch {
			case !seen[i] && first:
			case !seen[i] || v < last[i]:
				requests += v
			default:
				requests += v - last[i]
			}
			last[i], seen[i] = v, true
		}
		for _, pid := range w.e.pids() {
			s, err := readStat(pid)
			if err != nil {
				continue
			}
			prev, ok := cpu[pid]
			if !ok && first {
				prev = s.cpuSeconds
			}
			cpuSum += s.cpuSeconds - prev
			cpu[pid] = s.cpuSeconds
		}
	}
	sample(true)
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		select {
		case <-w.done:
			sample(false)
			w.mu.Lock()
			w.stats.requests, w.stats.cpu, w.stats.seconds = requests, cpuSum, time.Since(start).Seconds()
			w.mu.Unlock()
			return
		case <-tk.C:
			sample(false)
		}
	}
}
