package zkcluster

import (
	"errors"
	"path"
	"regexp"
	"testing"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/internal/goldentest"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// TestGoldenRecords is the golden-file test of every record failoverd
// stores in ZooKeeper (package goldentest, shared with etcdcluster's): each
// record's znode path, whether it is ephemeral, and its exact bytes.
//
// go test ./cluster/zkcluster/ -run Golden -update rewrites the golden
// files from what this backend stores; run etcdcluster's without -update
// afterwards to check that both backends still agree.
func TestGoldenRecords(t *testing.T) {
	zkc := zktest.Start(t, 1)
	_, c := newStore(t, zkc, "a", "inst-a")
	goldentest.Run(t, &goldenBackend{zkc: zkc, adm: session(t, c)})
}

// goldenBackend is ZooKeeper to goldentest: Stores on clients of their own
// and an operator's raw session.
type goldenBackend struct {
	zkc *zktest.Cluster
	adm *zk.Session
}

// Store is a Store of node a in layout l on a client of its own.
func (b *goldenBackend) Store(t *testing.T, l cluster.Layout) goldentest.Store {
	t.Helper()
	_, c := newStore(t, b.zkc, "a", "inst-a")
	s, err := New(Config{Layout: l, NodeID: "a", Instance: "inst-a"}, Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Term campaigns for node a (fair mode) on s's client.
func (b *goldenBackend) Term(t *testing.T, s goldentest.Store) cluster.Term {
	t.Helper()
	zs := s.(*Store)
	return elect(t, zs, zs.client, "a").Term
}

// kind of a znode: session (ephemeral), dir (no data, made for its
// children) or persistent.
func goldenKind(data []byte, st zk.Stat) string {
	switch {
	case st.EphemeralOwner != 0:
		return goldentest.Session
	case len(data) == 0 && st.NumChildren > 0:
		return goldentest.Parent
	}
	return goldentest.Persistent
}

func (b *goldenBackend) Get(t *testing.T, p string) ([]byte, string) {
	t.Helper()
	data, st, err := b.adm.Get(t.Context(), p)
	if err != nil {
		t.Fatalf("raw read of %s: %v", p, err)
	}
	return data, goldenKind(data, st)
}

// Put seeds data at p as a persistent znode (replacing what is there).
func (b *goldenBackend) Put(t *testing.T, p string, data []byte) {
	t.Helper()
	ctx := t.Context()
	if err := b.adm.EnsurePath(ctx, path.Dir(p)); err != nil {
		t.Fatal(err)
	}
	if err := b.adm.Delete(ctx, p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	if _, _, err := b.adm.Create(ctx, p, data, zk.Persistent); err != nil {
		t.Fatalf("seeding %s: %v", p, err)
	}
}

// Tree lists every znode below root, root included.
func (b *goldenBackend) Tree(t *testing.T, root string) []goldentest.Node {
	t.Helper()
	_, kind := b.Get(t, root)
	out := []goldentest.Node{{Path: root, Kind: kind}}
	kids, err := b.adm.Children(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		out = append(out, b.Tree(t, path.Join(root, k))...)
	}
	return out
}

// Format: a fair-mode election znode is named c_<GUID>-n_<sequence>, and
// the leader's renewal rewrites it without the join nonce.
func (b *goldenBackend) Format() goldentest.Format {
	return goldentest.Format{
		PathsFile: "paths-zookeeper.txt",
		PathsHeader: "# Every znode failoverd's records make in ZooKeeper (zkcluster's TestGoldenRecords):\n" +
			"# path, and session (ephemeral), persistent, or dir (no data, a parent).\n",
		EntryName:    regexp.MustCompile(`/c_[0-9a-f]{32}-n_[0-9]{10}$`),
		EntryPattern: "/c_{guid}-n_{seq}",
		EntryRenewed: true,
	}
}
