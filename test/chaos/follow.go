package chaos

import "time"

// The follow hook under faults (clustertest's follow.sh logs "follow" with
// the FAILOVERD_LEADER_* it got when it starts, then "follow_done").
//
// Whom a node follows: a follow run names a leader (leader, leader_epoch)
// whose promote hook at that epoch had succeeded (its "promote_done")
// before the run started, and never the node itself. Only the no-leader
// run (reason=no_leader) names nobody. The daemon follows the promoted
// leader of cluster.LeaderOf, whose member record says "leader" only after
// its promote hook exited 0, which it does after logging promote_done: on
// one host clock, promote_done comes first.
//
// When a node follows: never inside one of its own terms. The daemon's
// controller holds a term from its state transition to "fencing" (reason
// elected) to its next transition to a state outside a term (standby,
// out, stopped, after the term's end demote), or the daemon's exit. A
// follow it started just before it learnt of its election is stopped at
// once ("stopping the follow hook", why=elected) and the promote waits
// for it, but the hook may log its start only after the term began (a
// fork and exec on a loaded host). So inside a term one follow line is
// allowed, when the daemon stopped a follow in that term and the line
// comes before the term's promote hook started; any other is a follow the
// daemon started while it held a term.

// Violation kinds of the follow rule.
const (
	// A follow run named no leader outside the no-leader run, itself, or
	// a leader whose promote at that epoch had not completed.
	VFollowBadLeader = "follow_bad_leader"
	// A follow started while its node held a term.
	VFollowInTerm = "follow_in_term"
)

// KindFollowStopped is the daemon's "stopping the follow hook" (why=).
const KindFollowStopped = "follow_stopped"

// termStates are the controller states that only a term has.
var termStates = map[string]bool{"fencing": true, "promoting": true, "leader": true, "demoting": true}

// controllerTerm is one term of a node as its controller logged it.
type controllerTerm struct {
	start    time.Time
	epoch    int64
	stopped  bool      // a follow was stopped in it
	promoted time.Time // its promote hook's start (zero: none yet)
	follows  []Event   // follow runs that logged their start inside it
}

// checkFollow applies the follow rule and counts the follow runs.
func checkFollow(h History, r *Report, add func(string, time.Time, string, ...any)) {
	type key struct {
		node  string
		epoch int64
	}
	promoted := map[key]time.Time{} // leader and epoch -> its promote_done
	open := map[string]*controllerTerm{}
	closeTerm := func(node string) {
		tm := open[node]
		if tm == nil {
			return
		}
		delete(open, node)
		for i, f := range tm.follows {
			if i == 0 && tm.stopped && (tm.promoted.IsZero() || f.At.Before(tm.promoted)) {
				continue // the follow running when it was elected, stopped
			}
			add(VFollowInTerm, f.At, "%s ran its follow hook (reason %s, leader %s at epoch %s) inside its own term at epoch %d (begun %s)",
				node, f.Get("reason"), f.Get("leader"), f.Get("leader_epoch"), tm.epoch, tm.start.Format("15:04:05.000"))
		}
	}
	for _, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case "promote_done":
			k := key{node, e.Int("epoch")}
			if _, ok := promoted[k]; !ok {
				promoted[k] = e.At
			}
		case "promote":
			if tm := open[node]; tm != nil && tm.promoted.IsZero() {
				tm.promoted = e.At
			}
		case KindState:
			switch to := e.Get("to"); {
			case to == "fencing": // only onTermWon enters it
				closeTerm(node)
				open[node] = &controllerTerm{start: e.At, epoch: e.Int("epoch")}
			case !termStates[to]:
				closeTerm(node)
			}
		case KindDaemonExit:
			closeTerm(node)
		case KindFollowStopped:
			if tm := open[node]; tm != nil {
				tm.stopped = true
			}
		case "follow":
			r.Follows++
			r.judge(VFollowBadLeader, 1)
			r.judge(VFollowInTerm, 1)
			if tm := open[node]; tm != nil {
				tm.follows = append(tm.follows, e)
			}
			checkFollowLeader(e, promoted[key{e.Get("leader"), e.Int("leader_epoch")}], add)
		}
	}
	for node := range open {
		closeTerm(node)
	}
}

// checkFollowLeader judges whom one follow run names; done is the named
// leader's promote_done at the named epoch (zero: none so far).
func checkFollowLeader(e Event, done time.Time, add func(string, time.Time, string, ...any)) {
	node, leader, reason := e.Get("node"), e.Get("leader"), e.Get("reason")
	switch {
	case leader == "" && reason == "no_leader":
	case leader == "":
		add(VFollowBadLeader, e.At, "%s ran its follow hook with no leader, reason %q (only the no_leader run has none)", node, reason)
	case reason == "no_leader":
		add(VFollowBadLeader, e.At, "%s ran its no_leader follow run naming %s at epoch %s", node, leader, e.Get("leader_epoch"))
	case leader == node:
		add(VFollowBadLeader, e.At, "%s ran its follow hook towards itself (epoch %s, reason %s)", node, e.Get("leader_epoch"), reason)
	case done.IsZero():
		add(VFollowBadLeader, e.At, "%s followed %s at epoch %s (reason %s), whose promote at that epoch had not completed",
			node, leader, e.Get("leader_epoch"), reason)
	}
}
