package chaos

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// hist builds a history from lines "MS SRC KIND k=v ...", MS milliseconds
// after t0, sorted stably by time like a merged history.
func hist(t *testing.T, text string) History {
	t.Helper()
	var h History
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 3 {
			t.Fatalf("bad history line %q", line)
		}
		ms, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("bad time in %q", line)
		}
		e := Event{At: t0.Add(time.Duration(ms) * time.Millisecond), Src: f[1], Kind: f[2], KV: map[string]string{}}
		for _, kv := range f[3:] {
			k, v, _ := strings.Cut(kv, "=")
			e.KV[k] = v
		}
		h = append(h, e)
	}
	return Merge(h)
}

// writes returns n accepted store writes by node at epoch, every 20ms from ms.
func writes(node string, epoch, ms, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(strconv.Itoa(ms+20*i) + " store write node=" + node + " epoch=" + strconv.Itoa(epoch) +
			" seq=" + strconv.Itoa(i+1) + " accepted=true max_epoch=" + strconv.Itoa(epoch) + "\n")
	}
	return b.String()
}

var cfg = DefaultCheckConfig(10 * time.Second)

func kinds(r Report) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Kind)
	}
	return out
}

func wantOnly(t *testing.T, r Report, kind string) {
	t.Helper()
	if len(r.Violations) == 0 {
		t.Fatalf("no violation found, want %s", kind)
	}
	for _, v := range r.Violations {
		if v.Kind != kind {
			t.Errorf("unexpected violation %v (want only %s)", v, kind)
		}
	}
	t.Logf("caught: %v", r.Violations[0])
}

func wantClean(t *testing.T, r Report) {
	t.Helper()
	for _, v := range r.Violations {
		t.Errorf("violation in a clean history: %v", v)
	}
}

// A clean run: a crash of the leader's daemon, fencing, a successor, stale
// in-flight writes rejected, the daemon restarted, a graceful handover.
const cleanHistory = `
0 hook promote node=node-a epoch=10
` + `%WA%` + `
1000 nemesis fault phase=inject kind=kill-daemon id=1 target=node-a
1000 nemesis daemon_exit node=node-a pid=11 expected=true err=killed
3000 hook fence_attempt node=node-b target=node-a target_epoch=10
3001 store write node=node-a epoch=10 seq=99 accepted=true max_epoch=10
3010 hook fence node=node-b target=node-a target_epoch=10
3020 hook promote node=node-b epoch=20 prev=node-a prev_epoch=10
3050 store write node=node-a epoch=10 seq=100 accepted=true max_epoch=10
` + `%WB%` + `
3200 store write node=node-a epoch=10 seq=101 accepted=false max_epoch=20
3500 nemesis fault phase=heal kind=kill-daemon id=1 target=node-a
3600 hook demote node=node-a epoch=10 reason=startup
5000 nemesis fault phase=inject kind=zk-kill-follower id=2 target=zk2
6000 nemesis fault phase=heal kind=zk-kill-follower id=2 target=zk2
` + `%WB2%` + `
7000 hook demote node=node-b epoch=20 reason=ceded
7100 hook promote node=node-c epoch=30 prev= prev_epoch=
` + `%WC%` + `
7600 hook promote node=node-a epoch=25
7610 hook promote_refused node=node-a epoch=25
8000 nemesis fault phase=inject kind=promote-hang id=3 target=all
8100 nemesis fault phase=heal kind=promote-hang id=3 target=all
` + `%WC2%`

func clean() string {
	r := strings.NewReplacer(
		"%WA%", writes("node-a", 10, 20, 45),
		"%WB%", writes("node-b", 20, 3100, 40),
		"%WB2%", writes("node-b", 20, 6100, 40),
		"%WC%", writes("node-c", 30, 7120, 20),
		"%WC2%", writes("node-c", 30, 8120, 20),
	)
	return r.Replace(cleanHistory)
}

func TestCheckCleanHistoryPasses(t *testing.T) {
	r := Check(hist(t, clean()), cfg)
	wantClean(t, r)
	if r.RejectedStale != 1 || r.RefusedPromotions != 1 || r.Promotions != 3 || r.Fences != 1 {
		t.Errorf("counts: rejected %d refused %d promotions %d fences %d", r.RejectedStale, r.RefusedPromotions, r.Promotions, r.Fences)
	}
	if len(r.Faults) != 3 {
		t.Fatalf("faults: %+v", r.Faults)
	}
	// kill-daemon healed at 3500; node-b (the sole leader since the fence,
	// lasting past the next fault's injection) wrote at 3500.
	if f := r.Faults[0]; f.Recovery != 0 || !f.ChangedLeadership {
		t.Errorf("fault 1 recovery %v changed %v, want 0, true", f.Recovery, f.ChangedLeadership)
	}
	// zk-kill-follower healed at 6000; node-b wrote at 6100 but handed
	// over before the next fault: the lasting leader node-c wrote at 7120.
	if f := r.Faults[1]; f.Recovery != 1120*time.Millisecond || !f.ChangedLeadership {
		t.Errorf("fault 2 recovery %v changed %v, want 1.12s, true", f.Recovery, f.ChangedLeadership)
	}
	if f := r.Faults[2]; f.Recovery != 20*time.Millisecond || f.ChangedLeadership {
		t.Errorf("fault 3 recovery %v changed %v, want 20ms, false", f.Recovery, f.ChangedLeadership)
	}
	if g := r.Faults[0].WriteGap; g != 2001*time.Millisecond {
		t.Errorf("fault 1 write gap %v", g)
	}
	// The late write at 3050 was accepted (epoch still newest) after the fence.
	if r.LateAccepted != 1 {
		t.Errorf("late accepted %d, want 1", r.LateAccepted)
	}
}

