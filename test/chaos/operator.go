package chaos

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// The operator's controls under faults: a maintenance pause, pre_promote
// vetoes, and a fence that gets a wrong answer.
const (
	// The cluster is paused (POST /v1/pause), every node reports it, and
	// then the leader's failoverd is SIGKILLed and restarted while still
	// paused (variant 0), or the leader's service is killed, so its health
	// fails (1). Nobody may promote, fence, or demote on its own until the
	// resume (paused_action); a term that loses its lease still demotes.
	PauseCluster = "pause-cluster"
	// Every standby that may lead vetoes in pre_promote while the leader
	// cedes: each one that wins gives its term back (promoted_after_veto
	// has something to judge every time), until the leader's cede is over.
	VetoTakeover = "veto-takeover"
	// The admin URL the leader advertises (and the breadcrumb names) is
	// answered by a stub: 200 with "demoted": true, but another node's id
	// (variant 0) or the fenced node's id with an epoch below the fenced
	// one (1). The leader's failoverd is SIGKILLed (its service stays
	// primary): the successor's rpc fence must fail over to the next
	// method (fenced_by_wrong_answer).
	FenceWrongAnswer = "fence-wrong-answer"
	// The operator runs `failoverd breadcrumb clear` while the leader runs
	// (variant 0 plain, 1 with --force): it must be refused (clear_accepted),
	// as without the breadcrumb the next leader would not fence this one.
	// Then the leader's failoverd is SIGKILLed (its service stays primary)
	// and restarted after 2-4s: the successor must still fence it before
	// it promotes (service_overlap, stale_write).
	BreadcrumbClear = "operator-breadcrumb-clear"
)

// OperatorKinds lists them.
var OperatorKinds = []string{PauseCluster, VetoTakeover, FenceWrongAnswer, BreadcrumbClear}

// Harness event kinds of the operator's controls.
const (
	KindPause        = "pause"                // phase=on|off|unconfirmed fault=: the window every node saw paused
	KindStubAnswer   = "fence_stub_answer"    // node= from= target_epoch= answered_node= answered_epoch= fault=
	KindFenceAttempt = "fence_attempt_daemon" // method= target= outcome=: one method of the fencer's chain (its log)
	KindClear        = "breadcrumb_clear"     // node= force= code= absent=: the operator's breadcrumb clear and its exit code
)

// Violation kinds of the operator's controls.
const (
	// A node promoted, fenced, or demoted on its own (not for a lost lease
	// or session) while every node reported the cluster paused.
	VPausedAction = "paused_action"
	// A node counted an rpc fence as done on a wrong answer.
	VFencedByWrongAnswer = "fenced_by_wrong_answer"
	// `failoverd breadcrumb clear` deleted the breadcrumb of a leader
	// whose failoverd was running.
	VClearAccepted = "clear_accepted"
)

func init() {
	harnessKinds[KindPause] = true
	harnessKinds[KindStubAnswer] = true
	harnessKinds[KindClear] = true
	for _, k := range OperatorKinds {
		noVetoKinds[k] = true
	}
	// The fencer's own account of each method it tried.
	daemonMessages["fence attempt failed"] = KindFenceAttempt
	daemonMessages["fence attempt succeeded"] = KindFenceAttempt
}

// adminPost sends an authenticated POST to a node's admin API.
func (e *Env) adminPost(n *clustertest.Node, path string) error {
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.AdminAddr+path, strings.NewReader(`{"reason":"chaos"}`))
	req.Header.Set("Authorization", "Bearer "+e.C.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s on %s: %s", path, n.ID, resp.Status)
	}
	return nil
}

