package backendtest_test

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// Every backend is a backendtest.Silencer (the TermEnd obligation).

// Silence stops renewing id's term: the world then ends it its demote
// budget before its Expiry.
func (m *memory) Silence(t *testing.T, id string) {
	t.Helper()
	m.holds(t, id)
	m.w.StopRenewals(id)
}

func (m *memory) DemoteBudget() time.Duration { return m.w.DemoteBudget() }

// Silence holds the node's connection (as Disconnect does) until the test
// ends: no renewal reaches the server.
func (z *zooKeeper) Silence(t *testing.T, id string) {
	t.Helper()
	n := z.node(t, id)
	s := session(t, n.client)
	n.proxy.Blackhole(true)
	n.proxy.Reset()
	t.Cleanup(func() { n.proxy.Blackhole(false) }) // before the client closes
	waitState(t, s, func(st zk.State) bool { return st != zk.StateConnected }, "disconnected")
}

func (z *zooKeeper) DemoteBudget() time.Duration { return demoteBudget }

// Silence holds the node's connection (as Disconnect does) until the test
// ends: no renewal reaches etcd.
func (b *etcdBackend) Silence(t *testing.T, id string) {
	t.Helper()
	n := b.node(t, id)
	n.proxy.Blackhole(true)
	n.proxy.Reset()
	t.Cleanup(func() { n.proxy.Blackhole(false) }) // before the client closes
	waitUntil(t, func() bool { return !n.conn.Connected() }, "disconnected")
}

func (b *etcdBackend) DemoteBudget() time.Duration { return demoteBudget }
