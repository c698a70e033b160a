package chaos

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// Fault kinds. Each is injected, held for a random while, then healed.
const (
	// 1. SIGKILL of the leader's failoverd, restarted at the heal.
	KillDaemon = "kill-daemon"
	// 1. SIGKILL of the leader's service (the toy), restarted with -standby
	// at the heal (after the daemon has seen it fail: hold > health fall).
	KillService = "kill-service"
	// 2. SIGSTOP of the leader's failoverd for longer than the session
	// timeout, then SIGCONT: the GC-pause case.
	PauseDaemon = "pause-daemon"
	// 2. SIGSTOP of the leader's service, the client of the fenced store,
	// for longer than it takes a successor to take over; then SIGCONT.
	// The fencer cannot reach the frozen service and, in this demo, counts
	// that as down (examples/README.md), so the service wakes up still
	// primary at its old epoch: only the store's epoch check (the fencing
	// token) stops its writes. This is the case rejected stale writes count.
	PauseService = "pause-service"
	// 3. SIGKILL of one ZooKeeper server, restarted at the heal.
	ZKKillLeader   = "zk-kill-leader"
	ZKKillFollower = "zk-kill-follower"
	// 4. Every ZooKeeper server killed, all restarted at the heal.
	ZKOutage = "zk-outage"
	// 5. One node cut off from every ZooKeeper server through its proxies:
	// bytes held (blackhole), delayed (latency), connections reset.
	PartitionZK = "partition-zk-blackhole"
	LatencyZK   = "partition-zk-latency"
	ResetZK     = "partition-zk-reset"
	// 5. The leader cut off from ZooKeeper AND from its peers: its admin
	// API's peer proxy is blackholed too, so the successor's rpc fencing of
	// it times out and the chain falls through to the shell fencer.
	PartitionPeer = "partition-node"
	// 6. Fencing fails (the fence-fail file) while the leader's failoverd is
	// SIGKILLed, so rpc fails too: nobody may promote until the heal.
	FenceFail = "fence-fail"
	// 6. Promote hooks of the standbys hang past their 5s timeout while the
	// leader cedes (POST /v1/cede).
	PromoteHang = "promote-hang"
	// 6. The leader's demote hook hangs past its timeout while it is
	// partitioned from ZooKeeper: its service stays primary until fenced.
	DemoteHang = "demote-hang"
	// 8. A hook that does not exit when killed (a demote doing umount on
	// a dead disk): the leader's demote hook is held unreapable while it
	// cedes; a successor must take over while it lasts.
	HookUnkillable = "hook-unkillable"
	// 5. One node's config lists a server name that never resolves and one
	// that resolves only now and then (its private hosts file flaps) while
	// its connections are reset: it must still connect and lead.
	NamesZK = "zk-names"
	// 2. The connection is cut right after the session handshake, while
	// AddAuth is in flight (the reply to it is lost), on a new session:
	// the node must authenticate again and lead.
	HandshakeDrop = "zk-handshake-drop"
	// 7. Unfair mode: around the leader's leave and next join, the delete
	// of the lock is dropped or its reply lost, and the reply to its next
	// create of the lock is lost: no epoch may be reused.
	LostReplies = "lost-replies-unfair"
	// 1. One ZooKeeper server cut off from its peers (quorum and election
	// links) while its clients stay connected, with the failoverd leader
	// pinned to it (its proxies to the other servers refuse). Alternately
	// a follower (it answers reads and pings from its local copy for
	// syncLimit × tickTime, past the session timeout: a lease renewed by
	// reads outlives the session) and the ZooKeeper leader.
	QuorumPartition = "zk-quorum-partition"
	// 7. A write applied whose reply is lost, the client reconnecting to a
	// ZooKeeper follower that lags behind it: the leaver's Term.Finish
	// (variant 0) or the successor's breadcrumb write (1). See lagging.go.
	LostReplyLagging = "lost-reply-lagging"
	// a standby that may lead lags (its position frozen) while
	// the leader's failoverd is SIGKILLed: it must not promote (see
	// positions.go).
	LaggingFailover = "lagging-failover"
	// 7. The leader cedes, and its successor's failoverd is SIGKILLed in
	// the middle of the takeover: the leaver's Finish named it in the
	// breadcrumb, so whoever leads next must fence it (variant 0: killed
	// as soon as it is seen taking over, usually before its promote hook
	// ends; 1: once it is seen promoting or leading, its service primary).
	HandoverKill = "handover-successor-killed"
)

