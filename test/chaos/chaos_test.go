package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// SliceSeed is the CI slice's fixed seed.
const SliceSeed = 1

// TestChaosSlice is the short fixed-seed schedule `make test` runs: every
// fault kind once, in a seeded order, then the checker. It fails (does not
// skip) without ZooKeeper under CI=true.
func TestChaosSlice(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos slice: real cluster, about 3 minutes")
	}
	run(t, SliceSeed, 0, fmt.Sprintf("go test -run TestChaosSlice ./test/chaos/ (seed %d, every kind once)", SliceSeed))
}

// TestChaosLong runs the long schedule of `make chaos` (CHAOS_DURATION, e.g.
// 30m, and CHAOS_SEED; a random seed is drawn and printed without one). It
// is opt-in: skipped unless CHAOS_DURATION is set.
func TestChaosLong(t *testing.T) {
	ds := os.Getenv("CHAOS_DURATION")
	if ds == "" {
		t.Skip("set CHAOS_DURATION (make chaos DURATION=30m SEED=7)")
	}
	d, err := time.ParseDuration(ds)
	if err != nil || d <= 0 {
		t.Fatalf("CHAOS_DURATION=%q: want a positive duration like 30m", ds)
	}
	seed := uint64(time.Now().UnixNano() % 1000000)
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: want a number", s)
		}
	}
	run(t, seed, d, fmt.Sprintf("make chaos DURATION=%s SEED=%d", ds, seed))
}

// run starts an environment, runs the schedule (blocks of every kind in a
// seeded order, until d has passed; d == 0: one block), and checks the
// history.
func run(t *testing.T, seed uint64, d time.Duration, replay string) {
	t.Logf("chaos: seed %d, replay with: %s", seed, replay)
	e := NewEnv(t, seed)
	m := NewNemesis(e, seed)
	if !e.WaitRecovered(LivenessBound) {
		t.Fatal("no leader writing at the start")
	}
	e.Sample()
	start := time.Now()
	injected := map[string]int{}
	for done := false; !done; {
		for _, k := range m.Block() {
			if d > 0 && time.Since(start) >= d {
				done = true
				break
			}
			m.Step(k)
			injected[k]++
			if n := m.id; d > 0 && n%25 == 0 {
				t.Logf("chaos: %d faults injected, %v elapsed", n, time.Since(start).Round(time.Second))
			}
		}
		if d == 0 {
			done = true
		}
	}
	e.WaitRecovered(LivenessBound)
	time.Sleep(time.Second)
	e.Sample()
	e.ScanCrashes()
	e.StopMonitor()

	h, err := e.History()
	if err != nil {
		t.Fatal(err)
	}
	r := Check(h, DefaultCheckConfig(LivenessBound))
	sum := Summary(r, seed, replay)
	t.Log("\n" + sum)

	for _, k := range AllKinds {
		if injected[k] == 0 {
			t.Errorf("fault kind %s was never injected", k)
		}
	}
	dir := os.Getenv("CHAOS_ARTIFACTS")
	if dir == "" && (d > 0 || len(r.Violations) > 0 || t.Failed()) {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("failoverd-chaos-seed%d-%s", seed, time.Now().Format("20060102-150405")))
	}
	if dir != "" {
		if err := e.SaveArtifacts(dir, h); err != nil {
			t.Logf("saving artifacts: %v", err)
		} else {
			os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(sum), 0o644)
			t.Logf("history, logs and summary saved in %s", dir)
		}
	}
	for i, v := range r.Violations {
		if i < 10 {
			t.Errorf("VIOLATION %v\nhistory around it:\n%s", v, h.Excerpt(v.At, 3*time.Second))
		} else {
			t.Errorf("VIOLATION %v", v)
		}
	}
}
