package bench

// The performance targets, checked against the figures of this run and
// printed after the table. Never asserted: a missed target is reported.

import (
	"fmt"
	"strings"

	"github.com/failoverd/failoverd/test/clustertest"
)

// Target is one goal and how this run did.
type Target struct {
	Goal     string `json:"goal"`
	Case     string `json:"case"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func findResult(backend, scenario, name string) (Result, bool) {
	for _, r := range results {
		if r.Backend == backend && r.Scenario == scenario && r.Name == name {
			return r, true
		}
	}
	return Result{}, false
}

// evaluateTargets checks whatever rows this run produced; goals whose rows
// are missing (scenario filtered out with -bench) are left out.
func evaluateTargets() []Target {
	var ts []Target
	for _, be := range clustertest.Backends {
		if r, ok := findResult(be, scGraceful, nameGracefulTrivial); ok {
			ts = append(ts, Target{
				Goal: "graceful handoff p50 ≤ 10 ms, p99 ≤ 50 ms (trivial hooks, incl. breadcrumb writes)", Case: be + ": " + r.Name,
				Measured: fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (%d runs)", r.P50ms, r.P99ms, r.Runs),
				Met:      r.P50ms <= 10 && r.P99ms <= 50,
			})
		}
		if r, ok := findResult(be, scGraceful, nameGracefulShare); ok && r.Extra["bare_recipe_p50_ms"] > 0 {
			ts = append(ts, Target{
				Goal: "graceful handoff: failoverd's share (hooks excluded) p50 within 2× a bare recipe handoff on the same ensemble", Case: be + ": " + r.Name,
				Measured: fmt.Sprintf("p50 %.1f ms vs bare %.1f ms (%.1f×); p99 %.1f vs %.1f ms", r.P50ms, r.Extra["bare_recipe_p50_ms"], r.Extra["ratio_p50"], r.P99ms, r.Extra["bare_recipe_p99_ms"]),
				Met:      r.Extra["ratio_p50"] <= 2,
			})
		}
		if r, ok := findResult(be, scGraceful, nameGracefulShareExec); ok && r.Extra["bare_recipe_p50_ms"] > 0 {
			ts = append(ts, Target{
				Goal: "the same, with the promote hook's fork/exec left out like the demote's", Case: be + ": " + r.Name,
				Measured: fmt.Sprintf("p50 %.1f ms vs bare %.1f ms (%.1f×); p99 %.1f vs %.1f ms", r.P50ms, r.Extra["bare_recipe_p50_ms"], r.Extra["ratio_p50"], r.P99ms, r.Extra["bare_recipe_p99_ms"]),
				Met:      r.Extra["ratio_p50"] <= 2,
			})
		}
		if fair, ok := findResult(be, scManual, "failover --to (fair): CLI wall time"); ok {
			if unfair, ok := findResult(be, scManual, "failover --to (unfair): CLI wall time"); ok {
				ts = append(ts, Target{
					Goal: "manual failover: unfair mode in line with fair (CLI p50 within 1.25×, no other node elected, no fencing)", Case: be + ": unfair vs fair",
					Measured: fmt.Sprintf("%.0f ms vs %.0f ms (%.2f×); runs with another node elected %.0f, fenced %.0f", unfair.P50ms, fair.P50ms, unfair.P50ms/fair.P50ms,
						unfair.Extra["runs_other_node_elected"], unfair.Extra["runs_fenced"]),
					Met: unfair.P50ms <= 1.25*fair.P50ms && unfair.Extra["runs_other_node_elected"] == 0 && unfair.Extra["runs_fenced"] == 0,
				})
			}
		}
	}
	for _, r := range results {
		if r.Scenario != scCrash {
			continue
		}
		to := r.Extra["negotiated_timeout_ms"]
		ts = append(ts, Target{
			Goal: "crash failover p50 ≤ negotiated session timeout (etcd: granted lease TTL) + 150 ms (incl. fencing, promotion)", Case: r.Backend + ": " + r.Name,
			Measured: fmt.Sprintf("p50 %.0f ms vs %.0f + 150 ms (detection p50 %.0f, fencing %.0f, promotion %.0f)",
				r.P50ms, to, r.Extra["detection_p50_ms"], r.Extra["fencing_p50_ms"], r.Extra["promotion_p50_ms"]),
			Met: to > 0 && r.P50ms <= to+150,
		})
	}
	if small, ok := findResult(clustertest.BackendZooKeeper, "election handoff", "fair N=3"); ok {
		if big, ok := findResult(clustertest.BackendZooKeeper, "election handoff", "fair N=1000"); ok {
			ts = append(ts, Target{
				Goal: "fair mode: p50 at N=1000 within 1.5× of N=3", Case: "fair N=1000 vs N=3",
				Measured: fmt.Sprintf("%.2f ms vs %.2f ms (%.2f×)", big.P50ms, small.P50ms, big.P50ms/small.P50ms),
				Met:      big.P50ms <= 1.5*small.P50ms,
			})
		}
	}
	for _, r := range results {
		if r.Scenario != "election handoff" || !strings.HasPrefix(r.Name, "fair ") {
			continue
		}
		lo, hi := r.Extra["watch_notifications_min"], r.Extra["watch_notifications_max"]
		ts = append(ts, Target{
			Goal: "fair mode: exactly one watch notification per change", Case: r.Name,
			Measured: fmt.Sprintf("min %.0f, max %.0f, mean %.3g per change (%d changes)", lo, hi, r.Extra["watch_notifications_per_change"], r.Runs),
			Met:      lo == 1 && hi == 1,
		})
	}
	for _, r := range results {
		if r.Scenario != scFootprint {
			continue
		}
		ts = append(ts, Target{
			Goal: "idle RSS ≤ 20 MiB", Case: r.Name,
			Measured: fmt.Sprintf("%.1f MiB (peak %.1f)", r.Extra["rss_mib"], r.Extra["rss_max_mib"]),
			Met:      r.Extra["rss_mib"] <= 20 && r.Extra["rss_max_mib"] <= 20,
		}, Target{
			Goal: "idle CPU ≤ 0.2 % of one core", Case: r.Name,
			Measured: fmt.Sprintf("%.3f %% (schedstat %.3f %%)", r.Extra["cpu_pct"], r.Extra["cpu_pct_schedstat"]),
			Met:      r.Extra["cpu_pct"] <= 0.2,
		})
	}
	return ts
}

func printTargets(ts []Target) {
	if len(ts) == 0 {
		return
	}
	fmt.Println("\n### Targets")
	fmt.Println()
	fmt.Println("| goal | case | measured | met |")
	fmt.Println("|---|---|---|---|")
	for _, t := range ts {
		met := "yes"
		if !t.Met {
			met = "**no**"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", t.Goal, t.Case, t.Measured, met)
	}
}