func init() { TakeoverKinds[HookUnkillable] = true }

// AllKinds lists every fault kind of the fair-mode schedule.
var AllKinds = []string{KillDaemon, KillService, PauseDaemon, PauseService, ZKKillLeader, ZKKillFollower, ZKOutage,
	PartitionZK, LatencyZK, ResetZK, PartitionPeer, FenceFail, PromoteHang, DemoteHang,
	HookUnkillable, NamesZK, HandshakeDrop, QuorumPartition, LostReplyLagging, LaggingFailover, HandoverKill,
	SlowHooksOutage, SlowHooksIsolated, SlowHooksStop, PauseCluster, VetoTakeover, FenceWrongAnswer, ReloadConfig, BreadcrumbClear, SwitchedPlace}

// UnfairKinds is the schedule of the unfair-mode cluster: the lost replies
// it exists for (with and without a lagging server to reconnect to), and the crash and partition faults that end terms there.
var UnfairKinds = []string{LostReplies, LostReplyLagging, KillDaemon, PauseDaemon, PartitionZK, ZKKillLeader, LaggingFailover}

// Nemesis injects faults into an Env on a seeded schedule.
type Nemesis struct {
	e     *Env
	rng   *rand.Rand
	id    int
	kinds []string
	count map[string]int // injections so far per kind
}

// NewNemesis seeds a nemesis.
func NewNemesis(e *Env, seed uint64) *Nemesis {
	return &Nemesis{e: e, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), kinds: AllKinds, count: map[string]int{}}
}

// Block returns every kind once, in a seeded random order.
func (m *Nemesis) Block() []string {
	ks := append([]string(nil), m.kinds...)
	m.rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
	return ks
}

// between returns a random duration in [lo, hi).
func (m *Nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(m.rng.Int64N(int64(hi-lo)))
}

