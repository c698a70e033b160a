package bench

// Failover latency of whole clusters: real failoverd binaries (built without
// -race), the toy service, hook scripts that log every event with its time,
// one ZooKeeper on loopback. Every latency is measured on one clock (the
// wall clock): the benchmark takes the time just before it acts, the hooks
// stamp their event lines, and the daemons' debug logs (microsecond resolution)
// give the steps in between.

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// Row names the target check looks up.
const (
	scGraceful  = "graceful handoff"
	scManual    = "manual failover"
	scCrash     = "crash failover"
	scUnhealthy = "unhealthy failover"
	scFootprint = "footprint (idle; runs = seconds watched)"

	nameGracefulTrivial = "SIGTERM leader, trivial hooks (compiled)"
	nameGracefulBash    = "SIGTERM leader, trivial hooks (bash)"
	nameGracefulCurl    = "SIGTERM leader, bash+curl hooks"
)

// hookKind says which promote and demote hooks a cluster runs.
type hookKind struct {
	sub, name string
	install   func(b *testing.B, c *cluster)
}

var (
	// hooksCompiled: hookev (C, or test/bench/hookev in Go without a C
	// compiler), a program that appends its event line and exits: the
	// "trivial hooks" of the targets.
	hooksCompiled = hookKind{"hooks=compiled", nameGracefulTrivial, func(b *testing.B, c *cluster) {
		bin, _ := hookev(b)
		c.UseHookProgram(bin)
	}}
	// hooksBash: a bash script that appends its event line without forking.
	hooksBash = hookKind{"hooks=bash", nameGracefulBash, func(b *testing.B, c *cluster) { c.UseTrivialHooks() }}
	// hooksCurl: clustertest's scripts, which demote and promote the toy
	// service with curl.
	hooksCurl = hookKind{"hooks=bash+curl", nameGracefulCurl, func(*testing.B, *cluster) {}}
)

// gracefulSteps is the breakdown of a graceful handoff, in path order.
var gracefulSteps = []string{stDemoteStart, stDemoteEnd, stBCDeleted, stBCHanded, stZnodeGone, stCandidateWon, stElected, stLeaseReady, stBCWritten, stPromote}

// BenchmarkGracefulHandoff: SIGTERM to the leader's failoverd until the
// successor's promote hook starts; the stopped daemon is restarted between
// runs. With trivial hooks that append their event line and nothing else
// (compiled: the target case; bash), and with clustertest's bash+curl hooks
// that really demote and promote the toy service. On a 3-server ensemble
// (BENCH_ZK=standalone: one server).
//
// Per run, the steps of the path (see timeline_test.go): the leaver's
// demote hook (start, end), its breadcrumb delete and its election znode's
// delete applied (watches of the benchmark's own session), the successor's
// elector log lines ("candidate won", "elected", "lease ready" when it writes
// them), its breadcrumb write applied (watch), its promote hook's start.
// "failoverd share (hooks excluded)" is SIGTERM → promote hook start minus
// the demote hook's own run (duration_seconds); with the compiled hooks,
// every run is followed by one handoff of the bare recipe (recipe_test.go)
// on the same ensemble, so both see the same machine load, and the ratio of
// the two p50s is reported.
//
// On etcd (backend=etcd) the same, on a 3-member etcdtest cluster, with
// etcd's concurrency.Election as the bare reference (election_etcd_test.go)
// and the changes watched by the benchmark's own etcd client.
func BenchmarkGracefulHandoff(b *testing.B) {
	forEachBackend(b, gracefulHandoff)
}

