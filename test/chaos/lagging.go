package chaos

import (
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/zktest"
)

// lost-reply-lagging: a write is applied, its reply is lost, and the client
// reconnects to a ZooKeeper follower that lags behind it (the follower has
// reached the client's last seen zxid, not the write: zktest's
// Cluster.HoldCommits holds its commits while pings and session
// revalidations pass). Whatever the client reads there without a sync is
// older than its own write. Variants:
//
//   - 0: the leader cedes and the reply to its Term.Finish (one multi
//     deleting the breadcrumb and its election znode) is lost. In unfair
//     mode its leave then finds "its" lock on the lagging follower while the
//     leader already holds the successor's lock under the same name at the
//     same version 0; a leave that deletes without syncing first takes the
//     successor's lock (the successor's term ends with "election znode
//     deleted": the checker's znode_deleted).
//   - 1: the reply to the successor's breadcrumb write is lost, and it
//     reconnects to the lagging follower: it must not promote, and neither
//     it nor anyone else may reuse the term or act on the old view.
//
// The lagging follower is a ZooKeeper follower nobody is connected to when
// the fault starts (every node's loss proxy to it refuses), so the
// successor hears of the leaver's delete at once; the client whose reply is
// lost is then pinned to it, with latency on the way so that the successor
// has created its lock before the leaver acts.

// LaggingLatency delays the pinned client's traffic to the lagging server
// (per chunk, each way): its reconnect, authentication and first reads take
// a few hundred ms, long after the successor's create (tens of ms).
const LaggingLatency = 200 * time.Millisecond

// lagFault is one injection of lost-reply-lagging.
type lagFault struct {
	e       *Env
	variant int
	server  int // the lagging follower
	target  string
	lost    chan *clustertest.Node // the node whose reply was lost

	mu       sync.Mutex
	holding  bool
	pinned   []*clustertest.Node
	released bool // a loss that comes later changes nothing
}

// arm loses the reply to the leader's Finish (variant 0) or to the first
// breadcrumb write of a successor (1), once.
func (f *lagFault) arm(leader *clustertest.Node) {
	match, victims := isFinish, []*clustertest.Node{leader}
	if f.variant == 1 {
		match, victims = isBreadcrumbWrite, nil
		for _, n := range f.e.C.Nodes {
			if n != leader {
				victims = append(victims, n)
			}
		}
	}
	for _, n := range victims {
		for _, p := range n.ZKLossProxies {
			p.LoseRepliesHooked(1, match, zktest.LossHooks{Before: f.before(n), After: f.after(n)})
		}
	}
}

// disarm drops the armed losses and ends a hold begun for a request whose
// reply was not lost after all (its connection failed first).
func (f *lagFault) disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.e.C.Nodes {
		for _, p := range n.ZKLossProxies {
			p.Disarm()
		}
	}
	if f.holding && len(f.pinned) == 0 {
		f.e.C.ZK.HoldCommits(f.server, false)
		f.holding = false
	}
}

// laggard picks the follower to hold: one whose link can hold commits if
// there is one.
func laggard(e *Env, followers []int, pick int) int {
	for k := range followers {
		if s := followers[(pick+k)%len(followers)]; e.C.ZK.CanHoldCommits(s) {
			return s
		}
	}
	return followers[pick%len(followers)]
}

// The record names the matchers look for in wire paths, from cluster.Layout
// (nothing outside package cluster spells them).
var (
	breadcrumbSuffix = "/" + path.Base(cluster.Layout{}.Breadcrumb())
	electionElem     = "/" + path.Base(cluster.Layout{}.ElectionDir()) + "/"
)

// isFinish matches Term.Finish: one multi deleting the breadcrumb and an
// election znode.
func isFinish(op int32, path string) bool {
	return op == zktest.OpMulti && strings.Contains(path, "delete ") && strings.Contains(path, breadcrumbSuffix) &&
		strings.Contains(path, electionElem)
}

// isBreadcrumbWrite matches a term's guarded write of the breadcrumb
// (Term.WriteBreadcrumb): a multi whose first op checks the term's
// election znode, then a create or set of the breadcrumb.
func isBreadcrumbWrite(op int32, path string) bool {
	if op != zktest.OpMulti || !strings.HasPrefix(path, "check ") {
		return false
	}
	_, w, _ := strings.Cut(path, "; ")
	return (strings.HasPrefix(w, "create ") || strings.HasPrefix(w, "set ")) && strings.HasSuffix(w, breadcrumbSuffix)
}

