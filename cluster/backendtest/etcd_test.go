package backendtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/backendtest"
	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/test/etcdtest"
	"github.com/failoverd/failoverd/test/netproxy"
)

// The etcd backend (etcdcluster, fair mode, wired as a daemon would wire
// it: one client, one Conn, a Store and its Elector per node) against a
// 3-member etcd cluster of separate processes, on every etcd server line
// present (Debian's 3.4 and the pinned release); the partition test
// against a cluster of its own whose member is cut off from its peers.
// Without etcd the test is skipped, and under CI=true it fails
// (etcdtest.Servers).
func TestEtcd(t *testing.T) {
	for _, srv := range etcdtest.Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			c := etcdtest.Start(t, etcdtest.Options{Server: srv})
			var n atomic.Int64
			backendtest.Run(t, func(t *testing.T) backendtest.Backend {
				// Each test gets a cluster of its own on the shared etcd.
				return newEtcd(t, c, fmt.Sprintf("c%d", n.Add(1)))
			})
		})
	}
}

// Lease timing: Disconnect's reconnect comes within a few seconds, well
// inside the lease, so the session survives it; the partition test uses a
// shorter lease, so that the successor wins sooner.
const (
	etcdTTL          = 10 * time.Second
	etcdPartitionTTL = 3 * time.Second
)

// etcdBackend is one failoverd cluster (a layout) on an etcd cluster.
type etcdBackend struct {
	c      *etcdtest.Cluster
	layout cluster.Layout
	adm    *clientv3.Client
	admin  *etcdcluster.Store // an operator's tool: no node id

	mu    sync.Mutex
	nodes map[string]*etcdNode
}

// etcdNode is one node: its client reaches one etcd member through a
// proxy of its own, which Disconnect cuts.
type etcdNode struct {
	conn  *etcdcluster.Conn
	proxy *netproxy.Proxy
}

