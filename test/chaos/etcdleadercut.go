package chaos

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// EtcdIsolatePinned: the failoverd leader's only etcd member is the etcd
// leader, and that member is cut off from its peers (its clients stay
// connected) past the leader's lease, at a short TTL. An etcd leader cut
// off from its quorum answers keepalives locally until CheckQuorum makes
// it step down (about two election timeouts), while the majority elects
// a new leader after about one and extends leases by one election timeout
// only: a daemon that counted those answers would keep its term past the
// real expiry, by up to two heartbeat intervals less TTL/20, which is
// more than nothing only at a short TTL. The node with the highest
// priority (the leader first among equals) is restarted gracefully with
// etcd.endpoints naming only its own client proxy to one member,
// etcd.lease_ttl EtcdPinnedTTL and a demote timeout that TTL holds; it is
// made leader, that member is made the etcd leader (etcdtest.MoveLeader),
// and the member is isolated until a successor promoted (at most
// EtcdPinnedHold). The old leader must stand down before a successor
// promotes: overlap, service_overlap and stale_leader judge it. The heal
// restores the config and restarts the node gracefully again.
//
// Those rules leave the successor seconds of room (it wins only once etcd
// expired the lease, an election timeout after its new leader took over),
// so they do not see a term stretched by a second or two. The nemesis
// therefore also polls the node's status through the cut: no renewal sent
// after the cut can be confirmed (its read needs the isolated member's
// quorum), so the term must end by cut + TTL - TTL/20 - the demote budget
// (EtcdPinnedEndBound). Each status gives a lower bound of the daemon's
// own term end: the time the request was sent plus the lease_remaining
// the daemon computed later. One above the bound is a pinned_term_extended
// violation: a renewal the isolated etcd leader answered counted.
const EtcdIsolatePinned = "etcd-isolate-pinned-leader"

// KindPinnedTerm records what the status polls saw: node= epoch= polls=
// (statuses with a term) end= (the latest term end seen, after the cut;
// "none") bound= (EtcdPinnedEndBound).
const KindPinnedTerm = "etcd_pinned_term"

// VPinnedTermExtended: a term pinned to an isolated etcd leader was to
// end later than a renewal sent before the cut allows.
const VPinnedTermExtended = "pinned_term_extended"

// EtcdPinnedEndBound is the latest a correct daemon's term can end after
// the cut: its last counted renewal was sent before it, so its Expiry is
// at most TTL - TTL/20 after the cut, and the term ends the demote budget
// earlier. 100ms are allowed for bytes in flight through the peer proxies
// when Isolate returns.
const EtcdPinnedEndBound = EtcdPinnedTTL - EtcdPinnedTTL/20 - (EtcdPinnedDemoteTimeout + 2*controller.KillGrace) + 100*time.Millisecond

// EtcdPinnedTTL and EtcdPinnedDemoteTimeout are the pinned node's
// etcd.lease_ttl and service.demote.timeout for the fault: at 3s, TTL/20
// (150ms) is below two of etcdtest's heartbeat intervals (200ms), the case
// the confirming read exists for. The lease holds a budget of 1.75s (TTL
// less TTL/20, the renew interval and etcdcluster.MinTolerance); the
// demote timeout and two kill graces take 1.3s of it, leaving a renewal
// 0.45s to be answered.
const (
	EtcdPinnedTTL           = 3 * time.Second
	EtcdPinnedDemoteTimeout = 800 * time.Millisecond
)

// EtcdPinnedHold bounds the wait, after the cut, for a successor's
// promote: its lease expiry (TTL after the new etcd leader took over,
// plus an election timeout), fencing and the promote, with room for a
// loaded machine.
const EtcdPinnedHold = 30 * time.Second

func init() {
	// The pinned node must lead: no veto, no lagging node on the side.
	noVetoKinds[EtcdIsolatePinned] = true
	harnessKinds[KindPinnedTerm] = true
}

var (
	endpointsLine = regexp.MustCompile(`(?m)^(  endpoints: )\[[^\]]*\]$`)
	leaseTTLLine  = regexp.MustCompile(`(?m)^(  lease_ttl: )\S+$`)
)

