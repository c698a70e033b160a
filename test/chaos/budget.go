package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// The worst case of the demote budget, under a lease end. The demote
// budget D is what a leader may still need after its lease ended: the kill
// grace of a promote that is running, then the demote's timeout and its
// kill grace. These nemeses make every hook of the node that takes over
// take all of that: its promote (promote-slow) makes the service primary
// and then never returns, ignoring SIGTERM until SIGKILL; its demote
// (demote-slow) ignores SIGTERM and stands the service down 150ms into its
// kill grace. While that promote runs, the node's lease is ended by
//
//   - slow-hooks-zk-outage: every ZooKeeper server SIGKILLed;
//   - slow-hooks-isolated: the node pinned to a ZooKeeper follower that is
//     then cut off from its peers (it answers reads, no write commits);
//   - slow-hooks-daemon-stop: the node's failoverd SIGSTOPped past its
//     lease (1.6s: longer than the 0.8s lease, and than the 1.3s of a lease
//     sized without the kill graces), then SIGCONT.
//
// and on etcd by
//
//   - slow-hooks-etcd-outage: every etcd member SIGKILLed;
//   - slow-hooks-etcd-isolated: the node's client pinned to an etcd
//     follower that is then cut off from its peers (no renewal is answered);
//   - slow-hooks-daemon-stop: the daemon SIGSTOPped for EtcdSlowStop, past
//     its term but not past the lease etcd keeps.
//
// late_stand_down (service.go) then judges the stand-down at the service
// against the window the daemon's own arithmetic keeps free of successors.
const (
	SlowHooksOutage   = "slow-hooks-zk-outage"
	SlowHooksIsolated = "slow-hooks-isolated"
	SlowHooksStop     = "slow-hooks-daemon-stop"

	SlowHooksEtcdOutage   = "slow-hooks-etcd-outage"
	SlowHooksEtcdIsolated = "slow-hooks-etcd-isolated"
)

// SlowHookKinds lists them (ZooKeeper's, then etcd's own).
var SlowHookKinds = []string{SlowHooksOutage, SlowHooksIsolated, SlowHooksStop, SlowHooksEtcdOutage, SlowHooksEtcdIsolated}

// EtcdSlowHookKinds are the slow-hooks kinds of the etcd backend.
var EtcdSlowHookKinds = []string{SlowHooksEtcdOutage, SlowHooksEtcdIsolated, SlowHooksStop}

// SlowStop is how long slow-hooks-daemon-stop keeps the daemon stopped.
const SlowStop = 1600 * time.Millisecond

// EtcdSlowStop is SlowStop on etcd: 300ms past the term's length after
// its last answered renewal (TTL - TTL/20 - the demote budget of
// EtcdDemoteTimeout and two 250ms kill graces: 4.9s), so the term has ended
// whenever the last renewal went, and short of the TTL less a renewal
// interval (5.33s), so no successor can have won yet.
const EtcdSlowStop = EtcdLeaseTTL - EtcdLeaseTTL/20 - (EtcdDemoteTimeout + 500*time.Millisecond) + 300*time.Millisecond

func init() {
	for _, k := range SlowHookKinds {
		noVetoKinds[k] = true
	}
	// The stopped daemon cannot stand down while it is stopped: the
	// stale_leader and znode_deleted rules give it the slack of a pause.
	stoppedDaemonKinds[SlowHooksStop] = true
}