func gracefulHandoff(b *testing.B, backend string) {
	for _, hk := range []hookKind{hooksCompiled, hooksBash, hooksCurl} {
		name := hk.name
		b.Run(hk.sub, func(b *testing.B) {
			c := startCluster(b, handoffOptions(backend, "fair"))
			hk.install(b, c)
			var bare handoffer
			if hk.sub == hooksCompiled.sub {
				bare = startBare(b, c)
			}
			n := runs("GRACEFUL", 30)
			s := series{}
			settle := envDuration("BENCH_SETTLE", 1500*time.Millisecond)
			restarts := 0
			for i := 0; i < n; i++ {
				old := c.ready(60 * time.Second)
				// Both handoffs start on a quiet cluster: the restarted
				// daemon's join (its member record, the other nodes'
				// watches reading it, its follow hook) is over, and the
				// bare recipe's handoff goes first, in the same quiet.
				time.Sleep(settle)
				if bare != nil {
					d, err := bare.handoff()
					if err != nil {
						b.Fatalf("run %d: bare recipe: %v", i, err)
					}
					s.add("bare", d)
					if testing.Verbose() {
						b.Logf("run %d: bare recipe %.1f ms", i, ms(d))
					}
					time.Sleep(settle)
				}
				w, err := c.watchHandoff(old.ID, false)
				if err != nil {
					// The leader's term ended while the cluster settled
					// (a lease lost on a loaded host): run again, without
					// this run's bare sample, so the two stay paired.
					if restarts++; restarts > 5 {
						b.Fatalf("run %d: setting the watches: %v", i, err)
					}
					b.Logf("run %d: setting the watches: %v; running it again", i, err)
					if bare != nil {
						s["bare"] = s["bare"][:len(s["bare"])-1]
					}
					i--
					continue
				}
				t0 := time.Now()
				old.Signal(syscall.SIGTERM)
				p := c.waitEvent("promote", t0, 30*time.Second, others(c, old))
				if _, exited := old.Wait(30 * time.Second); !exited {
					b.Fatalf("run %d: %s did not exit after SIGTERM", i, old.ID)
				}
				next := c.Node(p.KV["node"])
				total := p.At.Sub(t0)
				s.add("total", total)
				evs := c.Events()
				tl := newTimeline(t0, w.stamps())
				tl.fromLogs(evs, old, next)
				tl.addTo(s)
				if d, ok := findEvent(evs, "demote", t0, nodeIs(old)); ok {
					// The bash+curl demote logs at its end, the trivial ones at their start.
					s.add("sigterm_to_demote_event", d.At.Sub(t0))
					if el, ok := firstLog(next, "elected", t0); ok {
						s.add("demote_event_to_elected", el.At.Sub(d.At))
						s.add("elected_to_promote", p.At.Sub(el.At))
					}
				}
				share := "?"
				if d, ok := hookDuration(old, "demote", t0); ok {
					s.add("demote_hook", d)
					s.add("share", total-d)
					share = strconv.FormatFloat(ms(total-d), 'f', 1, 64)
				}
				if r, ok := firstLog(next, "running hook", t0, "hook", "promote"); ok {
					s.add("sigterm_to_running_hook_log", r.At.Sub(t0))
					if d, ok := hookDuration(old, "demote", t0); ok {
						// Both hooks' exec left out alike: the demote's
						// duration_seconds counts its fork/exec, and this
						// ends where the successor's daemon starts its
						// promote (ms log stamp), before the fork/exec.
						s.add("share_to_exec", r.At.Sub(t0)-d)
					}
				}
				if fa, ok := findEvent(evs, "fence_attempt", t0, nil); ok {
					b.Logf("run %d: graceful handoff fenced (%v): the breadcrumb was not deleted", i, fa.KV)
					s.add("fenced", 0)
				}
				if testing.Verbose() {
					b.Logf("run %d: %s → %s: total %.1f ms, share %s ms: %s", i, old.ID, next.ID, ms(total), share, fmtTimeline(tl, gracefulSteps...))
				}
				old.Start()
			}
			keepLogs(b, c.Cluster)
			res := Result{Backend: backend, Scenario: scGraceful, Name: name, Runs: len(s["total"])}
			res.fill(s["total"])
			res.Extra = map[string]float64{
				"sigterm_to_demote_p50_ms":  s.p50ms("sigterm_to_demote_event"),
				"demote_to_elected_p50_ms":  s.p50ms("demote_event_to_elected"),
				"elected_to_promote_p50_ms": s.p50ms("elected_to_promote"),
				"demote_hook_p50_ms":        s.p50ms("demote_hook"),
				// When the successor's daemon logs "running hook" (µs): the
				// handoff without the promote hook's own start.
				"to_running_hook_log_p50_ms": s.p50ms("sigterm_to_running_hook_log"),
			}
			breakdown(s, res.Extra, gracefulSteps...)
			if restarts > 0 {
				res.Extra["runs_restarted"] = float64(restarts)
			}
			if f := len(s["fenced"]); f > 0 {
				res.Extra["runs_fenced"] = float64(f)
			}
			res.Notes = "offsets tNN_* from SIGTERM: hook events, daemon logs (µs), watches of our own session; " + c.desc()
			if hk.sub == hooksCompiled.sub {
				_, lang := hookev(b)
				res.Notes = "hookev in " + lang + "; " + res.Notes
			}
			record(b, res)
			if bare == nil {
				return
			}
			share := Result{Backend: backend, Scenario: scGraceful, Name: nameGracefulShare, Runs: len(s["share"])}
			share.fill(s["share"])
			ref := Result{Backend: backend, Scenario: scGraceful, Name: nameGracefulBare, Runs: len(s["bare"])}
			ref.fill(s["bare"])
			share.Extra = map[string]float64{"bare_recipe_p50_ms": ref.P50ms, "bare_recipe_p99_ms": ref.P99ms}
			if ref.P50ms > 0 {
				share.Extra["ratio_p50"] = share.P50ms / ref.P50ms
				share.Extra["ratio_p99"] = share.P99ms / ref.P99ms
			}
			share.Notes = "SIGTERM → promote hook start minus the demote hook's run; compiled hooks; " + c.desc()
			if len(s["share_to_exec"]) > 0 {
				// The share with both hooks' exec left out: until the
				// successor's daemon starts the promote hook, not until the
				// hook's process is up (the demote's run, exec included, is
				// subtracted in both).
				sx := Result{Backend: backend, Scenario: scGraceful, Name: nameGracefulShareExec, Runs: len(s["share_to_exec"])}
				sx.fill(s["share_to_exec"])
				sx.Extra = map[string]float64{"bare_recipe_p50_ms": ref.P50ms, "bare_recipe_p99_ms": ref.P99ms}
				if ref.P50ms > 0 {
					sx.Extra["ratio_p50"] = sx.P50ms / ref.P50ms
					sx.Extra["ratio_p99"] = sx.P99ms / ref.P99ms
				}
				sx.Notes = "SIGTERM → the successor's daemon logs \"running hook\" promote (µs stamp), minus the demote hook's run; " + c.desc()
				defer record(b, sx)
			}
			ref.Notes = "Go recipe, N=3, one handoff after each failoverd run on the same ensemble"
			if c.Etcd != nil {
				ref.Notes = "concurrency.Election, N=3, one handoff after each failoverd run on the same etcd cluster"
			}
			record(b, share)
			record(b, ref)
		})
	}
}

