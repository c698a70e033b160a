package metrics

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// fakeStatus is a status func whose answer a test can change.
type fakeStatus struct {
	mu sync.Mutex
	s  controller.Status
}

func (f *fakeStatus) get() controller.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s
}

func (f *fakeStatus) set(s controller.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s = s
}

func newTestMetrics(t *testing.T, status func() controller.Status) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m := New(reg, "1.2.3-test")
	if status == nil {
		status = func() controller.Status { return controller.Status{} }
	}
	reg.MustRegister(StatusCollector(status))
	return m, reg
}

// exercise reports one of everything, as a failover would.
func exercise(m *Metrics) {
	m.CheckDone("success", 20*time.Millisecond)
	m.CheckDone("success", 30*time.Millisecond)
	m.CheckDone("timeout", time.Second)
	m.HealthState("healthy")
	m.StateChanged(controller.StateInitializing, controller.StateStandby)
	m.ElectionWon()
	m.StateChanged(controller.StateStandby, controller.StateFencing)
	m.FenceAttempt("rpc", "failure", 5*time.Second)
	m.FenceAttempt("ssh", "success", 700*time.Millisecond)
	m.StateChanged(controller.StateFencing, controller.StatePromoting)
	m.Promotion("success")
	m.FailoverDuration(3 * time.Second)
	m.StateChanged(controller.StatePromoting, controller.StateLeader)
	m.Leader(true, 42)
	m.BreadcrumbUnreadable()
	m.FencingFailed()
	m.LeadershipLost("lease_expired")
	m.Demotion("failure")
	m.FollowRun("timeout")
	m.FollowRun("success")
	m.Following(41)
	m.HookUnkillable("demote")
	m.PrePromoteVetoed()
	m.HistoryAppendFailed()
	m.PositionError("output")
	m.CooldownHold()
	m.PromotionDeclined("lagging")
	m.Preempted()
	m.ConfigLoaded(time.Unix(1700000000, 0))
	m.ConfigReloaded(false, time.Unix(1700000100, 0))
}

// failoverdNames lists the failoverd_ families reg gathers, except
// build_info, whose goversion label depends on the toolchain.
func failoverdNames(t *testing.T, reg prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var names []string
	for _, mf := range mfs {
		name := mf.GetName()
		if strings.HasPrefix(name, "failoverd_") && name != "failoverd_build_info" {
			names = append(names, name)
		}
	}
	return names
}

// TestMetricNames pins the set of failoverd_ families, the ones docs/commands.md
// documents, so that a rename or a lost metric fails here and not on a
// dashboard.
func TestMetricNames(t *testing.T) {
	m, reg := newTestMetrics(t, nil)
	exercise(m)
	want := []string{
		"failoverd_breadcrumb_unreadable_total",
		"failoverd_config_last_reload_success_timestamp_seconds",
		"failoverd_config_last_reload_successful",
		"failoverd_config_reloads_total",
		"failoverd_cooldown_holds_total",
		"failoverd_coordination_connected",
		"failoverd_demotions_total",
		"failoverd_elections_won_total",
		"failoverd_epoch",
		"failoverd_failover_duration_seconds",
		"failoverd_fence_attempts_total",
		"failoverd_fence_duration_seconds",
		"failoverd_fencing_failed_total",
		"failoverd_follow_runs_total",
		"failoverd_following_epoch",
		"failoverd_health_check_duration_seconds",
		"failoverd_health_checks_total",
		"failoverd_health_up",
		"failoverd_history_append_failures_total",
		"failoverd_hook_unkillable_total",
		"failoverd_is_leader",
		"failoverd_leadership_lost_total",
		"failoverd_lease_remaining_seconds",
		"failoverd_paused",
		"failoverd_position_errors_total",
		"failoverd_pre_promote_vetoes_total",
		"failoverd_preemptions_total",
		"failoverd_promotion_declined_total",
		"failoverd_promotions_total",
		"failoverd_standby_not_following",
		"failoverd_state",
		"failoverd_zk_connected",
	}
	if got := failoverdNames(t, reg); !slices.Equal(got, want) {
		t.Errorf("failoverd_ families (without build_info):\n got %q\nwant %q", got, want)
	}
}

