package backendtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/backendtest"
	"github.com/failoverd/failoverd/cluster/zkcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// The ZooKeeper backend (zkcluster, with package election's elector in
// fair mode, wired as the daemon wires them) against one real server; the
// partition test against an ensemble of three whose quorum links run
// through fault proxies. Without ZooKeeper (Debian's package and java)
// the test is skipped, and under CI=true it fails (zktest.Require).
func TestZooKeeper(t *testing.T) {
	zkc := zktest.Start(t, 1)
	var n atomic.Int64
	backendtest.Run(t, func(t *testing.T) backendtest.Backend {
		// Each test gets a cluster of its own on the shared server.
		return newZooKeeper(t, zkc, fmt.Sprintf("c%d", n.Add(1)))
	})
}

// Session timing of the single-server tests: leases of seconds, renewals
// every tick.
const (
	sessionTimeout = 4 * time.Second
	demoteBudget   = 600 * time.Millisecond
)

// zooKeeper is one failoverd cluster (a layout) on a ZooKeeper server.
type zooKeeper struct {
	zkc    *zktest.Cluster
	layout cluster.Layout
	admin  *zkcluster.Store // an operator's tool: no node id
	adminC *zk.Client

	mu    sync.Mutex
	nodes map[string]*zkNode
}

// zkNode is one node: its client reaches the server through a proxy of
// its own, which Disconnect cuts.
type zkNode struct {
	client *zk.Client
	proxy  *netproxy.Proxy
}

func newZooKeeper(t *testing.T, zkc *zktest.Cluster, name string) *zooKeeper {
	t.Helper()
	z := &zooKeeper{zkc: zkc, layout: cluster.Layout{Root: "/conformance", Cluster: name}, nodes: map[string]*zkNode{}}
	z.adminC = newClient(t, zkc.Addrs(), sessionTimeout)
	s, err := zkcluster.New(zkcluster.Config{Layout: z.layout}, zkcluster.Deps{Client: z.adminC})
	if err != nil {
		t.Fatal(err)
	}
	z.admin = s
	return z
}