const (
	nameGracefulShare = "failoverd share (hooks excluded), compiled hooks"
	// nameGracefulShareExec also leaves out the promote hook's fork/exec.
	nameGracefulShareExec = "failoverd share (hooks and their exec excluded), compiled hooks"
	nameGracefulBare      = "bare recipe, same ensemble, interleaved"
)

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// manualSteps is the breakdown of a manual failover, in path order.
var manualSteps = []string{stRequestWritten, stDemoteStart, stDemoteEnd, stBCDeleted, stBCHanded, stZnodeGone, stCandidateWon, stElected, stLeaseReady, stBCWritten, stPromote, stCLIExit}

// BenchmarkManualFailover: `failoverd failover --to NODE` end to end, with
// trivial (compiled) hooks, in fair and in unfair mode, on a 3-server
// ensemble (BENCH_ZK=standalone: one server). Reported per mode: the CLI's
// wall time (it polls every 50 ms), the CLI's start until the target's
// promote hook starts, the old leader's demote until then, and the steps
// between (request written, the leader's demote, its breadcrumb and
// election znode deleted, the target's elector log lines, its breadcrumb
// written, its promote, the CLI's exit), as offsets from the CLI's start.
// Runs where a node other than the target was elected, or where anyone
// fenced, are counted (a clean switchover needs neither). The CLI's
// --timeout is BENCH_FAILOVER_TIMEOUT (20s); the next run starts once the
// nodes that stood aside campaign again.
//
// A third case, target-fenced, switches over to a standby that was just
// fenced over rpc (POST /v1/demote, what a successor does to a previous
// leader whose breadcrumb stayed, after a lease expiry for example): that
// node sits out node.demote_holdoff (10s) while its status still says
// "standby", and the switchover waits for the rest of the holdoff
// (BENCH_MANUAL_FENCED_RUNS, default 3; fair mode, the cause is the same in both).
func BenchmarkManualFailover(b *testing.B) {
	forEachBackend(b, func(b *testing.B, backend string) {
		for _, mode := range []string{"fair", "unfair"} {
			b.Run("mode="+mode, func(b *testing.B) { manualFailover(b, backend, mode) })
		}
		b.Run("target-fenced", func(b *testing.B) { manualFailoverToFenced(b, backend) })
	})
}

// manualFailoverToFenced times failover --to a node fenced just before.
func manualFailoverToFenced(b *testing.B, backend string) {
	c := startCluster(b, handoffOptions(backend, "fair"))
	hooksCompiled.install(b, c)
	n := runs("MANUAL_FENCED", 3)
	s := series{}
	for i := 0; i < n; i++ {
		old := c.ready(60 * time.Second)
		target := c.Nodes[(i+1)%len(c.Nodes)]
		if target == old {
			target = c.Nodes[(i+2)%len(c.Nodes)]
		}
		c.fence(target, old)
		st, _ := target.Status()
		t0 := time.Now()
		out, code := old.CLI("failover", "--to", target.ID, "--timeout", "30s")
		wall := time.Since(t0)
		if code != 0 {
			b.Fatalf("run %d: failover --to %s: exit %d: %s", i, target.ID, code, strings.TrimSpace(out))
		}
		s.add("cli_wall", wall)
		b.Logf("run %d: %s fenced by rpc (then reporting %q), failover --to it: CLI %.1f ms", i, target.ID, st.State, ms(wall))
		// The holdoff is over by now; wait for the standbys to campaign.
	}
	res := Result{Backend: backend, Scenario: scManual, Name: "failover --to a standby fenced just before (fair)", Runs: len(s["cli_wall"])}
	res.fill(s["cli_wall"])
	res.Notes = "the target was fenced over rpc just before (node.demote_holdoff 10s, which a failover request naming it ends); " + c.desc()
	record(b, res)
}

