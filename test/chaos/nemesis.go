package chaos

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
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
)

func init() { TakeoverKinds[HookUnkillable] = true }

// AllKinds lists every fault kind.
var AllKinds = []string{KillDaemon, KillService, PauseDaemon, PauseService, ZKKillLeader, ZKKillFollower, ZKOutage,
	PartitionZK, LatencyZK, ResetZK, PartitionPeer, FenceFail, PromoteHang, DemoteHang}

// Nemesis injects faults into an Env on a seeded schedule.
type Nemesis struct {
	e   *Env
	rng *rand.Rand
	id  int
}

// NewNemesis seeds a nemesis.
func NewNemesis(e *Env, seed uint64) *Nemesis {
	return &Nemesis{e: e, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Block returns every kind once, in a seeded random order.
func (m *Nemesis) Block() []string {
	ks := append([]string(nil), AllKinds...)
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
	// Draw every random number up front, so the sequence of draws (and the
	// schedule) depends only on the seed, not on what the cluster did.
	hold := m.rng.Float64()
	pick := m.rng.IntN(1 << 20)
	latency := m.between(100*time.Millisecond, 1200*time.Millisecond)
	quiet := m.between(100*time.Millisecond, 600*time.Millisecond)
	holdIn := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(hold*float64(hi-lo)) }

	leader := e.Leader()
	if leader == nil { // should not happen after a recovery; take any node
		leader = e.C.Nodes[pick%len(e.C.Nodes)]
	}
	anyNode := e.C.Nodes[pick%len(e.C.Nodes)]
	if pick%10 < 6 { // partitions hit the leader more often than not
		anyNode = leader
	}
	inject := func(target string, kv ...any) {
		e.Log(KindFault, append([]any{"phase", "inject", "kind", kind, "id", id, "target", target}, kv...)...)
	}
	heal := func(target string) {
		e.Log(KindFault, "phase", "heal", "kind", kind, "id", id, "target", target)
	}

	switch kind {
	case KillDaemon:
		inject(leader.ID)
		e.expectKill(leader)
		leader.Kill(syscall.SIGKILL)
		time.Sleep(holdIn(300*time.Millisecond, 4*time.Second))
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
		time.Sleep(holdIn(SessionTimeout+500*time.Millisecond, SessionTimeout+4*time.Second))
		leader.Signal(syscall.SIGCONT)
		heal(leader.ID)

	case PauseService:
		inject(leader.ID)
		pid := leader.ToyPid()
		syscall.Kill(pid, syscall.SIGSTOP)
		time.Sleep(holdIn(SessionTimeout+2*time.Second, SessionTimeout+5*time.Second))
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
		time.Sleep(holdIn(SessionTimeout, SessionTimeout+4*time.Second))
		e.C.ZK.StartAll()
		heal("all")

	case PartitionZK:
		inject(anyNode.ID)
		setBlackhole(anyNode.ZKProxies, true)
		time.Sleep(holdIn(500*time.Millisecond, SessionTimeout+3*time.Second))
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
		setBlackhole(leader.ZKProxies, true)
		leader.PeerProxy.Blackhole(true)
		time.Sleep(holdIn(SessionTimeout+time.Second, SessionTimeout+5*time.Second))
		leader.PeerProxy.Blackhole(false)
		setBlackhole(leader.ZKProxies, false)
		heal(leader.ID)

	case FenceFail:
		failFile := filepath.Join(e.C.Dir, "fence-fail")
		inject(leader.ID)
		touch(e.t, failFile)
		e.expectKill(leader)
		leader.Kill(syscall.SIGKILL)
		time.Sleep(holdIn(SessionTimeout+time.Second, SessionTimeout+5*time.Second))
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

	case DemoteHang:
		f := filepath.Join(leader.Dir(), "demote-hang")
		inject(leader.ID)
		touch(e.t, f)
		setBlackhole(leader.ZKProxies, true)
		time.Sleep(holdIn(SessionTimeout+time.Second, SessionTimeout+4*time.Second))
		setBlackhole(leader.ZKProxies, false)
		os.Remove(f)
		heal(leader.ID)

	default:
		e.t.Fatalf("unknown fault kind %q", kind)
	}

	ok := e.WaitRecovered(LivenessBound)
	if !ok {
		e.t.Logf("fault %d (%s): no recovery within %v", id, kind, LivenessBound)
	}
	time.Sleep(quiet)
	e.Sample()
	return ok
}

func setBlackhole(ps []*zktest.Proxy, on bool) {
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
