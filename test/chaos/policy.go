package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// The promotion policy under faults: node priorities and a
// pre_promote hook that vetoes now and then, both drawn from the run's seed.
//
// Priorities: in a share of runs (every slice run) one node has priority 0
// and never campaigns; the others get 1..3. The harness logs every node's
// priority at the start ("node_config"), so the checker judges the history
// alone, saved artifacts included.
//
// Vetoes: every node has clustertest's pre_promote hook, which vetoes while
// the node's directory holds pre-promote-veto. For a seeded share of the
// faults the nemesis puts that file on one candidate from just before the
// injection to just before the heal ("veto phase=on|off"), so a veto never
// outlasts the fault and liveness is still judged from the heal. Faults
// that need a particular node to lead while they last (hook-unkillable's
// takeover, the rejoin of zk-names and zk-handshake-drop) and the lagging
// server's retries get none.

// Harness event kinds of the policy.
const (
	KindNodeConfig = "node_config" // node= priority=: how the harness configured a node
	KindVeto       = "veto"        // phase=on|off node= fault=: the node's pre_promote vetoes while on
	// The pre_promote hook's own lines (clustertest's pre_promote.sh).
	KindPrePromote     = "pre_promote"
	KindPrePromoteVeto = "pre_promote_veto"
	// The daemons' decisions (their logs): a won term handed over to a
	// better candidate (to= reason= epoch=), a won term declined (why=
	// epoch= asked=), a leader handing over to a higher priority (to=).
	KindHandoverAtWin = "handover_at_win"
	KindDeclined      = "declined"
	KindPreempt       = "preempt"
)

func init() {
	harnessKinds[KindNodeConfig] = true
	harnessKinds[KindVeto] = true
}

// Violation kinds of the policy.
const (
	// A node configured with priority 0 was elected or ran its promote hook.
	VPromotedPriorityZero = "promoted_priority_zero"
	// A node ran its promote hook in a term (node and epoch) in which its
	// pre_promote hook had vetoed.
	VPromotedAfterVeto = "promoted_after_veto"
	// A node ran its promote hook in a term in which it had decided not to
	// (it handed over to a better candidate, or declined as lagging).
	VPromotedAfterDecline = "promoted_after_decline"
)

// VetoShare is the share of (eligible) faults, in percent, during which one
// candidate's pre_promote vetoes.
const VetoShare = 30

// ZeroPriorityShare is the share of runs, in percent, with a priority-0 node
// (the slice always has one).
const ZeroPriorityShare = 67

// Policy is a run's promotion policy, drawn from its seed.
type Policy struct {
	Priority map[string]int // node id -> node.priority
}

// nodeIDs are clustertest's node ids for a 3-node cluster.
var nodeIDs = []string{"node-a", "node-b", "node-c"}

// DrawPolicy draws a run's priorities from its seed: in ZeroPriorityShare
// of the runs (all of them with forceZero) one node gets priority 0, and
// every other node 1..3.
func DrawPolicy(seed uint64, forceZero bool) Policy {
	rng := rand.New(rand.NewPCG(seed, 0x13))
	zero := rng.IntN(100) < ZeroPriorityShare || forceZero
	zeroNode := rng.IntN(len(nodeIDs))
	p := Policy{Priority: map[string]int{}}
	for i, id := range nodeIDs {
		p.Priority[id] = 1 + rng.IntN(3)
		if zero && i == zeroNode {
			p.Priority[id] = 0
		}
	}
	return p
}

// String renders the priorities in node order: "node-a=2 node-b=0 node-c=1".
func (p Policy) String() string {
	ids := make([]string, 0, len(p.Priority))
	for id := range p.Priority {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%s=%d", id, p.Priority[id]))
	}
	return strings.Join(parts, " ")
}

// CanLead reports whether the node campaigns at all (priority above 0).
func (p Policy) CanLead(id string) bool {
	pr, ok := p.Priority[id]
	return !ok || pr > 0
}

// logPolicy records every node's configuration in the history.
func (e *Env) logPolicy() {
	for _, n := range e.C.Nodes {
		pr, ok := e.Policy.Priority[n.ID]
		if !ok {
			pr = 1 // the daemon's default
		}
		e.Log(KindNodeConfig, "node", n.ID, "priority", pr, "pre_promote", true)
	}
}

// leadable returns n if it can lead, else the next node (in node order)
// that can: a fault that needs its target to lead again must not pick a
// priority-0 node.
func (e *Env) leadable(n *clustertest.Node) *clustertest.Node {
	for i, m := range e.C.Nodes {
		if m != n {
			continue
		}
		for k := range e.C.Nodes {
			if c := e.C.Nodes[(i+k)%len(e.C.Nodes)]; e.Policy.CanLead(c.ID) {
				return c
			}
		}
	}
	return n
}

// noVetoKinds are the faults during which no pre_promote vetoes and no node
// lags on the side (lagging-failover chooses its own): a node
// must lead while they last, or they wait for recoveries of their own.
// handover-successor-killed needs a successor that takes over within
// seconds of the cede: with one candidate vetoing and the other lagging,
// 18 of its 26 injections in a long etcd run found none to kill.
var noVetoKinds = map[string]bool{HookUnkillable: true, NamesZK: true, HandshakeDrop: true, LostReplyLagging: true,
	LaggingFailover: true, HandoverKill: true}