func TestCheckOverlap(t *testing.T) {
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
100 hook fence node=node-b target=node-a target_epoch=9
200 hook promote node=node-b epoch=20
`), cfg), VOverlap)
	// A demote of the other node, not the old one, does not end a.
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
100 hook demote node=node-c epoch=0 reason=startup
200 hook promote node=node-b epoch=20
`), cfg), VOverlap)
	// A failed demote leaves it promoted.
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
100 hook demote_failed node=node-a reason=lease_expired
200 hook promote node=node-b epoch=20
`), cfg), VOverlap)
}

func TestCheckOverlapEndsAtDemoteOrFence(t *testing.T) {
	wantClean(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
100 hook demote node=node-a epoch=10 reason=lease_expired
200 hook promote node=node-b epoch=20
300 hook fence node=node-c target=node-b target_epoch=20
400 hook promote node=node-c epoch=30
450 hook demote node=node-c epoch=30 reason=unhealthy
500 hook promote node=node-a epoch=40
501 hook promote_failed node=node-a
600 hook promote node=node-a epoch=35
601 hook promote_refused node=node-a epoch=35
`), cfg))
}

func TestCheckStaleWrite(t *testing.T) {
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
10 store write node=node-a epoch=10 seq=1 accepted=true max_epoch=10
100 hook fence node=node-b target=node-a target_epoch=10
200 hook promote node=node-b epoch=20
210 store write node=node-b epoch=20 seq=1 accepted=true max_epoch=20
220 store write node=node-a epoch=10 seq=2 accepted=true max_epoch=20
`), cfg), VStaleWrite)
}

func TestCheckCountsRejectedWrites(t *testing.T) {
	r := Check(hist(t, `
0 hook promote node=node-a epoch=10
10 store write node=node-a epoch=10 seq=1 accepted=true max_epoch=10
100 hook fence node=node-b target=node-a target_epoch=10
200 hook promote node=node-b epoch=20
210 store write node=node-b epoch=20 seq=1 accepted=true max_epoch=20
220 store write node=node-a epoch=10 seq=2 accepted=false max_epoch=20
230 store write node=node-a epoch=10 seq=3 accepted=false max_epoch=20
`), cfg)
	wantClean(t, r)
	if r.RejectedStale != 2 || r.Accepted != 2 {
		t.Errorf("rejected %d accepted %d, want 2 and 2", r.RejectedStale, r.Accepted)
	}
}

func TestCheckWrongAndUnpromotedWriters(t *testing.T) {
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
10 store write node=node-b epoch=10 seq=1 accepted=true max_epoch=10
`), cfg), VWrongWriter)
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
10 store write node=node-a epoch=11 seq=1 accepted=true max_epoch=11
`), cfg), VUnpromoted)
}

func TestCheckNonIncreasingEpochs(t *testing.T) {
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
100 hook demote node=node-a epoch=10 reason=ceded
200 hook promote node=node-b epoch=10
`), cfg), VEpochOrder)
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
100 hook demote node=node-a epoch=10 reason=ceded
200 hook promote node=node-b epoch=7
`), cfg), VEpochOrder)
}

func TestCheckLostLiveness(t *testing.T) {
	// Healed at 1000, nobody writes for 12s (bound 10s).
	r := Check(hist(t, `
0 hook promote node=node-a epoch=10
10 store write node=node-a epoch=10 seq=1 accepted=true max_epoch=10
500 nemesis fault phase=inject kind=zk-outage id=1 target=all
600 hook demote node=node-a epoch=10 reason=lease_expired
1000 nemesis fault phase=heal kind=zk-outage id=1 target=all
13000 hook promote node=node-b epoch=20
13010 store write node=node-b epoch=20 seq=1 accepted=true max_epoch=20
`), cfg)
	wantOnly(t, r, VLiveness)
	// Never recovered at all, history long enough to judge.
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
500 nemesis fault phase=inject kind=zk-outage id=1 target=all
600 hook demote node=node-a epoch=10 reason=lease_expired
1000 nemesis fault phase=heal kind=zk-outage id=1 target=all
11500 nemesis sample node=node-a pid=1 fds=10 goroutines=20
`), cfg), VLiveness)
	// A leader promoted but not writing (its service lost the role) is not live.
	wantOnly(t, Check(hist(t, `
0 hook promote node=node-a epoch=10
500 nemesis fault phase=inject kind=kill-service id=1 target=node-a
1000 nemesis fault phase=heal kind=kill-service id=1 target=node-a
11500 nemesis sample node=node-a pid=1 fds=10 goroutines=20
`), cfg), VLiveness)
	// Writes from a leader that is demoted later in the window (the service
	// of a killed daemon) are not a recovery; its successor's are.
	r = Check(hist(t, `
0 hook promote node=node-a epoch=10
500 nemesis fault phase=inject kind=kill-daemon id=1 target=node-a
1000 nemesis fault phase=heal kind=kill-daemon id=1 target=node-a
`+writes("node-a", 10, 1000, 10)+`
1300 hook demote node=node-a epoch=10 reason=startup
14000 hook promote node=node-b epoch=20
14010 store write node=node-b epoch=20 seq=1 accepted=true max_epoch=20
`), cfg)
	wantOnly(t, r, VLiveness)
	// Writes while two nodes are (wrongly) promoted do not count as recovery.
	r = Check(hist(t, `
0 hook promote node=node-a epoch=10
500 nemesis fault phase=inject kind=x id=1 target=all
1000 nemesis fault phase=heal kind=x id=1 target=all
1100 hook promote node=node-b epoch=20
`+writes("node-b", 20, 1200, 10)+`
11500 nemesis sample node=node-a pid=1 fds=10 goroutines=20
`), cfg)
	if r.Count(VLiveness) != 1 || r.Count(VOverlap) != 1 {
		t.Errorf("violations %v, want overlap and lost liveness", kinds(r))
	}
}

func TestCheckUnexpectedExitAndCrash(t *testing.T) {
	wantOnly(t, Check(hist(t, `
0 nemesis daemon_exit node=node-a pid=12 expected=false err=exit_status_2
`), cfg), VExit)
	wantOnly(t, Check(hist(t, `
0 nemesis crash node=node-a what=data_race line=WARNING:_DATA_RACE
`), cfg), VCrash)
	wantOnly(t, Check(hist(t, `
0 nemesis fault phase=inject kind=pause-daemon id=1 target=node-a
`), cfg), VUnhealedFaults)
}