// eventsMark is the events log's size now: eventsSince reads what came
// after it.
func (e *Env) eventsMark() int64 {
	fi, err := os.Stat(e.C.EventsPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// eventsSince returns the events logged after mark.
func (e *Env) eventsSince(mark int64) []clustertest.Event {
	f, err := os.Open(e.C.EventsPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(mark, 0); err != nil {
		return nil
	}
	return clustertest.ParseEvents(f)
}

// waitEvent waits up to d for an event of kind (with the key=value pairs
// kv) after mark.
func (e *Env) waitEvent(mark int64, d time.Duration, kind string, kv ...string) (clustertest.Event, bool) {
	for end := time.Now().Add(d); ; {
		if evs := clustertest.Find(e.eventsSince(mark), kind, kv...); len(evs) > 0 {
			return evs[0], true
		}
		if time.Now().After(end) {
			return clustertest.Event{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slowHooks injects one of the slow-hooks kinds. The leader cedes; the
// node that then promotes (with promote-slow) is struck while its promote
// runs; its demote-slow stays until its service stood down.
func (m *Nemesis) slowHooks(kind string, id int, leader *clustertest.Node, pick int, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	cands := e.successors(leader)
	if len(cands) == 0 {
		inject(leader.ID, "skipped", "no other node may lead")
		heal(leader.ID)
		return
	}
	marks := func(n *clustertest.Node) []string {
		return []string{filepath.Join(n.Dir(), "promote-slow"), filepath.Join(n.Dir(), "demote-slow")}
	}
	for _, n := range cands {
		for _, f := range marks(n) {
			touch(e.t, f)
		}
	}
	clearAll := func(keep *clustertest.Node) {
		for _, n := range cands {
			os.Remove(marks(n)[0])
			if n != keep {
				os.Remove(marks(n)[1])
			}
		}
	}
	defer clearAll(nil)
	if kind == SlowHooksEtcdOutage || kind == SlowHooksEtcdIsolated {
		// On etcd the term ends up to TTL/3 + 4.9s after the strike (the
		// last renewal may be that old); the slow promote, started before
		// the strike, must still run then, or its timeout kills it first
		// and the worst case is not what ends it. Every node reloads with
		// a promote timeout longer than the lease for the fault.
		restore := e.raisePromoteTimeout(kind, id, 2*EtcdLeaseTTL)
		defer restore()
	}
	e.waitStandby(cands, 20*time.Second)
	mark := e.eventsMark()
	// The fault begins with the cede (its window, for liveness, too); the
	// strike names the node it hits (phase=strike).
	inject(leader.ID, "ceded", leader.ID)
	cede(e, leader, 3*time.Second)
	ev, ok := e.waitEvent(mark, 15*time.Second, "hook_slow", "hook", "promote")
	var s *clustertest.Node
	if ok {
		for _, n := range cands {
			if n.ID == ev.KV["node"] {
				s = n
			}
		}
	}
	if s == nil {
		clearAll(nil)
		e.Log(KindFault, "phase", "strike", "kind", kind, "id", id, "target", "none", "skipped", "no slow promote started within 15s")
		heal(leader.ID)
		e.t.Logf("fault %d (%s) did not apply: no node ran its slow promote", id, kind)
		return
	}
	clearAll(s) // the later promotes and demotes are the usual ones
	standDown := e.eventsMark()
	strike := func(kv ...any) {
		e.Log(KindFault, append([]any{"phase", "strike", "kind", kind, "id", id, "target", s.ID, "epoch", ev.KV["epoch"]}, kv...)...)
	}
	switch kind {
	case SlowHooksEtcdOutage:
		strike()
		e.C.Etcd.StopAll()
		e.waitEvent(standDown, 8*time.Second, "demote", "node", s.ID)
		os.Remove(marks(s)[1])
		time.Sleep(holdIn(0, 2*time.Second))
		e.C.Etcd.StartAll()
		heal(s.ID)
		e.etcdServing(EtcdServingBound)

	case SlowHooksEtcdIsolated:
		lead, followers := e.etcdRoles()
		srv := lead
		if len(followers) > 0 {
			srv = followers[pick%len(followers)]
		}
		if srv < 0 {
			srv = pick % len(e.C.Etcd.Members)
		}
		target := fmt.Sprintf("m%d", srv)
		strike("server", target)
		for j, p := range s.EtcdDelayProxies {
			if j != srv {
				p.Blackhole(true)
			}
		}
		time.Sleep(500 * time.Millisecond)
		e.Log("etcd_isolate", "server", target)
		e.C.Etcd.Isolate(srv)
		e.waitEvent(standDown, 10*time.Second, "demote", "node", s.ID)
		os.Remove(marks(s)[1])
		// Long enough for the rest of the cluster to expire the node's
		// lease and elect a successor.
		time.Sleep(holdIn(EtcdLeaseTTL, EtcdLeaseTTL+2*time.Second))
		e.C.Etcd.Heal(srv)
		for _, p := range s.EtcdDelayProxies {
			p.Blackhole(false)
		}
		heal(s.ID)
		e.etcdServing(EtcdServingBound)

	case SlowHooksOutage:
		strike()
		e.C.ZK.StopAll()
		e.waitEvent(standDown, 5*time.Second, "demote", "node", s.ID)
		os.Remove(marks(s)[1])
		time.Sleep(holdIn(0, 2*time.Second))
		e.C.ZK.StartAll()
		heal(s.ID)

	case SlowHooksIsolated:
		zl, followers := zkRoles(e.C.ZK)
		srv := zl
		if len(followers) > 0 {
			srv = followers[pick%len(followers)]
		}
		if srv < 0 {
			srv = pick % len(e.C.ZK.Servers)
		}
		target := fmt.Sprintf("zk%d", srv+1)
		strike("server", target)
		for j, p := range s.ZKLossProxies {
			if j != srv {
				p.Refuse(true)
			}
		}
		time.Sleep(500 * time.Millisecond)
		e.Log("zk_isolate", "server", target, "role", "follower")
		e.C.ZK.Isolate(srv)
		e.waitEvent(standDown, 8*time.Second, "demote", "node", s.ID)
		os.Remove(marks(s)[1])
		// Long enough for the rest of the ensemble to expire the pinned
		// node's session and elect a successor.
		time.Sleep(holdIn(ZKSyncLimit*ZKTick+SessionTimeout, ZKSyncLimit*ZKTick+SessionTimeout+2*time.Second))
		e.C.ZK.Heal(srv)
		for _, p := range s.ZKLossProxies {
			p.Refuse(false)
		}
		heal(s.ID)

	case SlowHooksStop:
		strike()
		stop := SlowStop
		if e.C.Etcd != nil {
			stop = EtcdSlowStop
		}
		s.Signal(syscall.SIGSTOP)
		time.Sleep(stop)
		s.Signal(syscall.SIGCONT)
		heal(s.ID)
		e.waitEvent(standDown, 5*time.Second, "demote", "node", s.ID)
		os.Remove(marks(s)[1])
	}
}

// raisePromoteTimeout reloads every daemon with promote timeout d and
// returns what reloads the files as they were.
func (e *Env) raisePromoteTimeout(kind string, id int, d time.Duration) (restore func()) {
	orig, raised := e.editConfigs(fmt.Sprintf("%s (fault %d)", kind, id), func(cfg string) (string, error) {
		return withPromoteTimeout(cfg, d)
	})
	e.reloadAll("promote_timeout", raised)
	return func() {
		e.reloadAll("restore", orig)
		for _, n := range e.C.Nodes { // down nodes read it at their restart
			os.WriteFile(n.Config, []byte(orig[n.ID]), 0o600)
		}
	}
}