// fence asks n's admin API to demote (POST /v1/demote with the cluster's
// token), as the rpc fencing method of a successor from does.
func (c *cluster) fence(n, from *clustertest.Node) {
	c.b.Helper()
	body := fmt.Sprintf(`{"reason":"bench: fenced before a switchover to it","epoch":0,"from":%q,"target":%q}`, from.ID, n.ID)
	req, err := http.NewRequest("POST", "http://"+n.AdminAddr+"/v1/demote", strings.NewReader(body))
	if err != nil {
		c.b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.b.Fatalf("fencing %s: %v", n.ID, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.b.Fatalf("fencing %s: HTTP %d", n.ID, resp.StatusCode)
	}
}

func manualFailover(b *testing.B, backend, mode string) {
	c := startCluster(b, handoffOptions(backend, mode))
	hooksCompiled.install(b, c)
	timeout := envDuration("BENCH_FAILOVER_TIMEOUT", 20*time.Second)
	n := runs("MANUAL", 20)
	s := series{}
	failed, thirdElected, fenced, slow, restarts := 0, 0, 0, 0, 0
	// BENCH_MANUAL_BACK_TO_BACK=1: the next run starts as soon as the CLI
	// returned, as a script switching over in a loop would, instead of
	// once every node campaigns again.
	backToBack := os.Getenv("BENCH_MANUAL_BACK_TO_BACK") != ""
	var old *clustertest.Node
	for i := 0; i < n; i++ {
		if !backToBack || old == nil {
			old = c.ready(60 * time.Second)
		}
		var target *clustertest.Node
		for j := 1; j < len(c.Nodes); j++ { // rotate the target
			if cand := c.Nodes[(i+j)%len(c.Nodes)]; cand != old {
				target = cand
				break
			}
		}
		w, err := c.watchHandoff(old.ID, true)
		if err != nil {
			// The leader's term ended before the run (see the graceful
			// handoff): run again.
			if restarts++; restarts > 5 {
				b.Fatalf("run %d: setting the watches: %v", i, err)
			}
			b.Logf("run %d: setting the watches: %v; running it again", i, err)
			old = nil
			i--
			continue
		}
		t0 := time.Now()
		out, code := old.CLI("failover", "--to", target.ID, "--timeout", timeout.String())
		wall := time.Since(t0)
		stamps := w.stamps()
		if code != 0 {
			failed++
			b.Logf("run %d: failover --to %s: exit %d: %s", i, target.ID, code, strings.TrimSpace(out))
			continue
		}
		p := c.waitEvent("promote", t0, 30*time.Second, nodeIs(target))
		s.add("cli_wall", wall)
		s.add("cli_start_to_promote", p.At.Sub(t0))
		evs := c.Events()
		if d, ok := findEvent(evs, "demote", t0, nodeIs(old)); ok {
			s.add("demote_to_promote", p.At.Sub(d.At))
		}
		tl := newTimeline(t0, stamps)
		tl.fromLogs(evs, old, target)
		tl.set(stCLIExit, t0.Add(wall))
		tl.addTo(s)
		var odd []string
		for _, o := range c.Nodes {
			if o == target {
				continue
			}
			if l, ok := firstLog(o, "elected", t0); ok {
				odd = append(odd, fmt.Sprintf("%s elected at +%.1f ms", o.ID, ms(l.At.Sub(t0))))
			}
		}
		if len(odd) > 0 {
			thirdElected++
		}
		if fa, ok := findEvent(evs, "fence_attempt", t0, nil); ok {
			fenced++
			odd = append(odd, fmt.Sprintf("fence attempt %v at +%.1f ms", fa.KV, ms(fa.At.Sub(t0))))
		}
		if wall > 3*time.Second {
			slow++
		}
		if testing.Verbose() || len(odd) > 0 || wall > 3*time.Second {
			b.Logf("run %d (%s): %s → %s: CLI %.1f ms: %s %s", i, mode, old.ID, target.ID, ms(wall), fmtTimeline(tl, manualSteps...), strings.Join(odd, "; "))
		}
		old = target
	}
	if len(s["cli_wall"]) == 0 {
		b.Fatalf("every manual failover failed (%d runs)", n)
	}
	wall := Result{Backend: backend, Scenario: scManual, Name: "failover --to (" + mode + "): CLI wall time", Runs: len(s["cli_wall"])}
	wall.fill(s["cli_wall"])
	wall.Extra = map[string]float64{"runs_other_node_elected": float64(thirdElected), "runs_fenced": float64(fenced), "runs_over_3s": float64(slow)}
	if failed > 0 {
		wall.Extra["failed_runs"] = float64(failed)
	}
	if restarts > 0 {
		wall.Extra["runs_restarted"] = float64(restarts)
	}
	breakdown(s, wall.Extra, manualSteps...)
	wall.Notes = "CLI connects, reads members, writes the request, polls member status every 50ms; offsets tNN_* from the CLI's start; " + c.desc()
	record(b, wall)
	prom := Result{Backend: backend, Scenario: scManual, Name: "failover --to (" + mode + "): CLI start → promote hook", Runs: len(s["cli_start_to_promote"])}
	prom.fill(s["cli_start_to_promote"])
	prom.Extra = map[string]float64{"old_demote_to_promote_p50_ms": s.p50ms("demote_to_promote"), "old_demote_to_promote_p99_ms": s.p99ms("demote_to_promote")}
	_, lang := hookev(b)
	prom.Notes = "trivial hooks (compiled, hookev in " + lang + ")"
	record(b, prom)
}

// BenchmarkCrashFailover: SIGKILL of the leader's failoverd and its toy
// service until the successor's promote hook starts, with bash+curl hooks
// and both fencing methods (rpc to the dead admin API is refused at once,
// then the shell script demotes the dead toy: unreachable counts as down).
// Broken down into detection (kill → the successor's "elected" log line: the
// server expired the session and the successor's watch fired), fencing
// (elected → the fence script's last line, or the "previous leader fenced"
// log line when rpc fenced) and promotion (→ promote hook).
//
// ZooKeeper: session timeouts BENCH_CRASH_SESSIONS (default 2s,5s), one
// standalone server (BENCH_CRASH_ZK_SERVERS=3: a 3-server ensemble) with
// tickTime BENCH_ZK_TICK (default zktest's 200 ms; BENCH_TICK_UNKNOWN=1
// leaves tick_time out of the configs, as the default config does). etcd:
// lease TTLs BENCH_CRASH_TTLS (default 5s, the daemon's default) on a
// 3-member etcdtest cluster; the timeout compared with is the TTL etcd
// granted (the lease of the dead leader's member record).
//
// The way the successor takes over: BENCH_TAKEOVER=1 turns
// election.take_over_at_deadline on (ZooKeeper). BENCH_FENCE_FIRST=1 turns
// election.fence_first on (both backends; the shell fence marked proving):
// detection is then kill → the successor's "suspected leader does not
// answer" log line, and the proving fence runs before the win.
// BENCH_CRASH_WAYS, a comma-separated list of expiry (no option),
// take_over_at_deadline (ZooKeeper only; skipped on etcd),
// end_own_term_on_restart (the daemon-killed fault only) and fence_first,
// runs each way on a cluster of its own instead (sub-benchmarks way=...);
// none runs no cluster (the bare references only).
// BENCH_RENEW_INTERVAL (a duration) sets election.renew_interval (both
// backends; on ZooKeeper validation refuses anything but the derived
// tickTime/2 + 5%, so run it with BENCH_BACKEND=etcd or a short
// BENCH_ZK_TICK).
//
// The fault: BENCH_CRASH_FAULT, a comma-separated list of host (the
// default: the daemon and its service SIGKILLed, as above), daemon (the
// daemon alone SIGKILLed, its service stays primary; the daemon is started
// again after crashRestartSec, as the shipped unit's RestartSec does) and
// cutoff (the leader's daemon cut off from the coordination service by its
// own fault proxies, its service running and its admin API reachable by
// the peers). The faults of a way run one after the other on the same
// cluster; each is its own row. With cutoff in the list every node reaches
// the coordination service through proxies, for every fault of the run.
//
// BENCH_CRASH_BARE=1 adds the bare references (recipe_crash_test.go): a
// crash of a bare kazoo Election leader (ZooKeeper) or a bare
// concurrency.Election leader (etcd), two candidates in separate
// processes, at the same session timeout or TTL.
func BenchmarkCrashFailover(b *testing.B) {
	forEachBackend(b, crashFailover)
}

// durations parses the comma-separated list in env k, or def.
func durations(k string, def ...time.Duration) []time.Duration {
	var out []time.Duration
	for _, f := range strings.Split(os.Getenv(k), ",") {
		if d, err := time.ParseDuration(strings.TrimSpace(f)); err == nil && d > 0 {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return def
	}
	return out
}

// The faults of BenchmarkCrashFailover (BENCH_CRASH_FAULT).
const (
	faultHost   = "host"
	faultDaemon = "daemon"
	faultCutoff = "cutoff"
)

// crashRestartSec is how long after a SIGKILL the daemon-killed fault
// starts the daemon again: the shipped unit's RestartSec.
const crashRestartSec = 200 * time.Millisecond

// crashFaults is BENCH_CRASH_FAULT's list, default host.
func crashFaults(b *testing.B) []string {
	spec := strings.TrimSpace(os.Getenv("BENCH_CRASH_FAULT"))
	if spec == "" {
		return []string{faultHost}
	}
	var out []string
	for _, f := range strings.Split(spec, ",") {
		switch f = strings.TrimSpace(f); f {
		case faultHost, faultDaemon, faultCutoff:
			out = append(out, f)
		default:
			b.Fatalf("BENCH_CRASH_FAULT: unknown fault %q (want host, daemon, cutoff)", f)
		}
	}
	return out
}

// crashWay is how a successor takes over from a crashed leader: the
// options it adds to every node's election section.
type crashWay struct {
	name                 string // the sub-benchmark's, "" without BENCH_CRASH_WAYS
	takeover, fenceFirst bool
	endOwnTerm           bool
}

// suffix names the way in a row's name.
func (w crashWay) suffix() string {
	s := ""
	if w.takeover {
		s += ", take_over_at_deadline"
	}
	if w.endOwnTerm {
		s += ", end_own_term_on_restart"
	}
	if w.fenceFirst {
		s += ", fence_first"
	}
	return s
}

// crashWays is BENCH_CRASH_WAYS's list, else the one way BENCH_TAKEOVER
// and BENCH_FENCE_FIRST say.
func crashWays(b *testing.B, backend string) []crashWay {
	spec := strings.TrimSpace(os.Getenv("BENCH_CRASH_WAYS"))
	if spec == "" {
		return []crashWay{{
			takeover:   os.Getenv("BENCH_TAKEOVER") != "" && backend != clustertest.BackendEtcd,
			fenceFirst: os.Getenv("BENCH_FENCE_FIRST") != "",
		}}
	}
	var out []crashWay
	if spec == "none" {
		return nil // the bare references only (BENCH_CRASH_BARE)
	}
	for _, f := range strings.Split(spec, ",") {
		w := crashWay{name: strings.TrimSpace(f)}
		switch w.name {
		case "expiry":
		case "take_over_at_deadline":
			if backend == clustertest.BackendEtcd {
				continue // ZooKeeper only
			}
			w.takeover = true
		case "end_own_term_on_restart":
			w.endOwnTerm = true
		case "fence_first":
			w.fenceFirst = true
		default:
			b.Fatalf("BENCH_CRASH_WAYS: unknown way %q (want expiry, take_over_at_deadline, end_own_term_on_restart, fence_first)", w.name)
		}
		out = append(out, w)
	}
	return out
}

// faultLabel names a fault in a row's name ("" for host: the rows of the
// host crash keep their names).
func faultLabel(f string) string {
	switch f {
	case faultDaemon:
		return ", daemon killed (restarted after " + crashRestartSec.String() + ")"
	case faultCutoff:
		return ", cut off from the coordination service"
	}
	return ""
}

func crashFailover(b *testing.B, backend string) {
	sub, list := "session=", durations("BENCH_CRASH_SESSIONS", 2*time.Second, 5*time.Second)
	if backend == clustertest.BackendEtcd {
		sub, list = "ttl=", durations("BENCH_CRASH_TTLS", 5*time.Second)
	}
	faults := crashFaults(b)
	ways := crashWays(b, backend)
	for _, st := range list {
		b.Run(sub+st.String(), func(b *testing.B) {
			for _, w := range ways {
				if w.name == "" {
					crashFailoverWay(b, backend, st, w, faults)
					continue
				}
				b.Run("way="+w.name, func(b *testing.B) { crashFailoverWay(b, backend, st, w, faults) })
			}
			if os.Getenv("BENCH_CRASH_BARE") != "" {
				b.Run("bare", func(b *testing.B) { bareCrash(b, backend, st) })
			}
		})
	}
}

// crashZKServers is BENCH_CRASH_ZK_SERVERS: 1 (standalone, the default) or 3.
func crashZKServers() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_CRASH_ZK_SERVERS")); err == nil && n > 1 {
		return n
	}
	return 1
}

