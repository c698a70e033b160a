package chaos

import (
	"fmt"
	"time"
)

// Judged at the protected resource: the toy services' own logs (toy.log:
// start, promote, demote, each with its time) say when a service really
// became primary and when it really stood down.
//
// service_overlap: when a service becomes primary, every other service has
// stood down (its demote, by its own daemon's hook or a fencer's call),
// died (kill-service) or is frozen (pause-service: the fencer counts a
// service it cannot reach as down, which is what the demo's fence.sh does;
// the frozen service wakes up still primary and only the store's epoch
// check stops its writes, see README "What the demo's fencing does and does
// not prove"). The hook-level overlap rule judges the hooks' lines; this one
// judges what the services did, so a fence that reported success without
// standing anything down shows here too.
//
// late_stand_down: the worst case of the demote budget. A leader whose term
// ends must have its service stood down before a successor can be elected.
// Its own arithmetic (the elected line: session_timeout T, lease L) says no
// successor can be elected until T - L after the lease ended: the demote
// budget D (the promote's kill grace, the demote's timeout, the demote's
// kill grace) plus T/20. So from the moment the daemon acted on the end of
// the term (its transition to demoting, or the SIGTERM a running promote
// got: promote-slow logs it) to the service's stand-down (toy.log) by the
// term's own end demote, at most T - L may pass. The slow-hooks nemeses
// make both hooks take all of their time (the promote is killed, the
// demote stands the service down 150ms into its kill grace), so a daemon
// whose lease leaves less than its hooks can take shows here whatever its
// logs claim: a lease sized without the kill graces (1.3s instead of 0.8s
// on these clusters) leaves 0.7s, and the stand-down comes about 1.0s
// after the end.

// Violation kinds at the resource.
const (
	VServiceOverlap = "service_overlap"
	VLateStandDown  = "late_stand_down"
)

// LateStandDownSlack is what late_stand_down allows beyond T - L: the
// reference is a log line of the daemon (or of the promote's trap) and the
// stand-down the service's, each written a little after the fact, and T/20
// of T - L is all the arithmetic leaves for scheduling. A lease without the
// kill graces overruns by about 200ms even with the slack.
const LateStandDownSlack = 100 * time.Millisecond

// checkService applies service_overlap and measures the handoffs at the
// resource.
func checkService(h History, r *Report, add func(string, time.Time, string, ...any)) {
	primary := map[string]int64{}       // node -> epoch its service is primary at
	stoodDown := map[string]time.Time{} // node -> its last stand-down
	frozenFault := map[string]string{}  // pause-service fault id -> target
	for _, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case KindToyStart:
			delete(primary, node)
			if e.Get("role") == "primary" {
				primary[node] = e.Int("epoch")
			}
		case KindToyDemote:
			if _, ok := primary[node]; ok {
				stoodDown[node] = e.At
			}
			delete(primary, node)
		case KindFault:
			t := e.Get("target")
			switch {
			case e.Get("phase") != "inject":
			case e.Get("kind") == KillService, e.Get("kind") == CrashHost:
				delete(primary, t) // the process is gone
			case e.Get("kind") == PauseService:
				// Counts as down from here until it acts again (see above).
				frozenFault[e.Get("id")] = t
				delete(primary, t)
			}
		case KindToyPromote:
			r.judge(VServiceOverlap, 1)
			for other, ep := range primary {
				if other != node {
					add(VServiceOverlap, e.At, "%s's service became primary at epoch %d while %s's service was still primary at epoch %d (not stood down, dead or frozen)",
						node, e.Int("epoch"), other, ep)
				}
			}
			var last time.Time
			for other, at := range stoodDown {
				if other != node && at.After(last) {
					last = at
				}
			}
			if !last.IsZero() {
				if d := e.At.Sub(last); r.ServiceHandoffs == 0 || d < r.MinServiceHandoff {
					r.MinServiceHandoff = d
				}
				r.ServiceHandoffs++
			}
			clear(stoodDown)
			primary[node] = e.Int("epoch")
		}
	}
}

// termEndDemote reports whether a demote hook's reason is the end of a
// term (not a startup demote, an operator's or a fencer's demote request,
// a local fence of an earlier term, or the demote after a stuck hook).
func termEndDemote(reason string) bool {
	switch reason {
	case "startup", reasonFenced, "fence_previous_term", "hook_unkillable", "":
		return false
	}
	return true
}

// checkStandDowns applies late_stand_down.
func checkStandDowns(h History, r *Report, add func(string, time.Time, string, ...any)) {
	type key struct {
		node  string
		epoch int64
	}
	window := map[key]time.Duration{} // T - L of the term, from its elected line
	type end struct {
		at     time.Time
		killed bool // a promote was running and got SIGTERM
	}
	ends := map[key]end{}
	lastToyDemote := map[string]time.Time{} // node -> its service's last stand-down
	judged := map[key]bool{}
	for _, e := range h {
		node := e.Get("node")
		k := key{node, e.Int("epoch")}
		switch e.Kind {
		case KindElected:
			T, err1 := time.ParseDuration(e.Get("session_timeout"))
			L, err2 := time.ParseDuration(e.Get("lease"))
			if err1 == nil && err2 == nil {
				window[k] = T - L
			}
		case KindState:
			if termStates[e.Get("from")] && e.Get("from") != "demoting" && e.Get("to") == "demoting" {
				if _, ok := ends[k]; !ok {
					ends[k] = end{at: e.At}
				}
			}
		case "hook_term":
			if e.Get("hook") == "promote" {
				if x, ok := ends[k]; !ok || e.At.Before(x.at) {
					ends[k] = end{at: e.At, killed: true}
				}
			}
		case KindToyDemote:
			if e.Get("was") == "primary" {
				lastToyDemote[node] = e.At
			}
		case "demote":
			x, ok := ends[k]
			w, wok := window[k]
			if !ok || !wok || judged[k] || !termEndDemote(e.Get("reason")) {
				continue
			}
			judged[k] = true
			sd := lastToyDemote[node]
			if sd.Before(x.at) {
				continue // the service was not primary any more: nothing stood down here
			}
			r.judge(VLateStandDown, 1)
			r.StandDowns++
			if x.killed {
				r.StandDownsAfterKill++
			}
			took := sd.Sub(x.at)
			if m := w - took; r.StandDowns == 1 || m < r.MinStandDownMargin {
				r.MinStandDownMargin = m
			}
			if took > w+LateStandDownSlack {
				how := "its transition to demoting"
				if x.killed {
					how = "the SIGTERM of its running promote"
				}
				add(VLateStandDown, sd, "%s's service stood down %v after its term at epoch %d ended (%s at %s), later than the %v its own arithmetic keeps free of successors (session_timeout - lease; slack %v): a successor could have been elected first",
					node, took.Round(time.Millisecond), k.epoch, how, x.at.Format("15:04:05.000"), w, LateStandDownSlack)
			}
		}
	}
}

// fmtMargin renders a margin for the summary ("none" without a sample).
func fmtMargin(n int, d time.Duration) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%s over %d", ms(d), n)
}