// lostReplyLagging injects one lost-reply-lagging fault and heals it.
func (m *Nemesis) lostReplyLagging(leader *clustertest.Node, id int, pick int, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	variant := (m.count[LostReplyLagging] - 1) % 2
	_, followers := zkRoles(e.C.ZK)
	if len(followers) == 0 {
		inject(leader.ID, "variant", variant, "lagging", "none")
		e.Log("lag", "fault", id, "skipped", "no ZooKeeper follower")
		heal(leader.ID)
		return
	}
	f := &lagFault{e: e, variant: variant, server: laggard(e, followers, pick), lost: make(chan *clustertest.Node, 1)}
	f.target = fmt.Sprintf("zk%d", f.server+1)
	inject(leader.ID, "variant", variant, "lagging", f.target)
	if !e.C.ZK.CanHoldCommits(f.server) { // synced by snapshot: its link is copied as bytes
		e.Log("zk_resync", "server", f.target, "holdable", e.C.ZK.Holdable(f.server, 15*time.Second))
	}

	// Nobody on the lagging server: the successor must hear of the
	// leaver's writes at once.
	for _, n := range e.C.Nodes {
		n.ZKLossProxies[f.server].Refuse(true)
	}
	time.Sleep(500 * time.Millisecond)

	// Under load a ceding leader's demote hook may time out (no Finish
	// then) or the successor may be slow: try again, up to three times.
	out := holdIn(300*time.Millisecond, 1500*time.Millisecond)
	lost := false
	for attempt := 1; attempt <= 3 && !lost; attempt++ {
		l := leader
		if attempt > 1 {
			e.WaitRecovered(LivenessBound)
			if l = e.Leader(); l == nil {
				continue
			}
		}
		e.waitStandby(e.successors(l), 20*time.Second)
		f.arm(l)
		cede(e, l, out)
		select {
		case n := <-f.lost:
			// The successor takes over and the pinned node acts on what
			// the lagging server shows it; the hold stays well below
			// syncLimit × tickTime, after which the leader would drop
			// the follower.
			time.Sleep(holdIn(1500*time.Millisecond, 3*time.Second))
			e.Log("lag", "fault", id, "node", n.ID, "server", f.target, "lost", true, "attempt", attempt)
			lost = true
		case <-time.After(6 * time.Second):
			e.Log("lag", "fault", id, "server", f.target, "lost", false, "attempt", attempt)
			f.disarm()
		}
	}
	f.release()
	heal(leader.ID)
}

// before runs as n's matching request arrives, before it is forwarded: the
// follower catches up to what n has seen (so it will accept n's reconnect),
// then its commits are held.
func (f *lagFault) before(n *clustertest.Node) func(seen int64) {
	return func(seen int64) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.released || f.holding {
			return
		}
		addr := f.e.C.ZK.Servers[f.server].Addr()
		deadline := time.Now().Add(2 * time.Second)
		z, err := zktest.Zxid(addr)
		for (err != nil || z < seen) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			z, err = zktest.Zxid(addr)
		}
		held := f.e.C.ZK.HoldCommits(f.server, true)
		f.holding = true
		f.e.Log("zk_lag", "server", f.target, "node", n.ID, "seen", fmt.Sprintf("0x%x", seen),
			"zxid", fmt.Sprintf("0x%x", z), "held_links", held)
	}
}

// after runs once n's reply was held back, before its connection is cut:
// n may now reach only the lagging server, slowly.
func (f *lagFault) after(n *clustertest.Node) func() {
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.released {
			return
		}
		f.pinned = append(f.pinned, n)
		for j, p := range n.ZKLossProxies {
			if j != f.server {
				p.Refuse(true)
			}
		}
		n.ZKProxies[f.server].SetLatency(LaggingLatency)
		n.ZKLossProxies[f.server].Refuse(false)
		select {
		case f.lost <- n:
		default:
		}
	}
}

// release ends the hold and every pin, and disarms what was not used.
func (f *lagFault) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = true
	f.e.C.ZK.HoldCommits(f.server, false)
	for _, n := range f.pinned {
		n.ZKProxies[f.server].SetLatency(0)
	}
	for _, n := range f.e.C.Nodes {
		for _, p := range n.ZKLossProxies {
			p.Disarm()
			p.Refuse(false)
		}
	}
}