// crashRuns is how many kills a crash row makes.
func crashRuns(st time.Duration) int {
	def := 20
	if st > 3*time.Second {
		def = 10
	}
	return runs("CRASH", def)
}

func crashFailoverWay(b *testing.B, backend string, st time.Duration, w crashWay, faults []string) {
	if w.endOwnTerm {
		// The option acts only when the daemon restarts on a live host.
		var only []string
		for _, f := range faults {
			if f == faultDaemon {
				only = append(only, f)
			}
		}
		if len(only) == 0 {
			b.Skip("end_own_term_on_restart: only the daemon-killed fault restarts the daemon")
		}
		faults = only
	}
	cutoff := slices.Contains(faults, faultCutoff)
	renew := os.Getenv("BENCH_RENEW_INTERVAL")
	n := crashRuns(st)
	o := clustertest.Options{Backend: backend, EtcdLeaseTTL: st, ThroughProxy: cutoff}
	if backend != clustertest.BackendEtcd {
		o = clustertest.Options{SessionTimeout: st, ZKTickTime: envDuration("BENCH_ZK_TICK", 0), TickTimeUnknown: os.Getenv("BENCH_TICK_UNKNOWN") != "",
			ProxyEnsemble: cutoff}
		if zks := crashZKServers(); zks > 1 {
			o.ZooKeepers = zks
		}
		if w.takeover {
			o.ElectionYAML = "  take_over_at_deadline: true\n"
		}
	}
	if w.endOwnTerm {
		o.ElectionYAML += "  end_own_term_on_restart: true\n"
	}
	if w.fenceFirst {
		o.ElectionYAML += "  fence_first: true\n"
		o.ShellProves = true
	}
	if renew != "" {
		o.ElectionYAML += "  renew_interval: " + renew + "\n"
	}
	c := startCluster(b, o)
	settle := envDuration("BENCH_CRASH_SETTLE", 0)
	var negotiated time.Duration
	for _, fault := range faults {
		s := series{}
		for i := 0; i < n; i++ {
			old := c.ready(60 * time.Second)
			if negotiated == 0 {
				if c.Etcd != nil {
					negotiated = c.etcdGrantedTTL(old)
				} else {
					negotiated = c.negotiatedTimeout(old)
				}
			}
			if settle > 0 {
				// At any phase of the leader's renewals, and with the
				// successor settled in its place (a warm standby's
				// credit chain needs a renew interval).
				time.Sleep(settle + rand.N(settle/2))
			}
			t0 := time.Now()
			switch fault {
			case faultHost:
				old.Signal(syscall.SIGKILL)
				old.KillToy()
			case faultDaemon:
				if !old.Kill(syscall.SIGKILL) {
					b.Fatalf("run %d: the daemon of %s survived SIGKILL", i, old.ID)
				}
				time.Sleep(crashRestartSec - time.Since(t0))
				old.Start()
			case faultCutoff:
				c.cutOff(old, true)
			}
			p := c.waitEvent("promote", t0, 3*st+30*time.Second, others(c, old))
			next := c.Node(p.KV["node"])
			s.add("total", p.At.Sub(t0))
			el, okEl := firstLog(next, "elected", t0)
			if sus, ok := firstLog(next, "suspected leader does not answer: fencing it before taking over", t0); ok && w.fenceFirst {
				s.add("detection", sus.At.Sub(t0))
				if fl, ok := firstLog(next, "fenced the suspected leader before taking over", t0); ok {
					if sec, err := strconv.ParseFloat(fl.KV["duration_seconds"], 64); err == nil {
						s.add("fence_chain", time.Duration(sec*float64(time.Second)))
					}
				}
				if okEl {
					s.add("fencing", el.At.Sub(sus.At)) // suspicion → elected: the proving fence and the term's end
					s.add("promotion", p.At.Sub(el.At))
				}
				okEl = false // the breakdown below is the expiry path's
			}
			// The end of fencing: the shell fence's event, else (rpc
			// fenced: a daemon that answers) the successor's log line.
			fencedAt, okF := time.Time{}, false
			if f, ok := findEvent(c.Events(), "fence", t0, nodeIs(next)); ok {
				fencedAt, okF = f.At, true
			} else if l, ok := firstLog(next, "previous leader fenced", t0); ok {
				fencedAt, okF = l.At, true
			}
			if okEl && okF {
				s.add("detection", el.At.Sub(t0))
				s.add("fencing", fencedAt.Sub(el.At))
				s.add("promotion", p.At.Sub(fencedAt))
				if negotiated == 0 && c.Etcd == nil {
					if lease, err := time.ParseDuration(el.KV["lease"]); err == nil {
						negotiated = (lease * 3 / 2).Round(time.Millisecond)
					}
				}
			}
			if l, ok := firstLog(next, "previous leader fenced", t0); ok {
				if sec, err := strconv.ParseFloat(l.KV["duration_seconds"], 64); err == nil {
					s.add("fence_chain", time.Duration(sec*float64(time.Second)))
				}
			}
			if testing.Verbose() {
				b.Logf("run %d (%s): %s → %s: %.1f ms", i, fault, old.ID, next.ID, ms(p.At.Sub(t0)))
			}
			switch fault {
			case faultHost:
				if _, exited := old.Wait(10 * time.Second); !exited {
					b.Fatalf("run %d: %s survived SIGKILL", i, old.ID)
				}
				old.RestartToy()
				old.Start()
			case faultDaemon, faultCutoff:
				if fault == faultCutoff {
					c.cutOff(old, false)
				}
				// The successor fenced the old node over rpc, which holds
				// it out of the election for node.demote_holdoff: a
				// restart ends that, for the next run.
				old.Kill(syscall.SIGTERM)
				old.Start()
			}
		}
		res := Result{Backend: backend, Scenario: scCrash, Name: "session " + st.String() + ", bash+curl hooks", Runs: len(s["total"])}
		if c.Etcd != nil {
			res.Name = "lease TTL " + st.String() + ", bash+curl hooks"
		}
		res.Name += w.suffix()
		if renew != "" {
			res.Name += ", renew_interval " + renew
		}
		res.Name += faultLabel(fault)
		res.fill(s["total"])
		to := float64(negotiated.Milliseconds())
		res.Extra = map[string]float64{
			"negotiated_timeout_ms": to,
			"detection_p50_ms":      s.p50ms("detection"),
			"detection_p99_ms":      s.p99ms("detection"),
			"fencing_p50_ms":        s.p50ms("fencing"),
			"fence_chain_p50_ms":    s.p50ms("fence_chain"),
			"promotion_p50_ms":      s.p50ms("promotion"),
		}
		if to > 0 {
			res.Extra["p50_over_timeout"] = res.P50ms / to
			res.Extra["p99_over_timeout"] = res.P99ms / to
		}
		if c.Etcd != nil {
			res.Notes = c.desc() + ": the etcd leader's lessor revokes expired leases (checked every 500 ms)"
		} else {
			res.Notes = zkDesc(c.ZK) + ": sessions expire on tick boundaries"
		}
		if cutoff {
			res.Notes += "; every node through fault proxies"
		}
		record(b, res)
	}
	keepLogs(b, c.Cluster)
}