func newClient(t *testing.T, servers []string, timeout time.Duration) *zk.Client {
	t.Helper()
	c, err := zk.NewClient(zk.Config{Servers: servers, SessionTimeout: timeout}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newNode wires node id as the daemon does: one client, a Store, and an
// elector in the Store's layout.
func newNode(t *testing.T, layout cluster.Layout, c *zk.Client, id string, ec election.Config) (cluster.Elector, cluster.Records) {
	t.Helper()
	s, err := zkcluster.New(zkcluster.Config{Layout: layout, NodeID: id, Instance: "inst-" + id}, zkcluster.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ec.Dir, ec.NodeID, ec.Mode = layout.ElectionDir(), id, election.Fair
	el, err := election.New(ec, election.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return s.Elector(el), s
}

func (z *zooKeeper) Node(t *testing.T, id string) (cluster.Elector, cluster.Records) {
	t.Helper()
	return z.newNode(t, id, election.Config{})
}

// newNode is node id, with its own proxy, and its elector configured by ec
// on top of the suite's timing.
func (z *zooKeeper) newNode(t *testing.T, id string, ec election.Config) (cluster.Elector, cluster.Records) {
	t.Helper()
	addr := z.zkc.Servers[0].Addr()
	p := netproxy.New(t, func() string { return addr })
	c := newClient(t, []string{p.Addr()}, sessionTimeout)
	z.mu.Lock()
	z.nodes[id] = &zkNode{client: c, proxy: p}
	z.mu.Unlock()
	ec.TickTime, ec.DemoteBudget = zktest.TickTime, demoteBudget
	return newNode(t, z.layout, c, id, ec)
}

// NodeFenceFirst is Node with the elector fencing first (a heartbeat on
// every renewal, a renew interval of about half a tick).
func (z *zooKeeper) NodeFenceFirst(t *testing.T, id string, ff cluster.FenceFirst) (cluster.Elector, cluster.Records) {
	t.Helper()
	return z.newNode(t, id, election.Config{FenceFirst: ff})
}

// SuspectAfter is five ticks: about ten renew intervals (half a tick and
// a margin, 105ms).
func (z *zooKeeper) SuspectAfter() time.Duration { return 5 * zktest.TickTime }

// StandStill holds the node's connection, as Disconnect does, until resume
// or the end of the test: no renewal reaches the server, whose session
// lives on for the session timeout after the node's last request. The
// entry stays at least three quarters of the session timeout (its last
// renewal came within a renew interval or two of the hold, unless the
// machine stalled it longer).
func (z *zooKeeper) StandStill(t *testing.T, id string) (time.Duration, func()) {
	t.Helper()
	n := z.node(t, id)
	s := session(t, n.client)
	n.proxy.Blackhole(true)
	n.proxy.Reset()
	t.Cleanup(func() { n.proxy.Blackhole(false) }) // before the client closes
	waitState(t, s, func(st zk.State) bool { return st != zk.StateConnected }, "disconnected")
	return sessionTimeout * 3 / 4, func() {
		t.Helper()
		n.proxy.Blackhole(false)
		deadline := time.Now().Add(30 * time.Second)
		for {
			if cur := n.client.Current(); cur != nil {
				if st, _ := cur.State(); st == zk.StateConnected {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not connect again within 30s", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (z *zooKeeper) node(t *testing.T, id string) *zkNode {
	t.Helper()
	z.mu.Lock()
	defer z.mu.Unlock()
	n := z.nodes[id]
	if n == nil {
		t.Fatalf("zookeeper backend: no node %s", id)
	}
	return n
}

// session waits for c's session.
func session(t *testing.T, c *zk.Client) *zk.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := c.Session(ctx)
	if err != nil {
		t.Fatalf("no zookeeper session: %v", err)
	}
	return s
}

// EndSession makes the server expire the node's session (as ZooKeeper's
// own tests do) and waits until the client noticed.
func (z *zooKeeper) EndSession(t *testing.T, id string) {
	t.Helper()
	s := session(t, z.node(t, id).client)
	if err := zktest.Expire(z.zkc.Servers[0].Addr(), s.ID(), s.Password()); err != nil {
		t.Fatalf("expiring the session of %s: %v", id, err)
	}
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the client of %s did not notice its session expired", id)
	}
}

// DeleteEntry deletes the node's election znode (the one whose data names
// it) with the operator's session.
func (z *zooKeeper) DeleteEntry(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := session(t, z.adminC)
	dir := z.layout.ElectionDir()
	kids, err := s.Children(ctx, dir)
	if err != nil {
		t.Fatalf("listing %s: %v", dir, err)
	}
	var found []string
	for _, k := range kids {
		data, _, err := s.Get(ctx, path.Join(dir, k))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			t.Fatalf("reading %s: %v", k, err)
		}
		var c struct {
			NodeID string `json:"node_id"`
		}
		if json.Unmarshal(data, &c) == nil && c.NodeID == id {
			found = append(found, path.Join(dir, k))
		}
	}
	if len(found) != 1 {
		t.Fatalf("election znodes of %s: %v; want exactly one", id, found)
	}
	if err := s.Delete(ctx, found[0], -1); err != nil {
		t.Fatalf("deleting %s: %v", found[0], err)
	}
}

// Disconnect holds the node's connection (its proxy carries nothing and
// resets it, so the client reconnects into the hold) until reconnect, and
// checks that the session survived.
func (z *zooKeeper) Disconnect(t *testing.T, id string) func() {
	t.Helper()
	n := z.node(t, id)
	s := session(t, n.client)
	n.proxy.Blackhole(true)
	n.proxy.Reset()
	waitState(t, s, func(st zk.State) bool { return st != zk.StateConnected }, "disconnected")
	return func() {
		t.Helper()
		n.proxy.Blackhole(false)
		waitState(t, s, func(st zk.State) bool { return st == zk.StateConnected }, "connected again")
		if cur := n.client.Current(); cur != s {
			t.Fatalf("the session of %s did not survive the disconnect", id)
		}
	}
}

// waitState waits until s's state satisfies ok.
func waitState(t *testing.T, s *zk.Session, ok func(zk.State) bool, what string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		st, changed := s.State()
		if ok(st) {
			return
		}
		select {
		case <-changed:
		case <-s.Done():
			t.Fatalf("the session ended waiting until %s: %v", what, s.Err())
		case <-deadline:
			t.Fatalf("the session was not %s within 30s (state %v)", what, st)
		}
	}
}

func (z *zooKeeper) SetPause(t *testing.T, p *cluster.Pause) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if p == nil {
		if _, err := z.admin.ClearPause(ctx); err != nil {
			t.Fatalf("ClearPause: %v", err)
		}
		return
	}
	got, created, err := z.admin.SetPause(ctx, *p)
	if err != nil || !created {
		t.Fatalf("SetPause = %+v, created %t, %v; want ours created", got, created, err)
	}
}

func (z *zooKeeper) History(t *testing.T) []cluster.HistoryEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	h, err := z.admin.History(ctx)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	return h
}

// Partition starts an ensemble of three whose quorum links run through
// fault proxies, with production's relation between the session timeout
// and how long a cut-off follower goes on serving (syncLimit × tickTime:
// 6 s against 2 s sessions).
func (z *zooKeeper) Partition(t *testing.T) backendtest.Partition {
	t.Helper()
	const tick = 200 * time.Millisecond
	zkc := zktest.StartOpts(t, zktest.Options{Servers: 3, TickTime: tick, SyncLimit: 30, ProxyQuorum: true})
	cut := (zkc.Leader() + 1) % 3 // a follower
	return &zkPartition{zkc: zkc, cut: cut, layout: cluster.Layout{Root: "/conformance", Cluster: "partition"}}
}

// zkPartition is a cluster on an ensemble in which server cut (a
// follower) can be cut off from its peers.
type zkPartition struct {
	zkc    *zktest.Cluster
	cut    int
	layout cluster.Layout
}

const partitionSession = 2 * time.Second

func (p *zkPartition) node(t *testing.T, id string, servers []string) (cluster.Elector, cluster.Records) {
	t.Helper()
	c := newClient(t, servers, partitionSession)
	return newNode(t, p.layout, c, id, election.Config{TickTime: p.zkc.Options().TickTime, DemoteBudget: demoteBudget})
}

func (p *zkPartition) Node(t *testing.T, id string) (cluster.Elector, cluster.Records) {
	var others []string
	for i, s := range p.zkc.Servers {
		if i != p.cut {
			others = append(others, s.Addr())
		}
	}
	return p.node(t, id, others)
}

func (p *zkPartition) MinorityNode(t *testing.T, id string) (cluster.Elector, cluster.Records) {
	return p.node(t, id, []string{p.zkc.Servers[p.cut].Addr()})
}

// CutOff isolates the follower from its peers; it keeps its client port.
func (p *zkPartition) CutOff(t *testing.T) func() {
	t.Helper()
	if mode, _ := zktest.Mode(p.zkc.Servers[p.cut].Addr()); mode != "follower" {
		t.Fatalf("server %d to cut off is %q, want a follower", p.cut, mode)
	}
	p.zkc.Isolate(p.cut)
	return func() { p.zkc.Heal(p.cut) }
}