func TestCheckResourceGrowth(t *testing.T) {
	var flat, leakG, leakFD strings.Builder
	for i := 0; i < 30; i++ {
		ms := strconv.Itoa(i * 1000)
		g := 40 + i%5 // noise, no trend
		flat.WriteString(ms + " nemesis sample node=node-a pid=7 fds=20 goroutines=" + strconv.Itoa(g) + "\n")
		leakG.WriteString(ms + " nemesis sample node=node-a pid=7 fds=20 goroutines=" + strconv.Itoa(40+5*i) + "\n")
		leakFD.WriteString(ms + " nemesis sample node=node-a pid=7 fds=" + strconv.Itoa(20+i) + " goroutines=40\n")
	}
	wantClean(t, Check(hist(t, flat.String()), cfg))
	wantOnly(t, Check(hist(t, leakG.String()), cfg), VGoroutines)
	wantOnly(t, Check(hist(t, leakFD.String()), cfg), VFDs)
	// A restart is a new process: a higher count in a new pid is no growth.
	var restarted strings.Builder
	for i := 0; i < 30; i++ {
		pid, g := "7", 40
		if i >= 15 {
			pid, g = "8", 90
		}
		restarted.WriteString(strconv.Itoa(i*1000) + " nemesis sample node=node-a pid=" + pid + " fds=20 goroutines=" + strconv.Itoa(g) + "\n")
	}
	wantClean(t, Check(hist(t, restarted.String()), cfg))
}

