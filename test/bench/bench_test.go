// Package bench measures failoverd against real ZooKeeper and etcd servers
// and real processes on loopback. Run it with `make bench`; it prints a Markdown table
// and writes the figures as JSON (BENCH_JSON, default bench-results.json).
// Timings are reported, never asserted: a benchmark fails only when a
// scenario could not run.
package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// Result is one row of the report.
type Result struct {
	// Backend is the coordination service the row ran on: "zookeeper"
	// or "etcd" (clustertest's names).
	Backend  string             `json:"backend"`
	Scenario string             `json:"scenario"`
	Name     string             `json:"name"`
	Runs     int                `json:"runs"`
	P50ms    float64            `json:"p50_ms"`
	P99ms    float64            `json:"p99_ms"`
	Maxms    float64            `json:"max_ms"`
	Extra    map[string]float64 `json:"extra,omitempty"`
	Notes    string             `json:"notes,omitempty"`
	// LoadAvg is the host's 1-minute load average when the row was
	// recorded: other work on the machine skews every figure.
	LoadAvg float64 `json:"loadavg_1m"`
}

func (r *Result) fill(ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	r.P50ms = ms(s[len(s)/2])
	r.P99ms = ms(s[min(len(s)-1, (len(s)*99+99)/100-1)])
	r.Maxms = ms(s[len(s)-1])
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

func mntrDelta(before, after map[string]string, key string) (float64, bool) {
	a, err1 := strconv.ParseFloat(after[key], 64)
	b, err2 := strconv.ParseFloat(before[key], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return a - b, true
}

func benchSizes() []int {
	spec := os.Getenv("BENCH_SIZES")
	if spec == "" {
		spec = "3,50,100,500,1000"
	}
	var out []int
	for _, f := range strings.Split(spec, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

var (
	resultsMu sync.Mutex
	results   []Result
)

func record(b *testing.B, r Result) {
	b.Helper()
	r.LoadAvg = loadAvg()
	if r.Backend == "" {
		r.Backend = clustertest.BackendZooKeeper
	}
	resultsMu.Lock()
	results = append(results, r)
	resultsMu.Unlock()
	b.ReportMetric(r.P50ms, "p50-ms")
	b.ReportMetric(r.P99ms, "p99-ms")
	for k, v := range r.Extra {
		b.ReportMetric(v, strings.ReplaceAll(k, "_", "-"))
	}
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(bareCandidateEnv); spec != "" {
		os.Exit(runBareCandidate(spec)) // a bare crash reference's candidate
	}
	code := m.Run()
	if len(results) > 0 {
		report()
	}
	os.Exit(code)
}

func report() {
	host, _ := os.Hostname()
	fmt.Printf("\n## failoverd benchmarks (%s, %s/%s, %d CPUs %s, %s)\n\n", time.Now().UTC().Format("2006-01-02"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), runtime.Version())
	fmt.Println("| backend | scenario | case | runs | p50 ms | p99 ms | max ms | other | load |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---|---:|")
	for _, r := range results {
		var extra []string
		for _, k := range sortedKeys(r.Extra) {
			extra = append(extra, fmt.Sprintf("%s=%.4g", k, r.Extra[k]))
		}
		if r.Notes != "" {
			extra = append(extra, r.Notes)
		}
		fmt.Printf("| %s | %s | %s | %d | %.2f | %.2f | %.2f | %s | %.1f |\n", r.Backend, r.Scenario, r.Name, r.Runs, r.P50ms, r.P99ms, r.Maxms, strings.Join(extra, ", "), r.LoadAvg)
	}
	targets := evaluateTargets()
	printTargets(targets)
	out := os.Getenv("BENCH_JSON")
	if out == "" {
		out = "bench-results.json"
	}
	b, _ := json.MarshalIndent(map[string]any{
		"date": time.Now().UTC(), "host": host, "cpus": runtime.NumCPU(), "cpu_model": cpuModel(), "go": runtime.Version(),
		"results": results, "targets": targets,
	}, "", "  ")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "writing", out, err)
	} else {
		fmt.Println("\nJSON:", out)
	}
}

func sortedKeys(m map[string]float64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAvg is the 1-minute load average from /proc/loadavg, or 0.
func loadAvg() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