// pinnedConfig returns cfg with etcd.endpoints set to endpoint alone, the
// lease TTL and the demote timeout set to the fault's.
func pinnedConfig(cfg, endpoint string) (string, error) {
	for _, re := range []*regexp.Regexp{endpointsLine, leaseTTLLine, demoteTimeoutLine} {
		if !re.MatchString(cfg) {
			return "", fmt.Errorf("no match for %s in the config", re)
		}
	}
	cfg = endpointsLine.ReplaceAllString(cfg, "${1}["+endpoint+"]")
	cfg = leaseTTLLine.ReplaceAllString(cfg, "${1}"+EtcdPinnedTTL.String())
	return demoteTimeoutLine.ReplaceAllString(cfg, "${1}"+EtcdPinnedDemoteTimeout.String()), nil
}

// topCandidate returns the node with the highest priority, leader first
// among equals: made leader, it is not preempted.
func (e *Env) topCandidate(leader *clustertest.Node) *clustertest.Node {
	best, bestPr := leader, -1
	for _, n := range append([]*clustertest.Node{leader}, e.C.Nodes...) {
		pr, ok := e.Policy.Priority[n.ID]
		if !ok {
			pr = 1
		}
		if pr > bestPr {
			best, bestPr = n, pr
		}
	}
	return best
}

// restartWith writes cfg to n's config file and restarts its failoverd
// gracefully (SIGTERM, as an operator would).
func (e *Env) restartWith(n *clustertest.Node, cfg string, what string) {
	must(e.t, writeFileAtomic(n.Config, []byte(cfg), 0o644))
	e.expectKill(n)
	n.Signal(syscall.SIGTERM)
	if _, ok := n.Wait(time.Minute); !ok {
		e.t.Fatalf("%s: %s did not stop within a minute of SIGTERM", what, n.ID)
	}
	n.Start()
}