func TestParseAndMerge(t *testing.T) {
	evs := ParseEventsLog(strings.NewReader(
		strconv.FormatInt(t0.Add(2*time.Millisecond).UnixNano(), 10) + " promote node=node-a epoch=5\n" +
			strconv.FormatInt(t0.UnixNano(), 10) + " fault phase=inject kind=zk-outage id=1 target=all\n"))
	ds, err := ParseDecisions(strings.NewReader(
		`{"time":"` + t0.Add(time.Millisecond).Format(time.RFC3339Nano) + `","node":"node-a","epoch":5,"seq":1,"accepted":true,"max_epoch":5}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := Merge(evs, ds)
	got := []string{h[0].Src + ":" + h[0].Kind, h[1].Src + ":" + h[1].Kind, h[2].Src + ":" + h[2].Kind}
	want := []string{"nemesis:fault", "store:write", "hook:promote"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("merged order %v, want %v", got, want)
	}
	if h[1].Get("accepted") != "true" || h[1].Int("epoch") != 5 {
		t.Errorf("decision parsed as %v", h[1])
	}
	var b strings.Builder
	h.WriteTo(&b)
	if !strings.Contains(b.String(), "promote epoch=5 node=node-a") {
		t.Errorf("history text:\n%s", b.String())
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p := Percentile(ds, 50); p != 50*time.Millisecond {
		t.Errorf("p50 %v", p)
	}
	if p := Percentile(ds, 99); p != 99*time.Millisecond {
		t.Errorf("p99 %v", p)
	}
	if p := Percentile(ds, 100); p != 100*time.Millisecond {
		t.Errorf("max %v", p)
	}
	if p := Percentile(nil, 50); p != 0 {
		t.Errorf("empty %v", p)
	}
}

// TestCheckSaved re-runs the checker over a saved run (the artifacts of
// `make chaos`: events.log and decisions.jsonl in CHAOS_CHECK_DIR).
func TestCheckSaved(t *testing.T) {
	dir := os.Getenv("CHAOS_CHECK_DIR")
	if dir == "" {
		t.Skip("set CHAOS_CHECK_DIR to a directory with events.log and decisions.jsonl")
	}
	logs := map[string]string{}
	matches, _ := filepath.Glob(filepath.Join(dir, "*-failoverd.log"))
	for _, m := range matches {
		logs[strings.TrimSuffix(filepath.Base(m), "-failoverd.log")] = m
	}
	toys := map[string]string{}
	matches, _ = filepath.Glob(filepath.Join(dir, "*-toy.log"))
	for _, m := range matches {
		toys[strings.TrimSuffix(filepath.Base(m), "-toy.log")] = m
	}
	h, err := Load(filepath.Join(dir, "events.log"), filepath.Join(dir, "decisions.jsonl"), logs, toys)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(h, DefaultCheckConfig(LivenessBound))
	t.Log("\n" + Summary(r, 0, "re-check of "+dir))
	for _, v := range r.Violations {
		t.Errorf("VIOLATION %v\n%s", v, h.Excerpt(v.At, 3*time.Second))
	}
}

func TestCheckKnownRaceIsReportedNotFailed(t *testing.T) {
	r := Check(hist(t, `
0 nemesis crash node=node-a what=known_race:gozk_lastzxid line=x
`), cfg)
	wantClean(t, r)
	if len(r.KnownRaces) != 1 {
		t.Errorf("known races %v", r.KnownRaces)
	}
}

func TestClassifyRace(t *testing.T) {
	defer func(k []KnownRace) { KnownRaces = k }(KnownRaces)
	KnownRaces = []KnownRace{{Name: "gozk_lastzxid", Frames: []string{"go-zookeeper/zk.(*Conn).recvLoop()", "go-zookeeper/zk.(*Conn).sendSetWatches()"}}}
	known := []string{"Write at 0x00c0000ce300 by goroutine 1723:", "github.com/go-zookeeper/zk.(*Conn).recvLoop()",
		"/root/go/pkg/mod/github.com/go-zookeeper/zk@v1.0.4/conn.go:849 +0x68c", "Previous read at 0x00c0000ce300 by goroutine 1278:",
		"github.com/go-zookeeper/zk.(*Conn).sendSetWatches()"}
	if got := classifyRace(known); got != "known_race:gozk_lastzxid" {
		t.Errorf("known race classified %q", got)
	}
	other := []string{"Write at 0x1 by goroutine 1:", "github.com/failoverd/failoverd/controller.(*Controller).Status()"}
	if got := classifyRace(other); got != "data_race" {
		t.Errorf("other race classified %q", got)
	}
}

// A leader whose lease never ends, or is renewed by a ZooKeeper follower cut
// off from its leader, keeps acting after its successor won: a violation of
// its own even when fencing kept the store safe.
func TestCheckStaleLeader(t *testing.T) {
	// Stood down a second after the successor was elected.
	r := Check(hist(t, `
0 daemon elected node=node-a epoch=10
100 daemon state node=node-a from=fencing to=leader epoch=10
3000 daemon elected node=node-b epoch=20
3200 hook fence node=node-b target=node-a target_epoch=10
4000 daemon state node=node-a from=leader to=demoting reason=session_expired epoch=10
`), cfg)
	wantOnly(t, r, VStaleLeader)
	// Never stood down at all.
	wantOnly(t, Check(hist(t, `
0 daemon elected node=node-a epoch=10
100 daemon state node=node-a from=fencing to=leader epoch=10
3000 daemon elected node=node-b epoch=20
`), cfg), VStaleLeader)
	// Stood down within the slack, but only because its successor's rpc
	// fence told it to: its own lease would not have ended it.
	wantOnly(t, Check(hist(t, `
0 daemon elected node=node-a epoch=10
3000 daemon elected node=node-b epoch=20
3010 daemon state node=node-a from=leader to=demoting reason=operator_demote epoch=10
3020 daemon fenced node=node-b target=node-a target_epoch=10 method=rpc
`), cfg), VStaleLeader)
	// Stood down only when a pause that did not cover the election ended.
	wantOnly(t, Check(hist(t, `
0 daemon elected node=node-a epoch=10
500 nemesis fault phase=inject kind=pause-daemon id=1 target=node-a
1000 nemesis fault phase=heal kind=pause-daemon id=1 target=node-a
3000 daemon elected node=node-b epoch=20
3600 daemon leadership_ended node=node-a epoch=10 reason=lease_expired
`), cfg), VStaleLeader)
	// Paused over the successor's election, stood down late after waking.
	wantOnly(t, Check(hist(t, `
0 daemon elected node=node-a epoch=10
500 nemesis fault phase=inject kind=pause-daemon id=1 target=node-a
3000 daemon elected node=node-b epoch=20
5000 nemesis fault phase=heal kind=pause-daemon id=1 target=node-a
6000 daemon state node=node-a from=leader to=demoting reason=lease_expired epoch=10
`), cfg), VStaleLeader)
}

func TestCheckStaleLeaderClean(t *testing.T) {
	r := Check(hist(t, `
0 daemon elected node=node-a epoch=10
100 daemon state node=node-a from=fencing to=leader epoch=10
# the lease ends before the session can expire
1400 daemon state node=node-a from=leader to=demoting reason=lease_expired epoch=10
2100 daemon elected node=node-b epoch=20
2200 daemon state node=node-b from=fencing to=leader epoch=20
# a daemon killed while leader believes nothing any more
3000 nemesis daemon_exit node=node-b pid=5 expected=true err=killed
5000 daemon elected node=node-c epoch=30
# paused over its successor's election, stands down on waking (the
# successor's rpc fence, queued while it slept, may come first)
5100 daemon state node=node-c from=fencing to=leader epoch=30
5500 nemesis fault phase=inject kind=pause-daemon id=1 target=node-c
8000 daemon elected node=node-a epoch=40
9000 nemesis fault phase=heal kind=pause-daemon id=1 target=node-c
9020 daemon state node=node-c from=leader to=demoting reason=operator_demote epoch=30
# stood down within the slack of the successor's election (log delay)
10000 daemon elected node=node-b epoch=50
10300 daemon state node=node-a from=leader to=demoting reason=lease_expired epoch=40
# a term that ended in fencing, then the elector's own end of term
11000 daemon state node=node-b from=fencing to=standby reason=leadership_over epoch=50
11500 daemon elected node=node-c epoch=60
`), cfg)
	wantClean(t, r)
	if r.Handoffs != 5 {
		t.Errorf("handoffs judged %d, want 5", r.Handoffs)
	}
	// Lease expiries only: node-a's 700ms and -300ms; the paused node-c's
	// 1.02s does not count.
	if r.MinHandoffMargin != -300*time.Millisecond {
		t.Errorf("min handoff margin %v, want -300ms", r.MinHandoffMargin)
	}
}

func TestCheckPromoteAfterFailedFence(t *testing.T) {
	wantOnly(t, Check(hist(t, `
0 daemon elected node=node-b epoch=20
10 hook fence_attempt node=node-b target=node-a target_epoch=10
20 hook fence_failed node=node-b target=node-a
30 hook promote node=node-b epoch=20
`), cfg), VPromoteAfterFailedFence)
	// The fencer's own claim that it fenced is no evidence (a broken build
	// logs it after a failed fence): only the fence hook's success or the
	// target's demote clears the failure.
	wantOnly(t, Check(hist(t, `
0 daemon elected node=node-b epoch=20
20 hook fence_failed node=node-b target=node-a
25 daemon fenced node=node-b target=node-a target_epoch=10 method=
30 hook promote node=node-b epoch=20
`), cfg), VPromoteAfterFailedFence)
	// The daemon's own verdict counts too (an rpc-only chain).
	wantOnly(t, Check(hist(t, `
0 daemon elected node=node-b epoch=20
20 daemon fencing_failed node=node-b target=node-a target_epoch=10
30 hook promote node=node-b epoch=20
`), cfg), VPromoteAfterFailedFence)
}

func TestCheckPromoteAfterFailedFenceClean(t *testing.T) {
	wantClean(t, Check(hist(t, `
0 daemon elected node=node-b epoch=20
20 hook fence_failed node=node-b target=node-a
30 daemon fencing_failed node=node-b target=node-a target_epoch=10
40 daemon state node=node-b from=fencing to=standby epoch=20
# a new term reads the breadcrumb again; this time rpc fencing works
1000 daemon elected node=node-b epoch=30
1005 hook demote node=node-a epoch=10 reason=operator_demote
1010 daemon fenced node=node-b target=node-a target_epoch=10 method=rpc
1020 hook promote node=node-b epoch=30
1500 hook demote node=node-b epoch=30 reason=ceded
1510 daemon state node=node-b from=leader to=demoting epoch=30
# failed, then fenced after all in the same term
2000 daemon elected node=node-c epoch=40
2010 hook fence_failed node=node-c target=node-b
2020 hook fence node=node-c target=node-b target_epoch=30
2030 hook promote node=node-c epoch=40
2500 daemon state node=node-c from=leader to=demoting epoch=40
2510 hook demote node=node-c epoch=40 reason=ceded
# failed, but the target's service demoted (an rpc fence, a restart)
3000 daemon elected node=node-a epoch=50
3010 hook fence_failed node=node-a target=node-c
3020 hook demote node=node-c epoch=0 reason=startup
3030 hook promote node=node-a epoch=50
`), cfg))
}

func TestCheckNoTakeover(t *testing.T) {
	h := `
0 daemon state node=node-a from=promoting to=leader epoch=10
100 nemesis fault phase=inject kind=hook-unkillable id=1 target=node-a
` + "%TAKEOVER%" + `
9000 nemesis fault phase=heal kind=hook-unkillable id=1 target=node-a
`
	wantOnly(t, Check(hist(t, strings.Replace(h, "%TAKEOVER%", "", 1)), cfg), VNoTakeover)
	wantClean(t, Check(hist(t, strings.Replace(h, "%TAKEOVER%", `
4000 daemon state node=node-b from=promoting to=leader epoch=20
`, 1)), cfg))
}

// The daemon's JSON log lines the checker reads, as slog writes them.
func TestParseDaemonLog(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(&b, nil))
	log.Info("elected", "epoch", 42, "node", "/failoverd/e2e/election/n_0000000042", "lease", "1.333s")
	log.Info("hook output", "stream", "stdout", "line", "hello world")
	log.Info("state transition", "from", "leader", "to", "demoting", "reason", "lease_expired", "epoch", 42)
	log.Info("previous term of this node fenced by a local demote", "target_epoch", 41)
	log.Error("fencing failed: not promoting", "target", "node-b", "target_epoch", 40, "err", "boom")
	b.WriteString("WARNING: DATA RACE\n")
	evs := ParseDaemonLog(strings.NewReader(b.String()), "node-a")
	var got []string
	for _, e := range evs {
		got = append(got, e.Kind+":"+e.Get("node")+":"+e.Get("epoch")+e.Get("to")+e.Get("target"))
	}
	want := "elected:node-a:42 state:node-a:42demoting fenced:node-a:node-a fencing_failed:node-a:node-b"
	if strings.Join(got, " ") != want {
		t.Errorf("parsed %q, want %q", strings.Join(got, " "), want)
	}
	if z := evs[0].Get("znode"); z != "/failoverd/e2e/election/n_0000000042" {
		t.Errorf("znode %q", z)
	}
	if evs[0].At.IsZero() || evs[0].Src != SrcDaemon {
		t.Errorf("event %+v", evs[0])
	}
}

func TestCheckLockedOut(t *testing.T) {
	wantOnly(t, Check(hist(t, `
0 nemesis rejoin node=node-a ok=false fault=3 kind=zk-handshake-drop
`), cfg), VLockedOut)
	wantClean(t, Check(hist(t, `
0 nemesis rejoin node=node-a ok=true fault=3 kind=zk-handshake-drop
`), cfg))
}

// An elector that adopts its old lock after a lost delete and a lost create
// reply (unfair mode) is elected at an epoch it had before, even if the
// service refuses the promotion.
func TestCheckElectedEpochReused(t *testing.T) {
	wantOnly(t, Check(hist(t, `
0 daemon elected node=node-b epoch=20
100 daemon state node=node-b from=leader to=demoting epoch=20
200 daemon elected node=node-b epoch=20
210 hook promote node=node-b epoch=20
220 hook promote_refused node=node-b epoch=20
`), cfg), VEpochOrder)
	wantClean(t, Check(hist(t, `
0 daemon elected node=node-b epoch=20
100 daemon state node=node-b from=leader to=demoting epoch=20
200 daemon elected node=node-b epoch=21
`), cfg))
}

// A leadership that ended because another session deleted its znode (a
// leaver acting on a lagging server's view) is a violation; the reasons of
// ordinary ends are not. The reason is read from a real log line.
func TestCheckZnodeDeleted(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(&b, nil))
	log.Info("leadership ended", "epoch", 7, "reason", "election: election znode deleted")
	h := Merge(ParseDaemonLog(strings.NewReader(b.String()), "node-b"))
	wantOnly(t, Check(h, cfg), VZnodeDeleted)
	wantClean(t, Check(hist(t, `
0 daemon leadership_ended node=node-a epoch=5 reason=election:_resigned
1 daemon leadership_ended node=node-b epoch=6 reason=election:_lease_expired_(no_answer_from_zookeeper_in_time)
`), cfg))
}

// A daemon paused past its session timeout may report its own expired
// session's deletion of its znode as "znode deleted" on waking (seen in
// make chaos DURATION=15m SEED=2314): explained when its member record
// vanished during the pause; not when it stayed, nor long after waking.
func TestCheckZnodeDeletedByOwnExpiry(t *testing.T) {
	const paused = `
0 nemesis fault phase=inject kind=pause-daemon id=4 target=node-a
2200 nemesis member_position node=node-a position=none
3500 nemesis fault phase=heal kind=pause-daemon id=4 target=node-a
`
	r := Check(hist(t, paused+"4000 daemon leadership_ended node=node-a epoch=5 reason=election:_election_znode_deleted\n"), cfg)
	wantClean(t, r)
	if r.ExpiredZnodeEnds != 1 {
		t.Errorf("explained ends %d, want 1", r.ExpiredZnodeEnds)
	}
	for name, h := range map[string]string{
		"member record stayed": strings.Replace(paused, "2200 nemesis member_position node=node-a position=none\n", "", 1) +
			"4000 daemon leadership_ended node=node-a epoch=5 reason=election:_election_znode_deleted\n",
		"long after waking": paused + "6000 daemon leadership_ended node=node-a epoch=5 reason=election:_election_znode_deleted\n",
		"another node":      paused + "4000 daemon leadership_ended node=node-b epoch=5 reason=election:_election_znode_deleted\n",
	} {
		t.Run(name, func(t *testing.T) { wantOnly(t, Check(hist(t, h), cfg), VZnodeDeleted) })
	}
}

// A follow history that keeps the rule: node-b and node-c follow node-a
// once its promote at epoch 10 completed; node-c, elected while its follow
// ran, stops it (its line logged late, inside the term, before the
// promote); after its own term's end demote node-c follows node-b; a
// no_leader run names nobody.
const followHistory = `
0 hook promote node=node-a epoch=10
50 hook promote_done node=node-a epoch=10
60 hook follow node=node-b reason=startup leader=node-a leader_epoch=10
70 hook follow_done node=node-b leader=node-a leader_epoch=10
80 hook follow node=node-c reason=startup leader=node-a leader_epoch=10
1000 hook demote node=node-a epoch=10 reason=lease_expired
1100 daemon state node=node-c from=standby to=fencing reason=elected epoch=20
1101 daemon follow_stopped node=node-c why=elected leader=node-a leader_epoch=10
1102 hook follow node=node-c reason=leader_changed leader=node-a leader_epoch=10
1200 hook promote node=node-c epoch=20
1210 daemon state node=node-c from=fencing to=promoting reason=fenced epoch=20
1250 hook promote_done node=node-c epoch=20
1260 daemon state node=node-c from=promoting to=leader reason=promoted epoch=20
1300 hook follow node=node-b reason=leader_changed leader=node-c leader_epoch=20
1400 hook follow node=node-a reason=demoted leader=node-c leader_epoch=20
2000 daemon state node=node-c from=leader to=demoting reason=ceded epoch=20
2100 hook demote node=node-c epoch=20 reason=ceded
2110 daemon state node=node-c from=demoting to=standby reason=leadership_over epoch=20
2200 hook promote node=node-b epoch=30
2250 hook promote_done node=node-b epoch=30
2300 hook follow node=node-c reason=demoted leader=node-b leader_epoch=30
2400 hook follow node=node-a reason=leader_changed leader=node-b leader_epoch=30
9000 hook follow node=node-a reason=no_leader leader= leader_epoch=
`

func TestCheckFollowClean(t *testing.T) {
	r := Check(hist(t, followHistory), cfg)
	for _, v := range r.Violations {
		if v.Kind == VFollowBadLeader || v.Kind == VFollowInTerm {
			t.Errorf("violation in a clean follow history: %v", v)
		}
	}
	if r.Follows != 8 {
		t.Errorf("counted %d follow runs, want 8", r.Follows)
	}
}

// Each clause of the follow rule, broken once.
func TestCheckFollow(t *testing.T) {
	for _, c := range []struct {
		name, history, want string
	}{
		{"leader still promoting", `
0 hook promote node=node-a epoch=10
40 hook follow node=node-b reason=leader_changed leader=node-a leader_epoch=10
50 hook promote_done node=node-a epoch=10
`, VFollowBadLeader},
		{"leader promoted at another epoch", `
0 hook promote node=node-a epoch=10
50 hook promote_done node=node-a epoch=10
60 hook follow node=node-b reason=leader_changed leader=node-a leader_epoch=11
`, VFollowBadLeader},
		{"promote refused", `
0 hook promote node=node-a epoch=10
10 hook promote_refused node=node-a epoch=10
60 hook follow node=node-b reason=leader_changed leader=node-a leader_epoch=10
`, VFollowBadLeader},
		{"itself", `
0 hook promote node=node-a epoch=10
50 hook promote_done node=node-a epoch=10
60 hook follow node=node-a reason=startup leader=node-a leader_epoch=10
`, VFollowBadLeader},
		{"nobody outside the no_leader run", `
60 hook follow node=node-a reason=startup leader= leader_epoch=
`, VFollowBadLeader},
		{"started inside its term", `
0 hook promote node=node-a epoch=10
50 hook promote_done node=node-a epoch=10
1000 daemon state node=node-b from=standby to=fencing reason=elected epoch=20
1100 hook follow node=node-b reason=leader_changed leader=node-a leader_epoch=10
`, VFollowInTerm},
		{"while demoting", `
0 hook promote node=node-a epoch=10
50 hook promote_done node=node-a epoch=10
1000 daemon state node=node-b from=standby to=fencing reason=elected epoch=20
1200 daemon state node=node-b from=fencing to=promoting reason=fenced epoch=20
1210 hook promote node=node-b epoch=20
1250 hook promote_done node=node-b epoch=20
1260 daemon state node=node-b from=promoting to=leader reason=promoted epoch=20
2000 daemon state node=node-b from=leader to=demoting reason=lease_expired epoch=20
2010 hook follow node=node-b reason=demoted leader=node-a leader_epoch=10
2100 hook demote node=node-b epoch=20 reason=lease_expired
`, VFollowInTerm},
		{"a stopped follow's line after the promote", `
0 hook promote node=node-a epoch=10
50 hook promote_done node=node-a epoch=10
1000 daemon state node=node-b from=standby to=fencing reason=elected epoch=20
1001 daemon follow_stopped node=node-b why=elected
1210 hook promote node=node-b epoch=20
1220 hook follow node=node-b reason=leader_changed leader=node-a leader_epoch=10
`, VFollowInTerm},
		{"a second follow after the stopped one", `
0 hook promote node=node-a epoch=10
50 hook promote_done node=node-a epoch=10
1000 daemon state node=node-b from=standby to=fencing reason=elected epoch=20
1001 daemon follow_stopped node=node-b why=elected
1002 hook follow node=node-b reason=leader_changed leader=node-a leader_epoch=10
1100 hook follow node=node-b reason=leader_changed leader=node-a leader_epoch=10
`, VFollowInTerm},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Check(hist(t, c.history), cfg)
			var got []Violation
			for _, v := range r.Violations {
				if v.Kind == VFollowBadLeader || v.Kind == VFollowInTerm {
					got = append(got, v)
				}
			}
			if len(got) != 1 || got[0].Kind != c.want {
				t.Fatalf("follow violations %v, want one %s", got, c.want)
			}
			t.Logf("caught: %v", got[0])
		})
	}
}

// The daemon's "stopping the follow hook" is kept as follow_stopped.
func TestParseDaemonLogFollowStopped(t *testing.T) {
	var b strings.Builder
	slog.New(slog.NewJSONHandler(&b, nil)).Info("stopping the follow hook", "why", "elected", "leader", "node-b", "leader_epoch", 7)
	evs := ParseDaemonLog(strings.NewReader(b.String()), "node-a")
	if len(evs) != 1 || evs[0].Kind != KindFollowStopped || evs[0].Get("why") != "elected" || evs[0].Get("node") != "node-a" {
		t.Errorf("parsed %+v", evs)
	}
}

// On etcd a leadership ended by the deletion of its election entry is a
// violation too (the reason is read from a real log line, as the etcd
// elector words it), except while an operator revoked that node's lease
// (etcd-lease-revoke): the entry went with the lease.
func TestCheckEntryDeletedEtcd(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(&b, nil))
	log.Info("leadership ended", "epoch", 7, "reason",
		fmt.Errorf("%w: /failoverd/e2e/election/c_1 (create revision 7)", cluster.ErrEntryDeleted).Error())
	h := Merge(ParseDaemonLog(strings.NewReader(b.String()), "node-b"))
	wantOnly(t, Check(h, cfg), VZnodeDeleted)

	const revoked = `
0 nemesis fault phase=inject kind=etcd-lease-revoke id=4 target=node-a
1500 nemesis fault phase=heal kind=etcd-lease-revoke id=4 target=node-a
`
	end := func(at int, node string) string {
		return fmt.Sprintf("%d daemon leadership_ended node=%s epoch=5 reason=cluster:_the_term's_election_entry_was_deleted:_/failoverd/e2e/election/c_1\n", at, node)
	}
	r := Check(hist(t, revoked+end(40, "node-a")), cfg)
	wantClean(t, r)
	if r.RevokedEnds != 1 {
		t.Errorf("ends by the operator's revoke %d, want 1", r.RevokedEnds)
	}
	for name, h := range map[string]string{
		"another node":     revoked + end(40, "node-b"),
		"long after":       revoked + end(5000, "node-a"),
		"no revoke at all": end(40, "node-a"),
	} {
		t.Run(name, func(t *testing.T) { wantOnly(t, Check(hist(t, h), cfg), VZnodeDeleted) })
	}
}

// etcd may revoke a lease its holder kept renewing right after a stopped
// etcd leader is continued (etcd issues 12528 and 15247). A term whose
// entry went and whose session then found its lease gone, within
// EtcdResumeSlack of such a heal, is counted, not failed; its successor's
// early election is not a stale leader. Without the heal, with the lease
// still there (someone deleted the key), or long after, it is a violation.
func TestCheckEtcdRevokeOnResume(t *testing.T) {
	const resume = `
0 nemesis fault phase=inject kind=etcd-pause-leader id=9 target=m1 role=leader
4000 nemesis fault phase=heal kind=etcd-pause-leader id=9 target=m1
`
	const term = `
100 daemon elected node=node-a epoch=50 lease_id=7a1
`
	const after = `
4300 daemon elected node=node-b epoch=60 lease_id=7b2
4900 daemon state node=node-a from=leader to=demoting reason=leadership_lost epoch=50
4910 daemon session_ended node=node-a lease=7a1 lease_left=4.2s err=cluster:_session_expired:_etcd_lease_7a1_is_gone
5200 daemon leadership_ended node=node-a epoch=50 reason=cluster:_the_term's_election_entry_was_deleted:_/failoverd/e2e/election/a_50
`
	r := Check(hist(t, resume+term+after), cfg)
	wantClean(t, r)
	if r.EtcdResumeRevokes != 1 || r.RevokedHandoffs != 1 {
		t.Errorf("revokes on resume %d, revoked handoffs %d; want 1 and 1", r.EtcdResumeRevokes, r.RevokedHandoffs)
	}
	for name, h := range map[string]string{
		"no heal":              term + after,
		"a follower resumed":   strings.Replace(resume, "role=leader", "role=follower", 1) + term + after,
		"lease still there":    resume + term + strings.Replace(after, "4910 daemon session_ended node=node-a lease=7a1 lease_left=4.2s err=cluster:_session_expired:_etcd_lease_7a1_is_gone\n", "", 1),
		"our own expiry":       resume + term + strings.Replace(after, "lease_left=4.2s", "lease_left=-300ms", 1),
		"another node's lease": resume + term + strings.Replace(after, "lease=7a1", "lease=7c3", 1),
		"long after the heal":  strings.Replace(resume, "4000 nemesis", "-8000 nemesis", 1) + term + after,
	} {
		t.Run(name, func(t *testing.T) {
			r := Check(hist(t, h), cfg)
			if !slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Kind == VZnodeDeleted }) {
				t.Errorf("violations %v, want %s", r.Violations, VZnodeDeleted)
			}
		})
	}
}

// The etcd elected and session-ended lines carry what revokedTerms joins
// on: the lease id, as the daemon logs them.
func TestParseEtcdLeaseLines(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(&b, nil))
	log.Info("elected", "epoch", 50, "key", "/failoverd/c/election/a", "lease_id", "7a1")
	log.Warn("etcd session ended", "lease", "7a1", "lease_left", "4.2s", "err", "cluster: session expired: etcd lease 7a1 is gone")
	evs := ParseDaemonLog(strings.NewReader(b.String()), "node-a")
	if len(evs) != 2 || evs[0].Get("lease_id") != "7a1" || evs[1].Kind != KindSessionEnded || evs[1].Get("lease") != "7a1" ||
		evs[1].Get("lease_left") != "4.2s" || !strings.Contains(evs[1].Get("err"), "is_gone") {
		t.Errorf("parsed %+v", evs)
	}
}

// An operator revokes the leader's lease: a successor wins within
// milliseconds and fences the old leader before its watch fired. That is
// no stale leader once the old session saw its lease gone; without that
// evidence it is.
func TestCheckRevokedLeaderFencedFirst(t *testing.T) {
	const h = `
0 daemon elected node=node-c epoch=20963 lease_id=29a
1000 nemesis fault phase=inject kind=etcd-lease-revoke id=418 target=node-c
1260 nemesis etcd_lease_revoke epoch=20963 lease=29a node=node-c ok=true
1285 daemon elected node=node-a epoch=21041 lease_id=31b
1380 daemon state node=node-c from=leader to=demoting reason=operator_demote epoch=20963
2250 nemesis fault phase=heal kind=etcd-lease-revoke id=418 target=node-c
2850 daemon session_ended node=node-c lease=29a lease_left=5.1s err=cluster:_the_term's_session_expired:_etcd_lease_29a_is_gone
`
	r := Check(hist(t, h), cfg)
	wantClean(t, r)
	if r.RevokedHandoffs != 1 {
		t.Errorf("revoked handoffs %d, want 1", r.RevokedHandoffs)
	}
	for name, h := range map[string]string{
		"no lease gone":          strings.Replace(h, "is_gone", "was_closed", 1),
		"another lease revoked":  strings.Replace(h, "etcd_lease_revoke epoch=20963 lease=29a", "etcd_lease_revoke epoch=20963 lease=30f", 1),
		"stood down much later":  strings.Replace(h, "1380 daemon state node=node-c", "9000 daemon state node=node-c", 1),
		"lease left had run out": strings.Replace(h, "lease_left=5.1s", "lease_left=-1s", 1),
	} {
		t.Run(name, func(t *testing.T) { wantOnly(t, Check(hist(t, h), cfg), VStaleLeader) })
	}
}

// An operator's breadcrumb clear while the leader runs must be refused;
// one with nothing to clear judges nothing.
func TestCheckBreadcrumbClear(t *testing.T) {
	r := Check(hist(t, "0 nemesis breadcrumb_clear node=node-a force=true code=1 absent=false\n"), cfg)
	wantClean(t, r)
	if r.Judged[VClearAccepted] != 1 {
		t.Errorf("judged %d clears, want 1", r.Judged[VClearAccepted])
	}
	wantOnly(t, Check(hist(t, "0 nemesis breadcrumb_clear node=node-a force=false code=0 absent=false\n"), cfg), VClearAccepted)
	if r := Check(hist(t, "0 nemesis breadcrumb_clear node=node-a force=false code=0 absent=true\n"), cfg); len(r.Violations) != 0 || r.Judged[VClearAccepted] != 0 {
		t.Errorf("a clear with nothing to clear: violations %v, judged %d", r.Violations, r.Judged[VClearAccepted])
	}
}

// A term elected with no fault active that loses its lease before the next
// fault is a violation, with either backend's reason (from real log
// lines); a term elected during a fault, one that a fault struck before it
// ended, and one that ended for another reason are not.
func TestCheckLeaseLostQuiet(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewJSONHandler(&b, nil))
	log.Info("leadership ended", "epoch", 7, "reason", "cluster: the term's lease expired: no renewal of etcd lease 7a40 answered in time (the deadline less the demote budget 2.7s passed)")
	log.Info("leadership ended", "epoch", 8, "reason", "election: lease expired (no answer from zookeeper in time)")
	ends := ParseDaemonLog(strings.NewReader(b.String()), "node-b")
	if len(ends) != 2 {
		t.Fatalf("parsed %d events from the log lines, want 2", len(ends))
	}
	for i, end := range ends {
		end.At = t0.Add(5 * time.Second)
		elected := fmt.Sprintf("4000 daemon elected node=node-b epoch=%d\n", end.Int("epoch"))
		healed := "0 nemesis fault phase=inject kind=etcd-kill-member id=3 target=m0\n1000 nemesis fault phase=heal kind=etcd-kill-member id=3 target=m0\n"
		lost := Merge(hist(t, healed+elected), History{end})
		r := Check(lost, cfg)
		wantOnly(t, r, VLeaseLostQuiet)
		if r.Judged[VLeaseLostQuiet] != 1 {
			t.Errorf("%d: judged %d terms, want 1", i, r.Judged[VLeaseLostQuiet])
		}
		for name, h := range map[string]History{
			"elected during a fault": Merge(hist(t, "0 nemesis fault phase=inject kind=etcd-kill-member id=3 target=m0\n"+elected+
				"6000 nemesis fault phase=heal kind=etcd-kill-member id=3 target=m0\n"), History{end}),
			"struck before it ended": Merge(hist(t, healed+elected+"4500 nemesis fault phase=inject kind=etcd-kill-member id=4 target=m1\n"), History{end}),
		} {
			if r := Check(h, cfg); r.Count(VLeaseLostQuiet) != 0 {
				t.Errorf("%d, %s: %v", i, name, r.Violations)
			}
		}
	}
	wantClean(t, Check(hist(t, `
0 daemon elected node=node-a epoch=5
1000 daemon leadership_ended node=node-a epoch=5 reason=controller:_ceded
`), cfg))
}

// A znode deleted by the term's own Term.Finish, whose reply was lost,
// is counted apart; the same end is a violation when the lost request
// never reached the server, or deleted another term's znode.
func TestCheckZnodeDeletedByOwnFinish(t *testing.T) {
	const term = `
0 daemon elected node=node-c epoch=5 znode=/f/e2e/election/c_1-n_0000000046
`
	end := "1010 daemon leadership_ended node=node-c epoch=5 reason=election:_election_znode_deleted\n"
	own := "1000 nemesis reply_lost node=node-c op=14 path=delete_/f/e2e/breadcrumb;_delete_/f/e2e/election/c_1-n_0000000046 dropped=false\n"
	r := Check(hist(t, term+own+end), cfg)
	wantClean(t, r)
	if r.OwnFinishEnds != 1 {
		t.Errorf("own-finish ends %d, want 1", r.OwnFinishEnds)
	}
	for name, lost := range map[string]string{
		"never reached the server": strings.Replace(own, "dropped=false", "dropped=true", 1),
		"another term's znode":     strings.Replace(own, "n_0000000046", "n_0000000047", 1),
		"long before the end":      strings.Replace(own, "1000 ", "0 ", 1),
	} {
		h := term + lost + end
		if name == "long before the end" {
			h = term + lost + strings.Replace(end, "1010 ", "5000 ", 1)
		}
		t.Run(name, func(t *testing.T) { wantOnly(t, Check(hist(t, h), cfg), VZnodeDeleted) })
	}
}