// cutOff cuts n off from the coordination service (on: true) or heals it:
// its own fault proxies (ThroughProxy on etcd, ProxyEnsemble on
// ZooKeeper); the peers still reach its admin API.
func (c *cluster) cutOff(n *clustertest.Node, on bool) {
	if len(n.ZKProxies) > 0 {
		for _, p := range n.ZKProxies {
			p.Blackhole(on)
		}
		return
	}
	n.CutOff(on)
}

// negotiatedTimeout asks the server (cons) for the timeout it negotiated
// with n's daemon; 0 when it cannot tell.
func (c *cluster) negotiatedTimeout(n *clustertest.Node) time.Duration {
	sid, err := c.memberSession(n)
	if err != nil {
		return 0
	}
	for _, srv := range c.ZK.Servers { // the one n's daemon is connected to
		m, err := cons(srv.Addr())
		if err != nil {
			continue
		}
		if e, ok := m[sid]; ok {
			return time.Duration(e.TimeoutMS) * time.Millisecond
		}
	}
	return 0
}

// BenchmarkUnhealthyFailover: the leader's health check starts failing
// (the toy's /health answers 500) until the successor's promote hook
// starts; bash+curl hooks. The monitor needs fall consecutive failures
// checked every interval, so detection alone lies between (fall-1)×interval
// and fall×interval after the flip, plus one check's time.
func BenchmarkUnhealthyFailover(b *testing.B) {
	const interval, fall = 200 * time.Millisecond, 2 // clustertest's health config
	c := startCluster(b, clustertest.Options{})
	n := runs("UNHEALTHY", 30)
	s := series{}
	for i := 0; i < n; i++ {
		old := c.ready(60 * time.Second)
		t0 := time.Now()
		old.SetHealthy(false)
		p := c.waitEvent("promote", t0, 30*time.Second, others(c, old))
		s.add("total", p.At.Sub(t0))
		if h, ok := firstLog(old, "health state changed", t0, "to", "unhealthy"); ok {
			s.add("detection", h.At.Sub(t0))
			s.add("after_detection", p.At.Sub(h.At))
		}
		if l, ok := firstLog(c.Node(p.KV["node"]), "previous leader fenced", t0); ok {
			// rpc first: the old node's admin API runs its demote hook again.
			if sec, err := strconv.ParseFloat(l.KV["duration_seconds"], 64); err == nil {
				s.add("fence_chain", time.Duration(sec*float64(time.Second)))
			}
		}
		old.SetHealthy(true)
		// An unhealthy step-down keeps the breadcrumb, so the successor
		// fences the old leader (rpc), which holds it out of the election
		// for node.demote_holdoff (10s). A restart ends that, for the next run.
		old.Kill(syscall.SIGTERM)
		old.Start()
	}
	c.ready(60 * time.Second)
	res := Result{Scenario: scUnhealthy, Name: fmt.Sprintf("health fails (fall %d × interval %v), bash+curl hooks", fall, interval), Runs: len(s["total"])}
	res.fill(s["total"])
	bound := float64((fall * interval).Milliseconds())
	res.Extra = map[string]float64{
		"fall_x_interval_ms":          bound,
		"detection_p50_ms":            s.p50ms("detection"),
		"detection_p99_ms":            s.p99ms("detection"),
		"detection_to_promote_p50_ms": s.p50ms("after_detection"),
		"p50_over_fall_x_interval":    res.P50ms / bound,
		"runs_fenced":                 float64(len(s["fence_chain"])),
		"fence_chain_p50_ms":          s.p50ms("fence_chain"),
	}
	res.Notes = "detection: flip → the leader's 'health state changed' log line"
	record(b, res)
}