// Step injects one fault of kind, holds it, heals it, and waits (up to the
// liveness bound) until a leader writes again, then pauses briefly and
// samples the daemons. It reports whether the cluster recovered in time.
func (m *Nemesis) Step(kind string) bool {
	e := m.e
	m.id++
	id := m.id
	m.count[kind]++
	// Draw every random number up front, so the sequence of draws (and the
	// schedule) depends only on the seed, not on what the cluster did.
	hold := m.rng.Float64()
	pick := m.rng.IntN(1 << 20)
	latency := m.between(100*time.Millisecond, 1200*time.Millisecond)
	quiet := m.between(100*time.Millisecond, 600*time.Millisecond)
	sub := rand.New(rand.NewPCG(m.rng.Uint64(), uint64(id))) // for faults that draw as they go
	holdIn := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(hold*float64(hi-lo)) }
	vetoRoll, vetoPick := m.rng.IntN(100), m.rng.IntN(1<<20)
	lagRoll, lagPick := m.rng.IntN(100), m.rng.IntN(1<<20)

	// A lagging node (if any) is frozen first, for FreezeLead: the fault
	// then strikes whoever leads by then.
	lag := e.newLagNode(kind, id, lagRoll, lagPick, e.Leader())
	defer lag.thaw()
	lag.freeze()

	leader := e.Leader()
	if leader == nil { // should not happen after a recovery; take any node
		leader = e.C.Nodes[pick%len(e.C.Nodes)]
	}
	anyNode := e.C.Nodes[pick%len(e.C.Nodes)]
	if pick%10 < 6 { // partitions hit the leader more often than not
		anyNode = leader
	}
	veto := e.newVeto(kind, id, vetoRoll, vetoPick, leader)
	defer veto.off()
	inject := func(target string, kv ...any) {
		veto.on()
		e.Log(KindFault, append([]any{"phase", "inject", "kind", kind, "id", id, "target", target}, kv...)...)
	}
	heal := func(target string) {
		lag.thaw()
		veto.off()
		e.Log(KindFault, "phase", "heal", "kind", kind, "id", id, "target", target)
	}

	switch kind {
	case KillDaemon:
		inject(leader.ID)
		e.expectKill(leader)
		leader.Kill(syscall.SIGKILL)
		hold := holdIn(300*time.Millisecond, 4*time.Second)
		if restartYAML() != "" {
			hold = 200 * time.Millisecond // the shipped unit's RestartSec, which the option comes with
		}
		time.Sleep(hold)
		leader.Start()
		heal(leader.ID)

	case KillService:
		inject(leader.ID)
		leader.KillToy()
		time.Sleep(holdIn(1500*time.Millisecond, 4*time.Second))
		leader.ReviveToy()
		heal(leader.ID)

	case PauseDaemon:
		inject(leader.ID)
		leader.Signal(syscall.SIGSTOP)
		time.Sleep(holdIn(e.Session+500*time.Millisecond, e.Session+4*time.Second))
		leader.Signal(syscall.SIGCONT)
		heal(leader.ID)

	case PauseService:
		inject(leader.ID)
		pid := leader.ToyPid()
		syscall.Kill(pid, syscall.SIGSTOP)
		time.Sleep(holdIn(e.Session+2*time.Second, e.Session+5*time.Second))
		syscall.Kill(pid, syscall.SIGCONT)
		heal(leader.ID)

	case ZKKillLeader, ZKKillFollower:
		lead, followers := zkRoles(e.C.ZK)
		i := lead
		if kind == ZKKillFollower && len(followers) > 0 {
			i = followers[pick%len(followers)]
		}
		if i < 0 {
			i = pick % len(e.C.ZK.Servers)
		}
		target := fmt.Sprintf("zk%d", i+1)
		inject(target)
		e.C.ZK.Stop(i)
		time.Sleep(holdIn(500*time.Millisecond, 4*time.Second))
		e.C.ZK.Restart(i)
		heal(target)

	case ZKOutage:
		inject("all")
		e.C.ZK.StopAll()
		time.Sleep(holdIn(e.Session, e.Session+4*time.Second))
		e.C.ZK.StartAll()
		heal("all")

	case PartitionZK:
		inject(anyNode.ID)
		setBlackhole(anyNode.ZKProxies, true)
		time.Sleep(holdIn(500*time.Millisecond, e.Session+3*time.Second))
		setBlackhole(anyNode.ZKProxies, false)
		heal(anyNode.ID)

	case LatencyZK:
		inject(anyNode.ID, "latency", latency)
		for _, p := range anyNode.ZKProxies {
			p.SetLatency(latency)
		}
		time.Sleep(holdIn(time.Second, 5*time.Second))
		for _, p := range anyNode.ZKProxies {
			p.SetLatency(0)
		}
		heal(anyNode.ID)

	case ResetZK:
		inject(anyNode.ID)
		end := time.Now().Add(holdIn(500*time.Millisecond, 3*time.Second))
		for time.Now().Before(end) {
			for _, p := range anyNode.ZKProxies {
				p.Reset()
			}
			time.Sleep(250 * time.Millisecond)
		}
		heal(anyNode.ID)

	case PartitionPeer:
		inject(leader.ID)
		e.cutOff(leader, true)
		leader.PeerProxy.Blackhole(true)
		time.Sleep(holdIn(e.Session+time.Second, e.Session+5*time.Second))
		leader.PeerProxy.Blackhole(false)
		e.cutOff(leader, false)
		heal(leader.ID)

	case FenceFail:
		failFile := filepath.Join(e.C.Dir, "fence-fail")
		inject(leader.ID)
		touch(e.t, failFile)
		e.expectKill(leader)
		leader.Kill(syscall.SIGKILL)
		time.Sleep(holdIn(e.Session+time.Second, e.Session+5*time.Second))
		os.Remove(failFile)
		leader.Start()
		heal(leader.ID)

	case PromoteHang:
		var files []string
		for _, n := range e.C.Nodes {
			if n != leader {
				files = append(files, filepath.Join(n.Dir(), "promote-hang"))
			}
		}
		inject("standbys")
		for _, f := range files {
			touch(e.t, f)
		}
		cede(e, leader, 2*time.Second)
		time.Sleep(holdIn(5500*time.Millisecond, 7*time.Second))
		for _, f := range files {
			os.Remove(f)
		}
		heal("standbys")

	case HandoverKill:
		// The cede needs a successor ready to take over at once: after an
		// earlier fault, each candidate may still be out (unhealthy, or
		// backing off after a veto).
		e.waitStandby(e.successors(leader), 20*time.Second)
		inject(leader.ID)
		variant := id % 2
		cede(e, leader, holdIn(time.Second, 3*time.Second))
		var succ *clustertest.Node
		for end := time.Now().Add(5 * time.Second); succ == nil && time.Now().Before(end); {
			for _, n := range e.C.Nodes {
				if n == leader || !n.Running() {
					continue
				}
				st, ok := n.Status()
				switch {
				case !ok:
				case st.State == controller.StatePromoting || st.State == controller.StateLeader:
					succ = n
				case variant == 0 && st.State == controller.StateFencing:
					succ = n
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		if succ == nil {
			e.t.Logf("fault %d (%s) did not apply: no successor was seen taking over", id, kind)
			heal(leader.ID)
			break
		}
		e.Log(KindFault, "phase", "kill", "kind", kind, "id", id, "target", succ.ID, "variant", variant)
		e.expectKill(succ)
		succ.Kill(syscall.SIGKILL)
		time.Sleep(holdIn(e.Session+time.Second, e.Session+3*time.Second))
		succ.Start()
		heal(leader.ID)

	case DemoteHang:
		f := filepath.Join(leader.Dir(), "demote-hang")
		inject(leader.ID)
		touch(e.t, f)
		e.cutOff(leader, true)
		time.Sleep(holdIn(e.Session+time.Second, e.Session+4*time.Second))
		e.cutOff(leader, false)
		os.Remove(f)
		heal(leader.ID)

	case HookUnkillable:
		// The leader cedes while its demote hook cannot be reaped: after
		// the hook's timeout and kill grace it must give up leadership in
		// ZooKeeper anyway, so a successor is elected and fences it.
		marker := filepath.Join(leader.Dir(), "hook-unkillable")
		inject(leader.ID)
		holder := holdHooks(filepath.Join(leader.Dir(), "unkillable.pids"), func(k string, kv ...any) {
			e.Log(k, append([]any{"node", leader.ID}, kv...)...)
		})
		touch(e.t, marker)
		go cede(e, leader, e.Session)
		// Hold until another node leads, or long enough to be sure none will.
		end := time.Now().Add(holdIn(UnkillableHold, UnkillableHold+2*time.Second))
		for time.Now().Before(end) {
			if l := e.Leader(); l != nil && l != leader {
				time.Sleep(holdIn(300*time.Millisecond, time.Second))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		os.Remove(marker)
		holder.release()
		heal(leader.ID)
		if b, _ := os.ReadFile(holder.pids); len(holder.held) == 0 && len(strings.Fields(string(b))) == 0 {
			// No demote hook ran at all: the target no longer led when it
			// was told to cede (on a loaded host the leader the schedule
			// picked may have lost its lease meanwhile). The fault did not
			// apply; nothing to hold.
			e.t.Logf("fault %d (%s) did not apply: %s ran no demote hook (it was not leading when ceded)", id, kind, leader.ID)
		} else if len(holder.held) == 0 {
			// Without ptrace the hook only ignores SIGTERM and dies at the
			// kill grace: the fault was not the one it claims to be.
			msg := fmt.Sprintf("fault %d (%s): no hook process could be held with ptrace", id, kind)
			if os.Getenv("CI") == "true" {
				e.t.Error(msg)
			} else {
				e.t.Log(msg)
			}
		}

	case NamesZK:
		if e.names == nil {
			e.t.Logf("fault %d (%s) skipped: %v", id, kind, e.namesErr)
			return true
		}
		n := e.leadable(anyNode) // it must lead again: not a priority-0 node
		orig, err := os.ReadFile(n.Config)
		if err != nil {
			e.t.Fatal(err)
		}
		cfg, err := namesConfig(orig, n.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		name := flapName(n.ID)
		inject(n.ID, "missing", MissingServer, "flapping", name)
		e.names.setName(name, true)
		must(e.t, os.WriteFile(n.Config, cfg, 0o644))
		e.expectKill(n)
		n.Kill(syscall.SIGKILL)
		n.Start()
		// Flap the name while resetting the node's connections now and
		// then, so it reconnects (and resolves again) at random moments.
		end := time.Now().Add(holdIn(3*time.Second, 7*time.Second))
		on := true
		for time.Now().Before(end) {
			time.Sleep(time.Duration(300+sub.IntN(1200)) * time.Millisecond)
			on = !on
			e.names.setName(name, on)
			e.Log("name", "node", n.ID, "name", name, "resolves", on)
			if sub.IntN(2) == 0 {
				for _, p := range n.ZKLossProxies {
					p.Reset()
				}
			}
		}
		// The node must work with the name gone: lead the cluster.
		e.names.setName(name, false)
		e.Log("name", "node", n.ID, "name", name, "resolves", false)
		e.checkRejoin(n, id, kind)
		must(e.t, os.WriteFile(n.Config, orig, 0o644))
		e.expectKill(n)
		n.Kill(syscall.SIGKILL)
		n.Start()
		heal(n.ID)

	case HandshakeDrop:
		// Cut the node off until its session expires, then let it back
		// with the replies to its next AddAuth lost (one per server): the
		// new session's handshake completes, its authentication does not.
		n := e.leadable(anyNode) // it must lead again: not a priority-0 node
		inject(n.ID)
		setBlackhole(n.ZKProxies, true)
		time.Sleep(holdIn(e.Session+1500*time.Millisecond, e.Session+3*time.Second))
		before := lostCount(n)
		for _, p := range n.ZKLossProxies {
			p.LoseReplies(1, func(op int32, _ string) bool { return op == zktest.OpSetAuth })
		}
		setBlackhole(n.ZKProxies, false)
		end := time.Now().Add(8 * time.Second)
		for time.Now().Before(end) && lostCount(n) == before {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(holdIn(500*time.Millisecond, 2*time.Second))
		for _, p := range n.ZKLossProxies {
			p.Disarm()
		}
		e.checkRejoin(n, id, kind)
		heal(n.ID)

	case LostReplies:
		// variant 0: the lock's delete never reaches the server and the
		// reply to the next create of it is lost;
		// 1: both replies lost (both applied); 2: the delete's reply only.
		variant := id % 3
		isLock := func(op int32, path string) bool { return strings.HasSuffix(path, "/election/lock") }
		del := func(op int32, path string) bool { return op == zktest.OpDelete && isLock(op, path) }
		create := func(op int32, path string) bool {
			return (op == zktest.OpCreate || op == zktest.OpCreate2) && isLock(op, path)
		}
		inject(leader.ID, "variant", variant)
		for _, p := range leader.ZKLossProxies {
			switch variant {
			case 0:
				p.DropRequests(1, del)
				p.LoseReplies(1, create)
			case 1:
				p.LoseReplies(1, del)
				p.LoseReplies(1, create)
			case 2:
				p.LoseReplies(1, del)
			}
		}
		out := holdIn(300*time.Millisecond, 1500*time.Millisecond)
		cede(e, leader, out)
		time.Sleep(out + holdIn(2*time.Second, 4*time.Second))
		for _, p := range leader.ZKLossProxies {
			p.Disarm()
		}
		heal(leader.ID)

	case LostReplyLagging:
		m.lostReplyLagging(leader, id, pick, holdIn, inject, heal)

	case SlowHooksOutage, SlowHooksIsolated, SlowHooksStop, SlowHooksEtcdOutage, SlowHooksEtcdIsolated:
		m.slowHooks(kind, id, leader, pick, holdIn, inject, heal)

	case PauseCluster:
		m.pauseCluster(id, leader, holdIn, inject, heal)

	case ReloadConfig:
		m.reloadConfig(id, leader, holdIn, inject, heal)

	case VetoTakeover:
		m.vetoTakeover(id, leader, holdIn, inject, heal)

	case FenceWrongAnswer:
		m.fenceWrongAnswer(id, leader, holdIn, inject, heal)

	case BreadcrumbClear:
		m.breadcrumbClear(id, leader, holdIn, inject, heal)

	case SwitchedPlace:
		m.switchedPlace(id, leader, holdIn, inject, heal)

	case LaggingFailover:
		// A standby lags, then the leader's daemon dies for longer than its
		// session: the lagging node must not promote; a caught-up
		// candidate, if there is one, takes over. The other candidates
		// rejoin the election behind the lagging one, so that it is next
		// in a fair queue.
		x := e.laggard(leader, pick)
		if x == nil {
			inject(leader.ID, "lagging", "none")
			heal(leader.ID)
			break
		}
		// Odd injections (the first included): the other candidates are
		// out of the election when the lagging node wins, so election.max_lag
		// is all that keeps it from promoting (beside another candidate
		// of the same priority, a build ignoring max_lag would still hand
		// over, to the more advanced position). Even ones: they queue up
		// behind it, and it asks one of them to take over.
		alone := m.count[kind]%2 == 1
		e.pos.freeze(x, id)
		var others []*clustertest.Node
		for _, y := range e.C.Nodes {
			if y != x && y != leader && e.Policy.CanLead(y.ID) {
				others = append(others, y)
				cede(e, y, 300*time.Millisecond)
			}
		}
		time.Sleep(FreezeLead)
		l := e.Leader()
		if l == nil || l == x { // leadership moved meanwhile
			inject(leader.ID, "lagging", x.ID, "skipped", "the lagging node leads or nobody does")
			e.pos.thaw(x, id)
			heal(leader.ID)
			break
		}
		inject(l.ID, "lagging", x.ID, "alone", alone)
		if alone {
			// Out until well after the lagging node's win (a session
			// timeout after the kill, plus its decision).
			for _, y := range others {
				if y != l {
					cede(e, y, e.Session+4*time.Second)
				}
			}
		}
		e.expectKill(l)
		l.Kill(syscall.SIGKILL)
		time.Sleep(holdIn(e.Session+2*time.Second, e.Session+4*time.Second))
		l.Start()
		e.pos.thaw(x, id)
		heal(l.ID)

	case QuorumPartition:
		// The first of these isolates a follower (the case that reveals a
		// lease renewed by reads), the next the ZooKeeper leader, and so on.
		zl, followers := zkRoles(e.C.ZK)
		s, role := zl, "leader"
		if m.count[kind]%2 == 1 && len(followers) > 0 {
			s, role = followers[pick%len(followers)], "follower"
		}
		if s < 0 {
			s = pick % len(e.C.ZK.Servers)
		}
		target := fmt.Sprintf("zk%d", s+1)
		inject(target, "role", role, "pinned", leader.ID)
		// Pin the leader to server s: its other proxies refuse, so it
		// moves over (same session) within milliseconds if it was elsewhere.
		for j, p := range leader.ZKLossProxies {
			if j != s {
				p.Refuse(true)
			}
		}
		time.Sleep(500 * time.Millisecond)
		e.Log("zk_isolate", "server", target, "role", role)
		e.C.ZK.Isolate(s)
		// Long enough for the isolated server to give up on its peers and
		// for the rest to expire the pinned leader's session and elect.
		time.Sleep(holdIn(ZKSyncLimit*ZKTick+e.Session+time.Second, ZKSyncLimit*ZKTick+e.Session+4*time.Second))
		e.C.ZK.Heal(s)
		for _, p := range leader.ZKLossProxies {
			p.Refuse(false)
		}
		heal(target)

	default:
		if !m.fenceFirstStep(kind, id, leader, holdIn, inject, heal) && !m.etcdStep(kind, id, leader, anyNode, pick, holdIn, inject, heal) {
			e.t.Fatalf("unknown fault kind %q", kind)
		}
	}

	ok := e.WaitRecovered(LivenessBound)
	if !ok {
		e.t.Logf("fault %d (%s): no recovery within %v", id, kind, LivenessBound)
	}
	time.Sleep(quiet)
	e.Sample()
	return ok
}

// UnkillableHold is how long hook-unkillable waits for a successor: the
// demote hook's timeout (0.6s) and kill grace (2s), the session's end, and
// fencing (rpc 1s, then shell) of the stuck node, with slack.
const UnkillableHold = 20 * time.Second

// lostCount is how many replies the node's loss proxies have lost so far.
func lostCount(n *clustertest.Node) int {
	c := 0
	for _, p := range n.ZKLossProxies {
		c += len(p.Lost())
	}
	return c
}

func must(t interface{ Fatal(...any) }, err error) {
	if err != nil {
		t.Fatal(err)
	}
}

func setBlackhole(ps []*netproxy.Proxy, on bool) {
	for _, p := range ps {
		p.Blackhole(on)
	}
}

func touch(t interface{ Fatal(...any) }, path string) {
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// cede asks a node's admin API to give up leadership for d.
func cede(e *Env, n *clustertest.Node, d time.Duration) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.AdminAddr+"/v1/cede?for="+d.String(), nil)
	req.Header.Set("Authorization", "Bearer "+e.C.Token)
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		e.t.Logf("cede %s: %v", n.ID, err)
		return
	}
	resp.Body.Close()
}

// zkRoles returns the index of the ensemble leader (-1 if none answers) and
// the followers.
func zkRoles(c *zktest.Cluster) (leader int, followers []int) {
	leader = -1
	for i, s := range c.Servers {
		if !c.Running(i) {
			continue
		}
		switch m, _ := zktest.Mode(s.Addr()); m {
		case "leader", "standalone":
			leader = i
		case "follower":
			followers = append(followers, i)
		}
	}
	return leader, followers
}