func TestLint(t *testing.T) {
	m, reg := newTestMetrics(t, nil)
	exercise(m)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestExposition compares every failoverd_ series after a failover with
// testdata/exposition.golden; run with -update to rewrite it.
func TestExposition(t *testing.T) {
	pos := int64(12345)
	st := &fakeStatus{s: controller.Status{Member: cluster.Member{Connected: true, LeaseRemaining: 2.5, Position: &pos}}}
	m, reg := newTestMetrics(t, st.get)
	exercise(m)

	golden := filepath.Join("testdata", "exposition.golden")
	names := failoverdNames(t, reg)
	if *update {
		out, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, names...)
		if err != nil {
			t.Fatalf("GatherAndFormat: %v", err)
		}
		if err := os.WriteFile(golden, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("reading golden file (run go test -update to create it): %v", err)
	}
	if err := testutil.GatherAndCompare(reg, bytes.NewReader(want), names...); err != nil {
		t.Errorf("exposition differs from %s (go test -update rewrites it):\n%v", golden, err)
	}
}

func TestInitialValues(t *testing.T) {
	_, reg := newTestMetrics(t, nil)
	want := `
# HELP failoverd_state 1 for the controller's current state, 0 for every other state.
# TYPE failoverd_state gauge
failoverd_state{state="demoting"} 0
failoverd_state{state="fencing"} 0
failoverd_state{state="initializing"} 1
failoverd_state{state="leader"} 0
failoverd_state{state="out"} 0
failoverd_state{state="promoting"} 0
failoverd_state{state="standby"} 0
failoverd_state{state="stopped"} 0
# HELP failoverd_promotions_total Runs of the promote hook, by result.
# TYPE failoverd_promotions_total counter
failoverd_promotions_total{result="failure"} 0
failoverd_promotions_total{result="success"} 0
# HELP failoverd_zk_connected Deprecated (dropped in the next release): failoverd_coordination_connected under its earlier name.
# TYPE failoverd_zk_connected gauge
failoverd_zk_connected 0
# HELP failoverd_lease_remaining_seconds Time left on the leader lease before this node must demote itself, 0 when not leader.
# TYPE failoverd_lease_remaining_seconds gauge
failoverd_lease_remaining_seconds 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"failoverd_state", "failoverd_promotions_total", "failoverd_zk_connected", "failoverd_lease_remaining_seconds"); err != nil {
		t.Error(err)
	}
}

func TestStateChanged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to controller.State
		want     controller.State // the only state at 1; "" for none
	}{
		{"to standby", controller.StateInitializing, controller.StateStandby, controller.StateStandby},
		{"to leader", controller.StatePromoting, controller.StateLeader, controller.StateLeader},
		{"stale from", controller.StateOut, controller.StateDemoting, controller.StateDemoting},
		{"unknown state", controller.StateLeader, controller.State("bogus"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTestMetrics(t, nil)
			m.StateChanged(controller.StateInitializing, controller.StateLeader)
			m.StateChanged(tc.from, tc.to)
			for _, s := range controller.AllStates {
				want := 0.0
				if s == tc.want {
					want = 1
				}
				if got := testutil.ToFloat64(m.state.WithLabelValues(string(s))); got != want {
					t.Errorf("after StateChanged(%q, %q): failoverd_state{state=%q} = %v, want %v", tc.from, tc.to, s, got, want)
				}
			}
			if n := testutil.CollectAndCount(m.state); n != len(controller.AllStates) {
				t.Errorf("failoverd_state has %d series, want %d", n, len(controller.AllStates))
			}
		})
	}
}

func TestHealthState(t *testing.T) {
	for _, tc := range []struct {
		state string
		want  float64
	}{
		{"healthy", 1},
		{"unhealthy", 0},
		{"not_responding", 0},
		{"initializing", 0},
		{"", 0},
	} {
		t.Run(tc.state, func(t *testing.T) {
			m, _ := newTestMetrics(t, nil)
			m.HealthState("healthy") // so a 0 is a change, not the default
			m.HealthState(tc.state)
			if got := testutil.ToFloat64(m.healthUp); got != tc.want {
				t.Errorf("after HealthState(%q): failoverd_health_up = %v, want %v", tc.state, got, tc.want)
			}
		})
	}
}

func TestLeader(t *testing.T) {
	m, _ := newTestMetrics(t, nil)
	m.Leader(true, 7)
	if got := testutil.ToFloat64(m.isLeader); got != 1 {
		t.Errorf("failoverd_is_leader = %v, want 1", got)
	}
	m.Leader(false, 7)
	if got := testutil.ToFloat64(m.isLeader); got != 0 {
		t.Errorf("after losing: failoverd_is_leader = %v, want 0", got)
	}
	// The epoch stays: it names the last leadership.
	if got := testutil.ToFloat64(m.epoch); got != 7 {
		t.Errorf("failoverd_epoch = %v, want 7", got)
	}
}

func TestCounters(t *testing.T) {
	m, _ := newTestMetrics(t, nil)
	exercise(m)
	m.FenceAttempt("rpc", "failure", time.Second)
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"elections_won_total", m.electionsWon, 1},
		{`fence_attempts_total{method="rpc",result="failure"}`, m.fenceAttempts.WithLabelValues("rpc", "failure"), 2},
		{`fence_attempts_total{method="ssh",result="success"}`, m.fenceAttempts.WithLabelValues("ssh", "success"), 1},
		{`promotions_total{result="success"}`, m.promotions.WithLabelValues("success"), 1},
		{`demotions_total{result="failure"}`, m.demotions.WithLabelValues("failure"), 1},
		{`leadership_lost_total{reason="lease_expired"}`, m.leadershipLost.WithLabelValues("lease_expired"), 1},
		{`health_checks_total{result="success"}`, m.healthChecks.WithLabelValues("success"), 2},
		{`health_checks_total{result="failure"}`, m.healthChecks.WithLabelValues("failure"), 0},
		{"breadcrumb_unreadable_total", m.breadcrumbUnreadable, 1},
		{"fencing_failed_total", m.fencingFailed, 1},
		{`follow_runs_total{result="timeout"}`, m.followRuns.WithLabelValues("timeout"), 1},
		{`follow_runs_total{result="failure"}`, m.followRuns.WithLabelValues("failure"), 0},
		{"following_epoch", m.followingEpoch, 41},
		{`hook_unkillable_total{hook="demote"}`, m.hookUnkillable.WithLabelValues("demote"), 1},
		{`hook_unkillable_total{hook="promote"}`, m.hookUnkillable.WithLabelValues("promote"), 0},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("failoverd_%s = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStatusGauges(t *testing.T) {
	st := &fakeStatus{}
	_, reg := newTestMetrics(t, st.get)
	for _, tc := range []struct {
		status    controller.Status
		connected float64
		lease     float64
	}{
		{controller.Status{}, 0, 0},
		{controller.Status{Member: cluster.Member{Connected: true, LeaseRemaining: 3.25}}, 1, 3.25},
		{controller.Status{Member: cluster.Member{Connected: false, LeaseRemaining: 0.5}}, 0, 0.5},
		{controller.Status{Member: cluster.Member{Connected: true, Paused: &cluster.Pause{By: "ops"}}}, 1, 0},
	} {
		st.set(tc.status)
		want := fmt.Sprintf(`
# HELP failoverd_coordination_connected 1 while the coordination service (ZooKeeper) is reachable, else 0.
# TYPE failoverd_coordination_connected gauge
failoverd_coordination_connected %v
# HELP failoverd_zk_connected Deprecated (dropped in the next release): failoverd_coordination_connected under its earlier name.
# TYPE failoverd_zk_connected gauge
failoverd_zk_connected %v
# HELP failoverd_lease_remaining_seconds Time left on the leader lease before this node must demote itself, 0 when not leader.
# TYPE failoverd_lease_remaining_seconds gauge
failoverd_lease_remaining_seconds %v
# HELP failoverd_paused 1 while the cluster is paused (maintenance mode: no automatic promotion, demotion or fencing), as this node last saw it, else 0.
# TYPE failoverd_paused gauge
failoverd_paused %v
`, tc.connected, tc.connected, tc.lease, boolFloat(tc.status.Paused != nil))
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"failoverd_coordination_connected", "failoverd_zk_connected", "failoverd_lease_remaining_seconds", "failoverd_paused"); err != nil {
			t.Errorf("with status %+v: %v", tc.status, err)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	_, reg := newTestMetrics(t, nil)
	want := fmt.Sprintf(`
# HELP failoverd_build_info Always 1; labels name the failoverd version and the Go version it was built with.
# TYPE failoverd_build_info gauge
failoverd_build_info{goversion=%q,version="1.2.3-test"} 1
`, runtime.Version())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "failoverd_build_info"); err != nil {
		t.Error(err)
	}
}

func TestRuntimeCollectors(t *testing.T) {
	_, reg := newTestMetrics(t, nil)
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_start_time_seconds"} {
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatalf("GatherAndCount(%q): %v", name, err)
		}
		if n == 0 {
			t.Errorf("%s not registered", name)
		}
	}
}

// TestOwnRegistry checks that New touches only the registry it is given, so
// two instances can live in one process.
func TestOwnRegistry(t *testing.T) {
	newTestMetrics(t, nil)
	newTestMetrics(t, nil)
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "failoverd_") {
			t.Errorf("%s registered on the default registry", mf.GetName())
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	st := &fakeStatus{}
	m, reg := newTestMetrics(t, st.get)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			exercise(m)
			st.set(controller.Status{Member: cluster.Member{Connected: true}})
			if _, err := reg.Gather(); err != nil {
				t.Errorf("Gather: %v", err)
			}
		})
	}
	wg.Wait()
	if got := testutil.ToFloat64(m.electionsWon); got != 4 {
		t.Errorf("failoverd_elections_won_total = %v, want 4", got)
	}
}

// TestFreshRegistryExposesEverySeries checks that a daemon that has seen no
// event yet already exposes every known label combination of every labelled
// counter at 0: an alert on
// increase(failoverd_fence_attempts_total{result="failure"}[5m]) must have a
// series to work on from the first scrape.
func TestFreshRegistryExposesEverySeries(t *testing.T) {
	_, reg := newTestMetrics(t, nil)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]float64{} // `name{l="v",...}` -> value (histograms: count)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				got[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[key] = float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				got[key] = m.GetGauge().GetValue()
			}
		}
	}

	var want []string
	for _, method := range []string{"rpc", "ssh", "shell"} {
		for _, result := range []string{"success", "failure"} {
			want = append(want, fmt.Sprintf(`failoverd_fence_attempts_total{method=%q,result=%q}`, method, result))
		}
		want = append(want, fmt.Sprintf(`failoverd_fence_duration_seconds{method=%q}`, method))
	}
	for _, result := range []string{"success", "failure"} {
		want = append(want,
			fmt.Sprintf(`failoverd_promotions_total{result=%q}`, result),
			fmt.Sprintf(`failoverd_demotions_total{result=%q}`, result))
	}
	for _, result := range []string{"success", "failure", "timeout"} {
		want = append(want, fmt.Sprintf(`failoverd_health_checks_total{result=%q}`, result),
			fmt.Sprintf(`failoverd_follow_runs_total{result=%q}`, result))
	}
	for _, reason := range []string{"shutdown", "unhealthy", "operator_demote", "ceded", "failover_handoff",
		"hook_unkillable", "join_refused", "takeover_failed", "priority_zero", "pre_promote_veto", "lease_expired", "session_expired", "znode_deleted", "unknown"} {
		want = append(want, fmt.Sprintf(`failoverd_leadership_lost_total{reason=%q}`, reason))
	}
	for _, s := range controller.AllStates {
		want = append(want, fmt.Sprintf(`failoverd_state{state=%q}`, s))
	}
	for _, reason := range []string{"lagging", "handoff_preferred"} {
		want = append(want, fmt.Sprintf(`failoverd_promotion_declined_total{reason=%q}`, reason))
	}
	want = append(want,
		"failoverd_elections_won_total{}", "failoverd_breadcrumb_unreadable_total{}", "failoverd_fencing_failed_total{}",
		"failoverd_failover_duration_seconds{}", "failoverd_health_check_duration_seconds{}",
		"failoverd_is_leader{}", "failoverd_epoch{}", "failoverd_health_up{}", "failoverd_following_epoch{}", "failoverd_pre_promote_vetoes_total{}",
		"failoverd_history_append_failures_total{}", "failoverd_preemptions_total{}")
	for _, k := range want {
		v, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s missing from a fresh registry", k)
		case v != 0 && k != `failoverd_state{state="initializing"}`:
			t.Errorf("%s = %v on a fresh registry, want 0", k, v)
		}
	}
}

// TestKnownLabelValuesMatchTheirSources keeps FenceMethods and
// LeadershipLostReasons in step with the fencers' names and the reasons the
// controller reports: a reason or method missing here would have no series
// until its first event.
func TestKnownLabelValuesMatchTheirSources(t *testing.T) {
	for _, m := range []fencer.Method{(*fencer.RPC)(nil), (*fencer.SSH)(nil), (*fencer.Shell)(nil)} {
		if !slices.Contains(FenceMethods, m.Name()) {
			t.Errorf("fencing method %q is not in FenceMethods %q", m.Name(), FenceMethods)
		}
	}
	reasons := controllerReasons(t)
	for _, r := range reasons {
		if !slices.Contains(LeadershipLostReasons, r) {
			t.Errorf("the controller reports leadership lost for reason %q, which is not in LeadershipLostReasons %q", r, LeadershipLostReasons)
		}
	}
}

// controllerReasons reads the controller's source for the reasons it
// reports: the labels of its end causes (&endCause{"label"}), and the
// string literals lossReason returns. (Its reason* constants name hook
// runs, not ends of a leadership.)
func controllerReasons(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("../controller/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	add := func(lit ast.Expr) {
		if bl, ok := lit.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			if s, err := strconv.Unquote(bl.Value); err == nil && !slices.Contains(reasons, s) {
				reasons = append(reasons, s)
			}
		}
	}
	foundLossReason := false
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "endCause" && len(n.Elts) == 1 {
					add(n.Elts[0])
				}
			case *ast.FuncDecl:
				if n.Name.Name != "lossReason" || n.Body == nil {
					return true
				}
				foundLossReason = true
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if ret, ok := m.(*ast.ReturnStmt); ok {
						for _, r := range ret.Results {
							add(r)
						}
					}
					return true
				})
			}
			return true
		})
	}
	if !foundLossReason || len(reasons) == 0 {
		t.Fatalf("found no leadership-loss reasons in ../controller (lossReason found: %v); update controllerReasons", foundLossReason)
	}
	return reasons
}

// failoverd_position is there while the position is known, and absent
// (not 0, which would read as a position) while it is unknown.
func TestPositionGauge(t *testing.T) {
	st := &fakeStatus{}
	_, reg := newTestMetrics(t, st.get)
	if n, err := testutil.GatherAndCount(reg, "failoverd_position"); err != nil || n != 0 {
		t.Errorf("unknown position: %d failoverd_position series, %v; want none", n, err)
	}
	pos := int64(42)
	st.set(controller.Status{Member: cluster.Member{Position: &pos}})
	want := `
# HELP failoverd_position The service's replication position as service.position last printed it; absent while unknown (the command failed) or not configured. Exact up to 2^53.
# TYPE failoverd_position gauge
failoverd_position 42
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "failoverd_position"); err != nil {
		t.Error(err)
	}
}
