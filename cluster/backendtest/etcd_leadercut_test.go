package backendtest_test

import (
	"testing"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/backendtest"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// PartitionLeader starts an etcd cluster of its own in which the etcd
// leader is cut off from its two peers (etcdtest.Isolate) while its
// clients stay connected to it: the member chosen at the start is made
// the leader again (a leadership transfer) right before the cut, should
// leadership have moved.
func (b *etcdBackend) PartitionLeader(t *testing.T) backendtest.Partition {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{Server: b.c.Server()})
	return &etcdLeaderPartition{etcdPartition{c: c, cut: c.Leader(), layout: cluster.Layout{Root: "/conformance", Cluster: "partition-leader"}}}
}

// etcdLeaderPartition is an etcdPartition whose member cut off is the
// etcd leader.
type etcdLeaderPartition struct{ etcdPartition }

// CutOff makes the member the etcd leader if it no longer is, and
// isolates it from its peers; it keeps its client port.
func (p *etcdLeaderPartition) CutOff(t *testing.T) func() {
	t.Helper()
	p.c.MoveLeader(p.cut)
	p.c.Isolate(p.cut)
	t.Logf("cut off the etcd leader %s", p.c.Members[p.cut].Name)
	return func() { p.c.Heal(p.cut) }
}