func newEtcd(t *testing.T, c *etcdtest.Cluster, name string) *etcdBackend {
	t.Helper()
	b := &etcdBackend{c: c, layout: cluster.Layout{Root: "/conformance", Cluster: name}, nodes: map[string]*etcdNode{}}
	var conn *etcdcluster.Conn
	b.adm, conn = dialEtcd(t, c.Endpoints(), etcdTTL)
	s, err := etcdcluster.New(etcdcluster.Config{Layout: b.layout}, etcdcluster.Deps{Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	b.admin = s
	return b
}

// dialEtcd returns a client of endpoints and a Conn on it, closed when the
// test ends.
func dialEtcd(t *testing.T, endpoints []string, ttl time.Duration) (*clientv3.Client, *etcdcluster.Conn) {
	t.Helper()
	cli, err := etcdcluster.Dial(etcdcluster.DialConfig{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := etcdcluster.NewConn(cli, etcdcluster.ConnConfig{LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cli.Close() })
	return cli, conn
}

// newEtcdNode wires node id as a daemon does: a Conn, a Store, and the
// Store's elector in fair mode.
func newEtcdNode(t *testing.T, layout cluster.Layout, conn *etcdcluster.Conn, id string) (cluster.Elector, cluster.Records) {
	t.Helper()
	return newEtcdNodeWith(t, layout, conn, id, cluster.FenceFirst{})
}

// newEtcdNodeWith is newEtcdNode with the elector fencing first with ff
// (ProveOut nil: off).
func newEtcdNodeWith(t *testing.T, layout cluster.Layout, conn *etcdcluster.Conn, id string, ff cluster.FenceFirst) (cluster.Elector, cluster.Records) {
	t.Helper()
	s, err := etcdcluster.New(etcdcluster.Config{Layout: layout, NodeID: id, Instance: "inst-" + id}, etcdcluster.Deps{Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	el, err := s.Elector(etcdcluster.ElectorConfig{NodeID: id, Mode: etcdcluster.Fair, DemoteBudget: demoteBudget, FenceFirst: ff})
	if err != nil {
		t.Fatal(err)
	}
	return el, s
}

func (b *etcdBackend) Node(t *testing.T, id string) (cluster.Elector, cluster.Records) {
	t.Helper()
	return b.NodeFenceFirst(t, id, cluster.FenceFirst{})
}

// NodeFenceFirst is Node with the elector fencing first (a heartbeat on
// every renewal of the lease, every renew interval: a second).
func (b *etcdBackend) NodeFenceFirst(t *testing.T, id string, ff cluster.FenceFirst) (cluster.Elector, cluster.Records) {
	t.Helper()
	b.mu.Lock()
	p := b.c.ClientProxy(len(b.nodes) % len(b.c.Members))
	b.mu.Unlock()
	_, conn := dialEtcd(t, []string{"http://" + p.Addr()}, etcdTTL)
	b.mu.Lock()
	b.nodes[id] = &etcdNode{conn: conn, proxy: p}
	b.mu.Unlock()
	return newEtcdNodeWith(t, b.layout, conn, id, ff)
}

// SuspectAfter is two and a half renew intervals of the suite's lease (a
// third of the TTL, at most a second).
func (b *etcdBackend) SuspectAfter() time.Duration {
	return 5 * etcdcluster.DefaultRenewInterval(etcdTTL) / 2
}

// StandStill holds the node's connection, as Disconnect does, until resume
// or the end of the test: no renewal reaches etcd, whose lease lives on
// for its TTL after the last renewal it got. The entry stays at least
// three quarters of the TTL (its last renewal came within a renew
// interval or two of the hold, unless the machine stalled it longer).
// With more nodes than etcd members, nodes share a proxy: the suite's
// tests that hold one use no more.
func (b *etcdBackend) StandStill(t *testing.T, id string) (time.Duration, func()) {
	t.Helper()
	n := b.node(t, id)
	n.proxy.Blackhole(true)
	n.proxy.Reset()
	t.Cleanup(func() { n.proxy.Blackhole(false) }) // before the client closes
	waitUntil(t, func() bool { return !n.conn.Connected() }, "disconnected")
	return etcdTTL * 3 / 4, func() {
		t.Helper()
		n.proxy.Blackhole(false)
		waitUntil(t, n.conn.Connected, "connected again")
	}
}

func (b *etcdBackend) node(t *testing.T, id string) *etcdNode {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.nodes[id]
	if n == nil {
		t.Fatalf("etcd backend: no node %s", id)
	}
	return n
}

// session waits for n's live session.
func (n *etcdNode) session(t *testing.T) *etcdcluster.Session {
	t.Helper()
	ctx, cancel := context30(t)
	defer cancel()
	s, err := n.conn.Session(ctx)
	if err != nil {
		t.Fatalf("no etcd session: %v", err)
	}
	return s
}

// EndSession revokes the node's lease, as an operator can, and waits
// until the node noticed (its session ended).
func (b *etcdBackend) EndSession(t *testing.T, id string) {
	t.Helper()
	n := b.node(t, id)
	s := n.session(t)
	ctx, cancel := context30(t)
	defer cancel()
	if _, err := b.adm.Revoke(ctx, s.ID); err != nil {
		t.Fatalf("revoking the lease of %s: %v", id, err)
	}
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not notice its lease was revoked", id)
	}
}

// DeleteEntry deletes the node's election key (the one whose value names
// it) with the operator's client.
func (b *etcdBackend) DeleteEntry(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context30(t)
	defer cancel()
	prefix := b.layout.ElectionDir() + "/"
	resp, err := b.adm.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("listing %s: %v", prefix, err)
	}
	var found []string
	for _, k := range resp.Kvs {
		var c struct {
			NodeID string `json:"node_id"`
		}
		if json.Unmarshal(k.Value, &c) == nil && c.NodeID == id {
			found = append(found, string(k.Key))
		}
	}
	if len(found) != 1 {
		t.Fatalf("election keys of %s: %v; want exactly one", id, found)
	}
	if _, err := b.adm.Delete(ctx, found[0]); err != nil {
		t.Fatalf("deleting %s: %v", found[0], err)
	}
}

// Disconnect holds the node's connection (its proxy carries nothing and
// resets it, so the client reconnects into the hold) until reconnect,
// and checks that the session survived.
func (b *etcdBackend) Disconnect(t *testing.T, id string) func() {
	t.Helper()
	n := b.node(t, id)
	s := n.session(t)
	n.proxy.Blackhole(true)
	n.proxy.Reset()
	waitUntil(t, func() bool { return !n.conn.Connected() }, "disconnected")
	return func() {
		t.Helper()
		n.proxy.Blackhole(false)
		waitUntil(t, n.conn.Connected, "connected again")
		if cur := n.conn.Current(); cur != s {
			t.Fatalf("the session of %s did not survive the disconnect", id)
		}
	}
}

func waitUntil(t *testing.T, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("the node was not %s within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *etcdBackend) SetPause(t *testing.T, p *cluster.Pause) {
	t.Helper()
	ctx, cancel := context30(t)
	defer cancel()
	if p == nil {
		if _, err := b.admin.ClearPause(ctx); err != nil {
			t.Fatalf("ClearPause: %v", err)
		}
		return
	}
	got, created, err := b.admin.SetPause(ctx, *p)
	if err != nil || !created {
		t.Fatalf("SetPause = %+v, created %t, %v; want ours created", got, created, err)
	}
}

func (b *etcdBackend) History(t *testing.T) []cluster.HistoryEntry {
	t.Helper()
	ctx, cancel := context30(t)
	defer cancel()
	h, err := b.admin.History(ctx)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	return h
}

// Partition starts an etcd cluster of its own in which a follower can be
// cut off from its two peers (etcdtest.Isolate) while its clients stay
// connected to it.
func (b *etcdBackend) Partition(t *testing.T) backendtest.Partition {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{Server: b.c.Server()})
	return &etcdPartition{c: c, cut: (c.Leader() + 1) % 3, layout: cluster.Layout{Root: "/conformance", Cluster: "partition"}}
}

// etcdPartition is a cluster in which member cut (a follower) can be cut
// off from its peers.
type etcdPartition struct {
	c      *etcdtest.Cluster
	cut    int
	layout cluster.Layout
}

func (p *etcdPartition) Node(t *testing.T, id string) (cluster.Elector, cluster.Records) {
	var others []string
	for i, m := range p.c.Members {
		if i != p.cut {
			others = append(others, m.Endpoint())
		}
	}
	_, conn := dialEtcd(t, others, etcdPartitionTTL)
	return newEtcdNode(t, p.layout, conn, id)
}

func (p *etcdPartition) MinorityNode(t *testing.T, id string) (cluster.Elector, cluster.Records) {
	_, conn := dialEtcd(t, []string{p.c.Members[p.cut].Endpoint()}, etcdPartitionTTL)
	return newEtcdNode(t, p.layout, conn, id)
}

// CutOff isolates the member from its peers; it keeps its client port.
func (p *etcdPartition) CutOff(t *testing.T) func() {
	t.Helper()
	if l := p.c.Leader(); l == p.cut {
		t.Fatalf("member %d to cut off leads etcd now; want a follower", p.cut)
	}
	p.c.Isolate(p.cut)
	return func() { p.c.Heal(p.cut) }
}

func context30(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 30*time.Second)
}