// etcdIsolatePinned injects etcd-isolate-pinned-leader.
func (m *Nemesis) etcdIsolatePinned(id int, leader *clustertest.Node, pick int, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	et := e.C.Etcd
	what := fmt.Sprintf("fault %d (%s)", id, EtcdIsolatePinned)
	n := e.topCandidate(leader)
	j := pick % len(et.Members)
	target := fmt.Sprintf("m%d", j)
	b, err := os.ReadFile(n.Config)
	if err != nil {
		e.t.Fatal(err)
	}
	orig := string(b)
	pinned, err := pinnedConfig(orig, "http://"+n.EtcdDelayProxies[j].Addr())
	if err != nil {
		e.t.Fatalf("%s: %s: %v", what, n.Config, err)
	}
	defer writeFileAtomic(n.Config, b, 0o644) // the file as at start, whatever happened (it may be read right then)

	// The partition puts n and its member on one side and everything
	// else on the other. The other nodes' client connections to the
	// member are reset and new ones held from the start, so their
	// clients go through the other members only: kept open, as Isolate
	// keeps n's, they would stall every request that lands on the member
	// for etcd's request timeout (no successor took over while a 30s cut
	// lasted); held without a reset, gRPC's keepalive gave them up only
	// after 12s. Odd injections also hold n's peer proxy during the cut,
	// so the successor's rpc fence times out and the shell fencer stands
	// n's service down.
	variant := (m.count[EtcdIsolatePinned] - 1) % 2
	others := func(on bool) {
		for _, o := range e.C.Nodes {
			if o != n {
				o.EtcdDelayProxies[j].Blackhole(on)
				if on {
					o.EtcdDelayProxies[j].Reset()
				}
			}
		}
	}
	inject(n.ID, "member", target, "ttl", EtcdPinnedTTL, "variant", variant)
	e.restartWith(n, pinned, what)
	others(true)
	led := e.MakeLeader(n, RejoinBound)
	// The successors were ceded for a while to make n lead: one of them
	// must be back in the election before the cut, or nobody could take
	// over at once.
	e.waitStandby(e.successors(n), 15*time.Second)
	et.MoveLeader(j)
	time.Sleep(1500 * time.Millisecond) // renewals confirmed in the new raft term
	if lead, _ := e.etcdRoles(); lead != j {
		et.MoveLeader(j)
	}
	lead, _ := e.etcdRoles()
	role := "follower"
	if lead == j {
		role = "leader"
	}
	st, _ := n.Status()
	if !led || st.State != controller.StateLeader || role != "leader" {
		e.t.Logf("%s did not apply as meant: %s led %v (state %s), %s the etcd %s", what, n.ID, led, st.State, target, role)
	}
	mark := e.eventsMark()
	cut := e.Log("etcd_isolate", "server", target, "role", role, "pinned", n.ID, "state", st.State, "epoch", st.Epoch,
		"ttl", EtcdPinnedTTL, "variant", variant)
	et.Isolate(j)
	cutAt := time.Now() // every counted renewal was sent before this
	if variant == 1 {
		n.PeerProxy.Blackhole(true)
	}

	// Held until another node promoted (its lease gone, fenced), then a
	// little longer; n's term end is polled until the term is over.
	var demote, promote clustertest.Event
	var latest time.Time
	polls, polling := 0, true
	for end := time.Now().Add(EtcdPinnedHold); time.Now().Before(end) && promote.At.IsZero(); time.Sleep(50 * time.Millisecond) {
		if polling {
			sent := time.Now()
			if s, ok := n.Status(); ok && s.Epoch == st.Epoch && s.LeaseRemaining > 0 {
				polls++
				if t := sent.Add(time.Duration(s.LeaseRemaining * float64(time.Second))); t.After(latest) {
					latest = t
				}
			} else if ok {
				polling = false // the term is over (or n was not leading)
			}
		}
		for _, ev := range e.eventsSince(mark) {
			switch {
			case ev.Kind == "demote" && ev.KV["node"] == n.ID && demote.At.IsZero():
				demote = ev
			case ev.Kind == "promote" && ev.KV["node"] != n.ID && promote.At.IsZero():
				promote = ev
			}
		}
	}
	rel := func(ev clustertest.Event) string {
		if ev.At.IsZero() {
			return "never"
		}
		return "+" + ev.At.Sub(cut).Round(time.Millisecond).String()
	}
	endSeen := "none"
	if !latest.IsZero() {
		endSeen = latest.Sub(cutAt).Round(time.Millisecond).String()
	}
	e.Log(KindPinnedTerm, "node", n.ID, "epoch", st.Epoch, "polls", polls, "end", endSeen, "bound", EtcdPinnedEndBound)
	e.t.Logf("%s, variant %d: %s (pinned to %s, the etcd %s at the cut, TTL %v) polled term end +%s (bound +%v), demoted at %s; %s promoted at %s",
		what, variant, n.ID, target, role, EtcdPinnedTTL, endSeen, EtcdPinnedEndBound, rel(demote), promote.KV["node"], rel(promote))
	time.Sleep(holdIn(500*time.Millisecond, 2*time.Second))
	et.Heal(j)
	n.PeerProxy.Blackhole(false)
	others(false)
	e.restartWith(n, orig, what)
	heal(n.ID)
	e.etcdServing(EtcdServingBound)
}

// checkPinnedTerm applies pinned_term_extended.
func checkPinnedTerm(h History, r *Report, add func(string, time.Time, string, ...any)) {
	for _, ev := range h {
		if ev.Kind != KindPinnedTerm {
			continue
		}
		polls, _ := strconv.Atoi(ev.Get("polls"))
		end, err1 := time.ParseDuration(ev.Get("end"))
		bound, err2 := time.ParseDuration(ev.Get("bound"))
		if polls == 0 || err1 != nil || err2 != nil {
			continue // n did not lead at the cut: nothing to judge
		}
		r.judge(VPinnedTermExtended, 1)
		if end > bound {
			add(VPinnedTermExtended, ev.At, "%s's term (epoch %s), its only etcd member cut off from its peers, was to end %v after the cut, past %v: "+
				"a renewal sent after the cut counted", ev.Get("node"), ev.Get("epoch"), end, bound)
		}
	}
}
