package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// The etcd backend's faults. The cluster is a 3-member etcdtest cluster of
// separate processes, every peer link through a proxy (Isolate), and every
// node reaches each member through its own etcdtest.DelayProxy (client
// partitions). Each fault heals fully: killed members are restarted,
// stopped ones continued, links and proxies released; the heal then waits
// (up to EtcdServingBound) until every member serves again, so the next
// fault never meets a cluster still catching up.
const (
	// SIGKILL of the etcd leader (the member that says it leads, in the
	// highest raft term) / of a follower, restarted with its data at the heal.
	EtcdKillLeader = "etcd-kill-leader"
	EtcdKillMember = "etcd-kill-member"
	// SIGSTOP of the etcd leader / of a follower, past an election timeout
	// (the others elect a new leader, which extends every lease), then
	// SIGCONT. Clients connected to the stopped member see their requests
	// and keepalives hang until gRPC's keepalive gives the connection up.
	EtcdPauseLeader = "etcd-pause-leader"
	EtcdPauseMember = "etcd-pause-member"
	// One member cut off from its peers (etcdtest.Cluster.Isolate) while
	// its clients stay connected, past the lease TTL: it serves nothing that
	// needs its leader (renewals, writes, linearizable reads) and, with
	// "require leader", cancels watches once it notices it has none.
	// Alternately a follower (the first) and the etcd leader.
	EtcdIsolate = "etcd-isolate-member"
	// One node's client connections blackholed (bytes held both ways):
	// variant 0 to one member (its client must go on through the others),
	// 1 to every member (it loses its lease; a successor fences it).
	EtcdClientPartition = "partition-etcd-client"
	// 100-1200ms each way on one node's client connections to every member.
	EtcdClientLatency = "partition-etcd-latency"
	// An operator revokes the leader daemon's lease (etcdctl lease
	// revoke): its election key, member record and anything else bound to
	// the lease go at once, long before the lease would expire. A
	// successor may be elected within milliseconds; it must fence the
	// revoked leader before promoting, and the revoked leader must stand
	// down at once.
	EtcdLeaseRevoke = "etcd-lease-revoke"
	// Compaction to the current revision (and a defragmentation of every
	// member) while the daemons' watches are open: variant 0 in a steady
	// cluster; 1 while a standby is cut off from every member and the
	// leader cedes, so the standby's watches resume from revisions that
	// are compacted by the time it is back.
	EtcdCompact = "etcd-compact"
)

// EtcdNemeses lists the etcd backend's own fault kinds.
var EtcdNemeses = []string{EtcdKillLeader, EtcdKillMember, EtcdPauseLeader, EtcdPauseMember, EtcdIsolate,
	EtcdClientPartition, EtcdClientLatency, EtcdLeaseRevoke, EtcdCompact, EtcdIsolatePinned}

// DaemonKinds are the fault kinds that strike the daemons, their services,
// hooks and the operator's controls, not the coordination service: they
// run unchanged on both backends (a cut from the coordination service is
// the backend's: ZooKeeper proxies or etcd client proxies).
var DaemonKinds = []string{KillDaemon, KillService, PauseDaemon, PauseService, PartitionPeer, FenceFail, PromoteHang,
	DemoteHang, HookUnkillable, HandoverKill, LaggingFailover, PauseCluster, VetoTakeover, FenceWrongAnswer, ReloadConfig, BreadcrumbClear,
	SwitchedPlace}

// EtcdKinds is the fair-mode schedule on etcd: every daemon kind, every
// etcd nemesis and the slow-hooks kinds of etcd.
var EtcdKinds = append(append(append([]string(nil), DaemonKinds...), EtcdNemeses...), EtcdSlowHookKinds...)

// EtcdLongKinds is the block of the long fair-mode run on etcd: every
// daemon kind once and every etcd nemesis twice (they are what the etcd
// run exists for, and most take a few seconds).
var EtcdLongKinds = append(append([]string(nil), EtcdKinds...), EtcdNemeses...)

// EtcdUnfairKinds is the schedule of the unfair-mode etcd cluster: the
// faults that end terms there.
var EtcdUnfairKinds = []string{KillDaemon, PauseDaemon, LaggingFailover, EtcdKillLeader, EtcdPauseLeader,
	EtcdClientPartition, EtcdLeaseRevoke, EtcdCompact}

// EtcdServingBound is how long a heal waits for every member to serve.
const EtcdServingBound = 30 * time.Second

// Harness event kinds of the etcd faults.
const (
	KindEtcdRevoke  = "etcd_lease_revoke" // node= epoch= key= lease= ok=: the operator's revoke
	KindEtcdCompact = "etcd_compact"      // revision= defrag= ok=
)

