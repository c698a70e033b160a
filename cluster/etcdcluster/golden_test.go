package etcdcluster

import (
	"regexp"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/internal/goldentest"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// TestGoldenRecords is the golden-file test of every record failoverd
// stores in etcd (package goldentest, shared with zkcluster's): each
// record's key, whether it is bound to the session's lease, and its exact
// bytes.
//
// go test ./cluster/etcdcluster/ -run Golden -update rewrites the golden
// files from what this backend stores; run zkcluster's without -update
// afterwards to check that both backends still agree.
func TestGoldenRecords(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	goldentest.Run(t, &goldenBackend{c: c, adm: admin(t, c), nodes: map[goldentest.Store]*node{}})
}

// goldenBackend is etcd to goldentest: Stores of nodes with a client and
// Conn of their own, and an operator's raw client.
type goldenBackend struct {
	c     *etcdtest.Cluster
	adm   *clientv3.Client
	nodes map[goldentest.Store]*node // by their Store
}

// Store is the Store of a new node a (instance inst-a) in layout l.
func (b *goldenBackend) Store(t *testing.T, l cluster.Layout) goldentest.Store {
	t.Helper()
	n := newNode(t, b.c.Endpoints(), l, "a")
	b.nodes[n.s] = n
	return n.s
}

// Term campaigns for s's node (fair mode).
func (b *goldenBackend) Term(t *testing.T, s goldentest.Store) cluster.Term {
	t.Helper()
	terms, _ := b.nodes[s].campaign(t, Fair)
	return next(t, terms).t.Term
}

// goldenKind of a key: session (bound to a lease) or persistent.
func goldenKind(lease int64) string {
	if lease != 0 {
		return goldentest.Session
	}
	return goldentest.Persistent
}

func (b *goldenBackend) Get(t *testing.T, key string) ([]byte, string) {
	t.Helper()
	resp, err := b.adm.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("raw read of %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("raw read of %s: no such key", key)
	}
	return resp.Kvs[0].Value, goldenKind(resp.Kvs[0].Lease)
}

// Put seeds data at key, without a lease.
func (b *goldenBackend) Put(t *testing.T, key string, data []byte) {
	t.Helper()
	if _, err := b.adm.Put(t.Context(), key, string(data)); err != nil {
		t.Fatalf("seeding %s: %v", key, err)
	}
}

// Tree lists every key under root (etcd has none at root itself).
func (b *goldenBackend) Tree(t *testing.T, root string) []goldentest.Node {
	t.Helper()
	resp, err := b.adm.Get(t.Context(), root+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []goldentest.Node
	for _, k := range resp.Kvs {
		out = append(out, goldentest.Node{Path: string(k.Key), Kind: goldenKind(k.Lease)})
	}
	return out
}

// Format: a fair-mode election key is named c_<lease id in hex>, and is
// never rewritten while it lives.
func (b *goldenBackend) Format() goldentest.Format {
	return goldentest.Format{
		PathsFile: "paths-etcd.txt",
		PathsHeader: "# Every key failoverd's records make in etcd (etcdcluster's TestGoldenRecords):\n" +
			"# key, and session (bound to the session's lease) or persistent.\n",
		EntryName:    regexp.MustCompile(`/c_[0-9a-f]+$`),
		EntryPattern: "/c_{lease}",
	}
}
