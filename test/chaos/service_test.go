package chaos

import (
	"strings"
	"testing"
	"time"
)

func TestParseToyLog(t *testing.T) {
	log := `{"event":"start","node":"node-a","role":"standby","epoch":0,"time":"2026-01-02T03:04:05.000000001Z"}
{"event":"promote","node":"node-a","role":"primary","epoch":4294967330,"time":"2026-01-02T03:04:06Z"}
{"event":"write","node":"node-a","epoch":4294967330,"seq":1,"accepted":true,"time":"2026-01-02T03:04:06.1Z"}
{"event":"demote","node":"node-a","role":"standby","epoch":4294967330,"fence_epoch":0,"was":"primary","time":"2026-01-02T03:04:07Z"}
not json
`
	evs := ParseToyLog(strings.NewReader(log), "node-a")
	if len(evs) != 3 {
		t.Fatalf("%d events, want start, promote, demote: %v", len(evs), evs)
	}
	if evs[1].Kind != KindToyPromote || evs[1].Get("epoch") != "4294967330" || evs[2].Get("was") != "primary" || evs[0].Src != SrcService {
		t.Errorf("parsed %v", evs)
	}
}

// A handoff at the services: node-a stands down (its own demote, a
// fence), then node-b becomes primary. A killed service and a frozen one
// (pause-service, counted down by the demo's fencer) do not count.
func TestCheckServiceOverlap(t *testing.T) {
	clean := `
0 service toy_promote node=node-a epoch=10
1000 service toy_demote node=node-a epoch=10 was=primary
1100 service toy_promote node=node-b epoch=20
2000 nemesis fault phase=inject kind=kill-service id=1 target=node-b
2200 nemesis fault phase=heal kind=kill-service id=1 target=node-b
2500 service toy_promote node=node-c epoch=30
3000 nemesis fault phase=inject kind=pause-service id=2 target=node-c
3200 nemesis fault phase=heal kind=pause-service id=2 target=node-c
3500 service toy_promote node=node-a epoch=40
`
	r := Check(hist(t, clean), cfg)
	if r.Count(VServiceOverlap) != 0 || r.Judged[VServiceOverlap] != 4 {
		t.Fatalf("clean: %v, judged %d (want 4)", r.Violations, r.Judged[VServiceOverlap])
	}
	if r.ServiceHandoffs != 1 || r.MinServiceHandoff != 100*time.Millisecond {
		t.Errorf("service handoffs %d, smallest %v; want 1, 100ms", r.ServiceHandoffs, r.MinServiceHandoff)
	}
	// node-b becomes primary while node-a's service still is: the fence
	// reported success without standing it down (a wrong rpc answer).
	bad := strings.Replace(clean, "1000 service toy_demote node=node-a epoch=10 was=primary\n", "", 1)
	wantOnly(t, Check(hist(t, bad), cfg), VServiceOverlap)
}

// late_stand_down: the demote budget's worst case, judged at the service
// against session_timeout - lease from the elected line.
func TestCheckLateStandDown(t *testing.T) {
	const base = `
0 daemon elected node=node-a epoch=10 session_timeout=2s lease=800ms
100 hook promote node=node-a epoch=10
150 service toy_promote node=node-a epoch=10
1000 hook hook_term hook=promote node=node-a epoch=10
1260 daemon state node=node-a from=promoting to=demoting reason=promote_failed epoch=10
%STANDDOWN%
`
	standDown := func(at int) string {
		return strings.NewReplacer("%AT%", itoa(at), "%AT2%", itoa(at+5)).Replace(
			"%AT% service toy_demote node=node-a epoch=10 was=primary\n%AT2% hook demote node=node-a epoch=10 reason=promote_failed")
	}
	// Within the 1.2s window: the promote killed at +0.25s, the demote's
	// timeout 0.6s and 150ms of its kill grace.
	r := Check(hist(t, strings.Replace(base, "%STANDDOWN%", standDown(2010), 1)), cfg)
	wantClean(t, r)
	if r.StandDowns != 1 || r.StandDownsAfterKill != 1 || r.MinStandDownMargin != 190*time.Millisecond {
		t.Errorf("stand-downs %d (%d after a kill), margin %v; want 1 (1), 190ms", r.StandDowns, r.StandDownsAfterKill, r.MinStandDownMargin)
	}
	// The same hooks with a lease sized without the kill graces (1.3s):
	// the window is 0.7s, the stand-down comes 1.01s after the end.
	mutant := strings.Replace(base, "lease=800ms", "lease=1.3s", 1)
	wantOnly(t, Check(hist(t, strings.Replace(mutant, "%STANDDOWN%", standDown(2010), 1)), cfg), VLateStandDown)
	// Measured from the transition to demoting when no promote ran.
	noPromote := strings.Replace(strings.Replace(base, "1000 hook hook_term hook=promote node=node-a epoch=10\n", "", 1), "from=promoting", "from=leader", 1)
	if r := Check(hist(t, strings.Replace(noPromote, "%STANDDOWN%", standDown(2010), 1)), cfg); len(r.Violations) != 0 || r.StandDownsAfterKill != 0 || r.StandDowns != 1 {
		t.Errorf("no promote: %v, stand-downs %d (%d after a kill)", r.Violations, r.StandDowns, r.StandDownsAfterKill)
	}
	// A stand-down by a fencer (an operator_demote from the successor's
	// rpc fence) after the term's own demote failed is not the term's.
	fenced := strings.Replace(base, "%STANDDOWN%", "2900 service toy_demote node=node-a epoch=10 was=primary\n2905 hook demote node=node-a epoch=10 reason=operator_demote", 1)
	if r := Check(hist(t, fenced), cfg); len(r.Violations) != 0 || r.StandDowns != 0 {
		t.Errorf("fenced: %v, stand-downs %d; want none judged", r.Violations, r.StandDowns)
	}
}