func init() {
	harnessKinds[KindEtcdRevoke] = true
	harnessKinds[KindEtcdCompact] = true
}

// cutOff cuts node n off from the coordination service (on) or lets it
// back: every ZooKeeper proxy, or every etcd client proxy, blackholed.
func (e *Env) cutOff(n *clustertest.Node, on bool) {
	setBlackhole(n.ZKProxies, on)
	for _, p := range n.EtcdDelayProxies {
		p.Blackhole(on)
	}
}

// etcdRoles returns the index of the etcd leader (-1: none answers as
// leader) and the other running members, without failing the test.
func (e *Env) etcdRoles() (leader int, followers []int) {
	c := e.C.Etcd
	leader = -1
	var term uint64
	var up []int
	for i, m := range c.Members {
		if !c.Running(i) {
			continue
		}
		up = append(up, i)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Client(i).Status(ctx, m.Endpoint())
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId && st.RaftTerm >= term {
			leader, term = i, st.RaftTerm
		}
	}
	for _, i := range up {
		if i != leader {
			followers = append(followers, i)
		}
	}
	return leader, followers
}

// etcdServing waits until every running member answers a linearizable read
// (it has a leader), or d passes; it reports which.
func (e *Env) etcdServing(d time.Duration) bool {
	c := e.C.Etcd
	deadline := time.Now().Add(d)
	for {
		ok := true
		for i := range c.Members {
			if !c.Running(i) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := c.Client(i).Get(ctx, "/chaos/serving")
			cancel()
			if err != nil {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			e.Log("etcd_not_serving", "after", d)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// etcdAny runs f on a client of the first member that answers it without
// error (each try bounded by a second).
func (e *Env) etcdAny(f func(ctx context.Context, cli *clientv3.Client) error) error {
	var errs []string
	for i := range e.C.Etcd.Members {
		if !e.C.Etcd.Running(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := f(ctx, e.C.Etcd.Client(i))
		cancel()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Sprintf("m%d: %v", i, err))
	}
	return fmt.Errorf("no member answered: %s", strings.Join(errs, "; "))
}

// revokeLeaderLease revokes the lease of n's election key at its epoch
// (the key whose create revision is the epoch: fair c_<lease> or unfair
// lock), as `etcdctl lease revoke` would.
func (e *Env) revokeLeaderLease(n *clustertest.Node) {
	st, ok := n.Status()
	if !ok || st.State != controller.StateLeader {
		// Nobody led when the fault began (the schedule fell back to any
		// node): the fault does not apply.
		e.Log(KindEtcdRevoke, "node", n.ID, "ok", false, "err", "not_leading")
		return
	}
	prefix := cluster.Layout{Root: zkRoot, Cluster: clusterName}.ElectionDir() + "/"
	var key string
	var lease int64
	err := e.etcdAny(func(ctx context.Context, cli *clientv3.Client) error {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if kv.CreateRevision == st.Epoch {
				key, lease = string(kv.Key), kv.Lease
			}
		}
		if lease == 0 {
			return fmt.Errorf("no election key at epoch %d", st.Epoch)
		}
		_, err = cli.Revoke(ctx, clientv3.LeaseID(lease))
		return err
	})
	e.Log(KindEtcdRevoke, "node", n.ID, "epoch", st.Epoch, "key", key, "lease", fmt.Sprintf("%x", lease), "ok", err == nil, "err", errString(err))
}

// compact compacts the keyspace to its current revision (physically) and,
// with defrag, defragments every running member.
func (e *Env) compact(defrag bool) {
	var rev int64
	err := e.etcdAny(func(ctx context.Context, cli *clientv3.Client) error {
		resp, err := cli.Get(ctx, "/chaos/compact")
		if err != nil {
			return err
		}
		rev = resp.Header.Revision
		_, err = cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
		return err
	})
	if err == nil && defrag {
		for i, m := range e.C.Etcd.Members {
			if !e.C.Etcd.Running(i) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, derr := e.C.Etcd.Client(i).Defragment(ctx, m.Endpoint()); derr != nil {
				err = fmt.Errorf("defragmenting m%d: %w", i, derr)
			}
			cancel()
		}
	}
	e.Log(KindEtcdCompact, "revision", rev, "defrag", defrag, "ok", err == nil, "err", errString(err))
}

func errString(err error) string {
	if err == nil {
		return "-"
	}
	return err.Error()
}

// etcdStep injects one fault of an etcd kind (see Step); false for a kind
// that is not one.
func (m *Nemesis) etcdStep(kind string, id int, leader, anyNode *clustertest.Node, pick int,
	holdIn func(lo, hi time.Duration) time.Duration, inject func(string, ...any), heal func(string)) bool {
	e := m.e
	if !contains(EtcdNemeses, kind) {
		return false
	}
	if e.C.Etcd == nil {
		e.t.Fatalf("fault kind %s needs the etcd backend", kind)
	}
	et := e.C.Etcd
	member := func(i int) string { return fmt.Sprintf("m%d", i) }
	healEtcd := func(target string) {
		heal(target)
		e.etcdServing(EtcdServingBound)
	}
	switch kind {
	case EtcdKillLeader, EtcdKillMember, EtcdPauseLeader, EtcdPauseMember:
		lead, followers := e.etcdRoles()
		i, role := lead, "leader"
		if kind == EtcdKillMember || kind == EtcdPauseMember || i < 0 {
			i, role = pick%len(et.Members), "member"
			if len(followers) > 0 {
				i, role = followers[pick%len(followers)], "follower"
			}
		}
		inject(member(i), "role", role)
		if kind == EtcdKillLeader || kind == EtcdKillMember {
			et.Kill(i)
			time.Sleep(holdIn(500*time.Millisecond, 4*time.Second))
			et.Launch(i) // healEtcd waits for it to serve
		} else {
			et.Pause(i)
			time.Sleep(holdIn(1500*time.Millisecond, e.Session+3*time.Second))
			et.Resume(i)
		}
		healEtcd(member(i))

	case EtcdIsolate:
		lead, followers := e.etcdRoles()
		i, role := lead, "leader"
		if m.count[kind]%2 == 1 && len(followers) > 0 || i < 0 {
			i, role = pick%len(et.Members), "member"
			if len(followers) > 0 {
				i, role = followers[pick%len(followers)], "follower"
			}
		}
		inject(member(i), "role", role)
		et.Isolate(i)
		time.Sleep(holdIn(e.Session+time.Second, e.Session+4*time.Second))
		et.Heal(i)
		healEtcd(member(i))

	case EtcdIsolatePinned:
		m.etcdIsolatePinned(id, leader, pick, holdIn, inject, heal)

	case EtcdClientPartition:
		variant := (m.count[kind] - 1) % 2
		if variant == 0 {
			j := pick % len(anyNode.EtcdDelayProxies)
			inject(anyNode.ID, "variant", variant, "member", member(j))
			anyNode.EtcdDelayProxies[j].Blackhole(true)
			time.Sleep(holdIn(time.Second, e.Session+4*time.Second))
			anyNode.EtcdDelayProxies[j].Blackhole(false)
		} else {
			inject(anyNode.ID, "variant", variant, "member", "all")
			e.cutOff(anyNode, true)
			time.Sleep(holdIn(500*time.Millisecond, e.Session+3*time.Second))
			e.cutOff(anyNode, false)
		}
		healEtcd(anyNode.ID)

	case EtcdClientLatency:
		d := time.Duration(100+pick%1100) * time.Millisecond
		inject(anyNode.ID, "latency", d)
		for _, p := range anyNode.EtcdDelayProxies {
			p.SetDelay(d, d)
		}
		time.Sleep(holdIn(time.Second, 5*time.Second))
		for _, p := range anyNode.EtcdDelayProxies {
			p.SetDelay(0, 0)
		}
		healEtcd(anyNode.ID)

	case EtcdLeaseRevoke:
		inject(leader.ID)
		e.revokeLeaderLease(leader)
		// Held while the cluster elects and fences: the heal is only the
		// end of the operator's action.
		time.Sleep(holdIn(500*time.Millisecond, 2*time.Second))
		healEtcd(leader.ID)

	case EtcdCompact:
		variant := (m.count[kind] - 1) % 2
		if variant == 0 {
			inject("all", "variant", variant)
			e.compact(true)
			time.Sleep(holdIn(200*time.Millisecond, time.Second))
			healEtcd("all")
			break
		}
		// A standby is cut off past its lease, the leader cedes (the
		// election moves on), and everything up to now is compacted
		// before the standby is back.
		s := e.anyOther(leader)
		inject(s.ID, "variant", variant)
		e.cutOff(s, true)
		time.Sleep(500 * time.Millisecond)
		cede(e, leader, time.Second)
		time.Sleep(holdIn(e.Session+time.Second, e.Session+3*time.Second))
		e.compact(pick%2 == 0)
		e.cutOff(s, false)
		healEtcd(s.ID)
	}
	return true
}