// allReport waits up to d until every running node's status satisfies ok.
func (e *Env) allReport(d time.Duration, ok func(n *clustertest.Node) bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		all := true
		for _, n := range e.C.Nodes {
			if n.Running() && !ok(n) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// waitStandby waits up to d until one of nodes reports standby (in the
// election): a fault that needs a successor must not strike while every
// other node is out (backing off, or ceded by the fault before).
func (e *Env) waitStandby(nodes []*clustertest.Node, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, n := range nodes {
			if st, ok := n.Status(); ok && st.State == controller.StateStandby {
				return true
			}
		}
	}
	return false
}

// anyOther returns a running node other than n.
func (e *Env) anyOther(n *clustertest.Node) *clustertest.Node {
	for _, o := range e.C.Nodes {
		if o != n && o.Running() {
			return o
		}
	}
	return n
}

// pauseCluster injects pause-cluster.
func (m *Nemesis) pauseCluster(id int, leader *clustertest.Node, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	variant := (m.count[PauseCluster] - 1) % 2
	inject(leader.ID, "variant", variant)
	if err := e.adminPost(leader, adminapi.PausePath); err != nil {
		e.t.Logf("fault %d (%s): %v", id, PauseCluster, err)
	}
	seen := e.allReport(10*time.Second, func(n *clustertest.Node) bool { st, ok := n.Status(); return ok && st.Paused != nil })
	phase := "on"
	if !seen {
		phase = "unconfirmed" // not judged: a node that did not see it may act
	}
	e.Log(KindPause, "phase", phase, "fault", id)
	switch variant {
	case 0:
		// The leader dies while paused and comes back while paused: its
		// session expires, nobody replaces or fences it, and the
		// restarted daemon runs no startup demote.
		e.expectKill(leader)
		leader.Kill(syscall.SIGKILL)
		time.Sleep(holdIn(e.Session+2*time.Second, e.Session+3*time.Second))
		leader.Start()
		time.Sleep(2 * time.Second)
	case 1:
		// The leader's service dies: the paused leader keeps its term
		// although its health fails, and nobody takes over.
		leader.KillToy()
		time.Sleep(holdIn(e.Session+2*time.Second, e.Session+4*time.Second))
	}
	e.Log(KindPause, "phase", "off", "fault", id)
	if err := e.adminPost(e.anyOther(leader), adminapi.ResumePath); err != nil {
		e.t.Logf("fault %d (%s): resume: %v", id, PauseCluster, err)
		e.adminPost(leader, adminapi.ResumePath)
	}
	e.allReport(10*time.Second, func(n *clustertest.Node) bool { st, ok := n.Status(); return ok && st.Paused == nil })
	if variant == 1 {
		leader.ReviveToy()
	}
	heal(leader.ID)
}

// pausedDemoteOK are the demote reasons a pause allows: a term that loses
// its lease or session still demotes (the node cannot know whether a
// successor takes over).
var pausedDemoteOK = map[string]bool{"lease_expired": true, "session_expired": true, "znode_deleted": true}

// checkPaused applies paused_action to every window in which every node
// reported the pause.
func checkPaused(h History, r *Report, add func(string, time.Time, string, ...any)) {
	on := false
	var since time.Time
	for _, e := range h {
		if e.Kind == KindPause {
			switch e.Get("phase") {
			case "on":
				on, since = true, e.At
				r.PauseWindows++
				r.judge(VPausedAction, 1)
			default:
				on = false
			}
			continue
		}
		if !on {
			continue
		}
		node := e.Get("node")
		what := ""
		switch e.Kind {
		case KindPrePromote, "promote":
			what = e.Kind + " hook at epoch " + e.Get("epoch")
		case "fence_attempt", "fence":
			what = e.Kind + " of " + e.Get("target")
		case KindFenced:
			what = "fenced " + e.Get("target") + " (" + e.Get("method") + ")"
		case "demote", "demote_failed":
			if !pausedDemoteOK[e.Get("reason")] {
				what = e.Kind + " (reason " + e.Get("reason") + ")"
			}
		}
		if what != "" {
			add(VPausedAction, e.At, "%s: %s while the cluster was paused (since %s)", node, what, since.Format("15:04:05.000"))
		}
	}
}

// vetoTakeover injects veto-takeover.
func (m *Nemesis) vetoTakeover(id int, leader *clustertest.Node, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	var vetoing []*clustertest.Node
	for _, n := range e.C.Nodes {
		if n != leader && e.Policy.CanLead(n.ID) {
			vetoing = append(vetoing, n)
		}
	}
	e.waitStandby(vetoing, 20*time.Second)
	inject(leader.ID, "vetoing", len(vetoing))
	for _, n := range vetoing {
		touch(e.t, vetoFile(n))
		e.Log(KindVeto, "phase", "on", "node", n.ID, "fault", id)
	}
	mark := e.eventsMark()
	cede(e, leader, holdIn(3*time.Second, 5*time.Second))
	if len(vetoing) > 0 {
		if _, ok := e.waitEvent(mark, 15*time.Second, KindPrePromoteVeto); !ok {
			e.t.Logf("fault %d (%s): no pre_promote vetoed within 15s", id, VetoTakeover)
		}
	}
	time.Sleep(holdIn(500*time.Millisecond, 1500*time.Millisecond))
	for _, n := range vetoing {
		os.Remove(vetoFile(n))
		e.Log(KindVeto, "phase", "off", "node", n.ID, "fault", id)
	}
	heal(leader.ID)
}

// fenceStub answers the rpc fencer's demote requests wrongly.
type fenceStub struct {
	e       *Env
	fault   int
	node    string // the node whose admin URL it stands behind
	variant int
	other   string // variant 0: the node id it answers with
	ln      net.Listener
	srv     *http.Server
}

func (s *fenceStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req adminapi.DemoteRequest
	json.NewDecoder(r.Body).Decode(&req)
	ans := adminapi.DemoteResponse{Demoted: true, NodeID: s.other, Epoch: req.Epoch}
	if s.variant == 1 {
		ans.NodeID, ans.Epoch = s.node, req.Epoch-1
	}
	s.e.Log(KindStubAnswer, "node", s.node, "from", req.From, "target", req.Target, "target_epoch", req.Epoch,
		"answered_node", ans.NodeID, "answered_epoch", ans.Epoch, "fault", s.fault, "path", r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(ans)
}

// fenceWrongAnswer injects fence-wrong-answer.
func (m *Nemesis) fenceWrongAnswer(id int, leader *clustertest.Node, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	variant := (m.count[FenceWrongAnswer] - 1) % 2
	s := &fenceStub{e: e, fault: id, node: leader.ID, variant: variant, other: e.anyOther(leader).ID}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	s.ln, s.srv = ln, &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	defer s.srv.Close()
	answer := "node_id " + s.other
	if variant == 1 {
		answer = "epoch below the fenced one"
	}
	inject(leader.ID, "variant", variant, "answer", answer)
	e.crashBehind(leader, ln.Addr().String(), holdIn)
	heal(leader.ID)
}

// crashBehind kills leader's daemon while its peers reach addr (a stub)
// in its place, waits until another node leads (it fenced the leader by
// another method) or long enough to be sure none will, and starts it
// again.
func (e *Env) crashBehind(leader *clustertest.Node, addr string, holdIn func(lo, hi time.Duration) time.Duration) {
	leader.SetPeerTarget(addr)
	defer leader.SetPeerTarget("")
	e.expectKill(leader)
	leader.Kill(syscall.SIGKILL)
	for end := time.Now().Add(e.Session + 20*time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if l := e.Leader(); l != nil && l != leader {
			break
		}
	}
	time.Sleep(holdIn(300*time.Millisecond, time.Second))
	leader.SetPeerTarget("")
	leader.Start()
}

// checkWrongFenceAnswers applies fenced_by_wrong_answer: after the stub
// answered a node's rpc fence of a target, that node must not report the
// target fenced by rpc in the same term; it must go on to the next method.
func checkWrongFenceAnswers(h History, r *Report, add func(string, time.Time, string, ...any)) {
	type answer struct {
		at      time.Time
		target  string
		epoch   string
		what    string
		fellOut bool
	}
	pending := map[string]*answer{} // fencer -> the stub's last answer to it in this term
	for _, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case KindStubAnswer:
			from := e.Get("from")
			r.WrongFenceAnswers++
			r.judge(VFencedByWrongAnswer, 1)
			pending[from] = &answer{at: e.At, target: e.Get("target"), epoch: e.Get("target_epoch"),
				what: fmt.Sprintf("node %s, epoch %s", e.Get("answered_node"), e.Get("answered_epoch"))}
		case KindElected:
			delete(pending, node)
		case "fence_attempt":
			if a := pending[node]; a != nil && a.target == e.Get("target") && !a.fellOut {
				a.fellOut = true
				r.WrongAnswerFellBack++
			}
		case KindFenced:
			a := pending[node]
			if a == nil || a.target != e.Get("target") {
				continue
			}
			if e.Get("method") == "rpc" {
				add(VFencedByWrongAnswer, e.At, "%s counted %s (epoch %s) fenced by rpc on a wrong answer (%s at %s)",
					node, a.target, a.epoch, a.what, a.at.Format("15:04:05.000"))
			}
			delete(pending, node)
		}
	}
}