// vetoFile is the file that makes n's pre_promote hook veto.
func vetoFile(n *clustertest.Node) string { return filepath.Join(n.Dir(), "pre-promote-veto") }

// veto is one fault's pre_promote veto: on from before the injection until
// before the heal.
type veto struct {
	e    *Env
	node *clustertest.Node // nil: none in this fault
	id   int
}

// newVeto picks the candidate whose pre_promote vetoes during fault id of
// kind, from the step's draws (roll in 0..99, pick any): for most faults
// none, else one that can lead other than the leader (its likely successor).
func (e *Env) newVeto(kind string, id, roll, pick int, leader *clustertest.Node) *veto {
	v := &veto{e: e, id: id}
	if noVetoKinds[kind] || roll >= VetoShare {
		return v
	}
	v.node = e.pickSuccessor(leader, pick)
	return v
}

// successors lists the nodes other than leader that the policy lets lead.
func (e *Env) successors(leader *clustertest.Node) []*clustertest.Node {
	var cands []*clustertest.Node
	for _, n := range e.C.Nodes {
		if n != leader && e.Policy.CanLead(n.ID) {
			cands = append(cands, n)
		}
	}
	return cands
}

// pickSuccessor picks, by the step's draw pick, one of the nodes that can
// lead other than leader (nil: none).
func (e *Env) pickSuccessor(leader *clustertest.Node, pick int) *clustertest.Node {
	cands := e.successors(leader)
	if len(cands) == 0 {
		return nil
	}
	return cands[pick%len(cands)]
}

func (v *veto) on() {
	if v.node == nil {
		return
	}
	touch(v.e.t, vetoFile(v.node))
	v.e.Log(KindVeto, "phase", "on", "node", v.node.ID, "fault", v.id)
}

func (v *veto) off() {
	if v.node == nil {
		return
	}
	os.Remove(vetoFile(v.node))
	v.e.Log(KindVeto, "phase", "off", "node", v.node.ID, "fault", v.id)
	v.node = nil
}

// checkPolicy applies the policy's rules: a priority-0 node is never
// elected and never promotes (priorities hold for the whole run, so the
// harness's node_config lines count wherever they are in the history), and
// a term whose pre_promote vetoed never promotes. It also counts what was
// judged.
func checkPolicy(h History, r *Report, add func(string, time.Time, string, ...any)) {
	zero := map[string]bool{}
	for _, e := range h {
		if e.Kind == KindNodeConfig {
			r.Priorities = append(r.Priorities, e.Get("node")+"="+e.Get("priority"))
			if e.Get("priority") == "0" {
				zero[e.Get("node")] = true
				r.PriorityZero = append(r.PriorityZero, e.Get("node"))
			}
		}
	}
	type key struct {
		node  string
		epoch int64
	}
	vetoed := map[key]time.Time{}
	declined := map[key]time.Time{}                         // terms that handed over or declined
	handovers, done := map[string]bool{}, map[string]bool{} // request ids
	r.Handovers = map[string]int{}
	for _, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case KindElected:
			if zero[node] {
				add(VPromotedPriorityZero, e.At, "%s, configured with priority 0, was elected at epoch %d (it must not campaign)", node, e.Int("epoch"))
			} else if len(zero) > 0 {
				r.ElectionsWithoutZero++
				r.judge(VPromotedPriorityZero, 1)
			}
		case "promote":
			if zero[node] {
				add(VPromotedPriorityZero, e.At, "%s, configured with priority 0, ran its promote hook at epoch %d", node, e.Int("epoch"))
			}
			if at, ok := declined[key{node, e.Int("epoch")}]; ok {
				add(VPromotedAfterDecline, e.At, "%s promoted at epoch %d although it decided at %s not to (handed over or declined)",
					node, e.Int("epoch"), at.Format("15:04:05.000"))
			}
			if at, ok := vetoed[key{node, e.Int("epoch")}]; ok {
				add(VPromotedAfterVeto, e.At, "%s promoted at epoch %d although its pre_promote vetoed that term at %s",
					node, e.Int("epoch"), at.Format("15:04:05.000"))
			}
		case KindHandoverAtWin, KindDeclined:
			if e.Kind == KindHandoverAtWin {
				r.HandoversAtWin++
			} else {
				r.Declines++
			}
			declined[key{node, e.Int("epoch")}] = e.At
			r.judge(VPromotedAfterDecline, 1)
		case KindPreempt:
			r.Preemptions++
		case KindPrePromote:
			r.PrePromotes++
		case KindPrePromoteVeto:
			r.Vetoes++
			r.judge(VPromotedAfterVeto, 1)
			vetoed[key{node, e.Int("epoch")}] = e.At
		case KindVeto:
			if e.Get("phase") == "on" {
				r.VetoFaults++
			}
		case KindFailoverRequest:
			id := e.Get("id")
			if reason := e.Get("reason"); strings.HasPrefix(reason, "preferred_") && !handovers[id] {
				handovers[id] = true
				r.Handovers[reason]++
			}
			if e.Get("done") == "true" && handovers[id] && !done[id] {
				done[id] = true
				r.HandoversDone++
			}
		}
	}
}
