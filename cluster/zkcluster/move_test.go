package zkcluster

import (
	"bytes"
	"errors"
	"testing"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// The records of a move: a record of an earlier version (no ID) gets one
// at the first join, keeping its mode, and keeps it; the cluster record is
// replaced only at the version read, its write's stamp is the zxid of the
// write; a record marked moved refuses every node at once, one that joined
// it before included; the carried records are copied as they are and
// never over others.
func TestMoveRecords(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	a, ac := newStore(t, zkc, "a", "inst-a")
	sess := session(t, ac)
	if err := sess.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(ctx, testLayout.Config(), []byte(`{"election_mode":"fair"}`), zk.Persistent); err != nil {
		t.Fatal(err)
	}
	rec, err := a.CheckJoin(ctx, "fair", "")
	if err != nil || rec.ID == "" || rec.ElectionMode != "fair" {
		t.Fatalf("first join of a record without an ID: %+v, %v; want an ID given, mode fair", rec, err)
	}
	b, _ := newStore(t, zkc, "b", "inst-b")
	if got, err := b.CheckJoin(ctx, "fair", rec.ID); err != nil || got.ID != rec.ID {
		t.Fatalf("join of a node whose home is the given ID: %+v, %v", got, err)
	}
	stored, rev, err := a.ClusterRecord(ctx)
	if err != nil || stored == nil || stored.ID != rec.ID {
		t.Fatalf("ClusterRecord: %+v, %v; want the record with ID %s", stored, err, rec.ID)
	}
	marked := *stored
	marked.MovedTo = "elsewhere"
	markRev, stamp, err := a.WriteClusterRecord(ctx, marked, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, st, err := sess.Get(ctx, testLayout.Config()); err != nil || stamp != st.Mzxid || stamp <= st.Czxid {
		t.Fatalf("stamp %d, record stat %+v, %v; want the write's zxid, above the record's create", stamp, st, err)
	}
	if _, st, _ := sess.Get(ctx, testLayout.Config()); markRev != revision(st.Version) {
		t.Fatalf("the mark's revision %v; want the znode's version %d", markRev, st.Version)
	}
	if _, _, err := a.WriteClusterRecord(ctx, *stored, rev); err == nil {
		t.Fatal("WriteClusterRecord at a version read before a change succeeded")
	}
	var moved *cluster.MovedError
	for _, home := range []string{"", rec.ID} {
		if _, err := b.CheckJoin(ctx, "fair", home); !errors.As(err, &moved) || moved.MovedTo != "elsewhere" {
			t.Fatalf("join (home %q) of a record marked moved: %v; want a *MovedError naming where it went", home, err)
		}
	}

	// Carried records, into another root.
	c1 := cluster.Carried{Breadcrumb: []byte(`{"node_id":"a"}`), History: []byte(`[]`)}
	to, err := New(Config{Layout: cluster.Layout{Root: "/moved", Cluster: "zc"}}, Deps{Client: ac})
	if err != nil {
		t.Fatal(err)
	}
	if err := to.WriteCarried(ctx, c1); err != nil {
		t.Fatal(err)
	}
	if err := to.WriteCarried(ctx, c1); err != nil {
		t.Fatalf("WriteCarried of the same records again (a move run again): %v", err)
	}
	got, err := to.ReadCarried(ctx)
	if err != nil || !bytes.Equal(got.Breadcrumb, c1.Breadcrumb) || !bytes.Equal(got.History, c1.History) || got.Pause != nil {
		t.Fatalf("ReadCarried: %+v, %v; want what was written, no pause", got, err)
	}
	if err := to.WriteCarried(ctx, cluster.Carried{Breadcrumb: []byte(`{"node_id":"b"}`)}); err == nil {
		t.Fatal("WriteCarried over another breadcrumb succeeded")
	}
	if none, _, err := to.ClusterRecord(ctx); none != nil || err != nil {
		t.Fatalf("ClusterRecord of a place with none: %+v, %v", none, err)
	}
}