// breadcrumbClear injects operator-breadcrumb-clear.
func (m *Nemesis) breadcrumbClear(id int, leader *clustertest.Node, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	force := (m.count[BreadcrumbClear] - 1) % 2
	inject(leader.ID, "variant", force)
	args := []string{"breadcrumb", "clear"}
	if force == 1 {
		args = append(args, "--force")
	}
	out, code := leader.CLI(args...)
	e.Log(KindClear, "node", leader.ID, "force", force == 1, "code", code, "absent", strings.Contains(out, "no breadcrumb"))
	if code == 0 {
		e.t.Logf("fault %d (%s): the clear was accepted: %s", id, BreadcrumbClear, strings.TrimSpace(out))
	}
	e.expectKill(leader)
	leader.Kill(syscall.SIGKILL)
	time.Sleep(holdIn(2*time.Second, 4*time.Second))
	leader.Start()
	heal(leader.ID)
}

// checkBreadcrumbClears applies clear_accepted: every clear the operator
// ran while the leader's failoverd was running must have been refused
// (a non-zero exit), unless there was no breadcrumb to clear.
func checkBreadcrumbClears(h History, r *Report, add func(string, time.Time, string, ...any)) {
	for _, e := range h {
		if e.Kind != KindClear || e.Get("absent") == "true" {
			continue
		}
		r.judge(VClearAccepted, 1)
		if e.Get("code") == "0" {
			add(VClearAccepted, e.At, "breadcrumb clear (force %s) deleted the breadcrumb of %s while its failoverd ran",
				e.Get("force"), e.Get("node"))
		}
	}
}