// paused_action: nothing automatic while every node reports the pause; a
// lost lease still demotes.
func TestCheckPausedAction(t *testing.T) {
	const h = `
0 nemesis pause phase=on fault=1
500 hook demote node=node-a epoch=10 reason=lease_expired
600 hook demote_failed node=node-a reason=session_expired
%ACTION%
5000 nemesis pause phase=off fault=1
5100 hook fence_attempt node=node-b target=node-a target_epoch=10
5200 hook promote node=node-b epoch=20
`
	r := Check(hist(t, strings.Replace(h, "%ACTION%", "", 1)), cfg)
	if r.Count(VPausedAction) != 0 || r.Judged[VPausedAction] != 1 || r.PauseWindows != 1 {
		t.Fatalf("clean: %v, judged %d", r.Violations, r.Judged[VPausedAction])
	}
	for _, a := range []string{
		"1000 hook promote node=node-b epoch=20",
		"1000 hook pre_promote node=node-b epoch=20",
		"1000 hook fence_attempt node=node-b target=node-a target_epoch=10",
		"1000 daemon fenced node=node-b target=node-a method=rpc",
		"1000 hook demote node=node-a epoch=10 reason=unhealthy",
		"1000 hook demote node=node-c reason=startup",
	} {
		r := Check(hist(t, strings.Replace(h, "%ACTION%", a, 1)), cfg)
		if n := r.Count(VPausedAction); n != 1 {
			t.Errorf("%q while paused: %d paused_action, want 1 (%v)", a, n, r.Violations)
		}
	}
	// A window not every node saw is not judged.
	un := strings.Replace(strings.Replace(h, "phase=on", "phase=unconfirmed", 1), "%ACTION%", "1000 hook promote node=node-b epoch=20", 1)
	if r := Check(hist(t, un), cfg); r.Count(VPausedAction) != 0 || r.Judged[VPausedAction] != 0 {
		t.Errorf("unconfirmed pause judged: %v", r.Violations)
	}
}

// fenced_by_wrong_answer: after a stub's wrong answer the fencer must go
// on to the next method.
func TestCheckWrongFenceAnswers(t *testing.T) {
	const h = `
0 daemon elected node=node-b epoch=20
100 nemesis fence_stub_answer node=node-a from=node-b target=node-a target_epoch=10 answered_node=node-c answered_epoch=10 fault=1
%AFTER%
`
	good := "150 hook fence_attempt node=node-b target=node-a target_epoch=10\n200 daemon fenced node=node-b target=node-a target_epoch=10 method=shell"
	r := Check(hist(t, strings.Replace(h, "%AFTER%", good, 1)), cfg)
	if len(r.Violations) != 0 || r.WrongFenceAnswers != 1 || r.WrongAnswerFellBack != 1 || r.Judged[VFencedByWrongAnswer] != 1 {
		t.Fatalf("clean: %v, answers %d, fell back %d", r.Violations, r.WrongFenceAnswers, r.WrongAnswerFellBack)
	}
	wantOnly(t, Check(hist(t, strings.Replace(h, "%AFTER%", "200 daemon fenced node=node-b target=node-a target_epoch=10 method=rpc", 1)), cfg), VFencedByWrongAnswer)
	// A later term's rpc fence (the stub gone) is not judged by the old answer.
	later := "300 daemon elected node=node-b epoch=30\n400 daemon fenced node=node-b target=node-a target_epoch=10 method=rpc"
	if r := Check(hist(t, strings.Replace(h, "%AFTER%", later, 1)), cfg); len(r.Violations) != 0 {
		t.Errorf("later term: %v", r.Violations)
	}
}

// A run that never exercised a rule its kinds were made for fails.
func TestUnexercised(t *testing.T) {
	r := Report{Judged: map[string]int{VOverlap: 3, VServiceOverlap: 3, VPausedAction: 1}, MaxLag: 1500}
	got := Unexercised([]string{PauseCluster, LaggingFailover, KillDaemon}, r)
	if len(got) != 1 || !strings.Contains(got[0], VPromotedLagging) {
		t.Errorf("unexercised %q, want only the lag rule", got)
	}
	r.Judged[VLateStandDown] = 2
	got = Unexercised([]string{SlowHooksStop}, r)
	if len(got) != 1 || !strings.Contains(got[0], "killed promote") {
		t.Errorf("unexercised %q, want the worst case missing", got)
	}
}
