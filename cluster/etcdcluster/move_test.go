package etcdcluster

import (
	"bytes"
	"encoding/json"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// The records of a move: a record of an earlier version (no ID) gets one
// at the first join, keeping its mode, and keeps it; the cluster record is
// replaced only at the revision read; the carried records are copied as
// they are and never over existing ones.
func testMove(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	ctx := ctxT(t)
	if _, err := adm.Put(ctx, l.Config(), `{"election_mode":"fair"}`); err != nil {
		t.Fatal(err)
	}
	a := newNode(t, c.Endpoints(), l, "a")
	rec, err := a.s.CheckJoin(ctx, "fair", "")
	if err != nil || rec.ID == "" || rec.ElectionMode != "fair" {
		t.Fatalf("first join of a record without an ID: %+v, %v; want an ID given, mode fair", rec, err)
	}
	b := newNode(t, c.Endpoints(), l, "b")
	if got, err := b.s.CheckJoin(ctx, "fair", rec.ID); err != nil || got.ID != rec.ID {
		t.Fatalf("join of a node whose home is the given ID: %+v, %v", got, err)
	}
	stored, rev, err := a.s.ClusterRecord(ctx)
	if err != nil || stored == nil || stored.ID != rec.ID {
		t.Fatalf("ClusterRecord: %+v, %v; want the record with ID %s", stored, err, rec.ID)
	}
	marked := *stored
	marked.MovedTo = "elsewhere"
	markRev, stamp, err := a.s.WriteClusterRecord(ctx, marked, rev)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := adm.Get(ctx, l.Config())
	if err != nil || len(resp.Kvs) != 1 || stamp < resp.Kvs[0].ModRevision || stamp < resp.Kvs[0].CreateRevision {
		t.Fatalf("stamp %d, record %+v, %v; want a stamp at or above the record's revisions", stamp, resp.Kvs, err)
	}
	if mod, _ := markRev.Backend(); mod != resp.Kvs[0].ModRevision {
		t.Fatalf("the mark's revision %v; want the record's mod revision %d", markRev, resp.Kvs[0].ModRevision)
	}
	if _, _, err := a.s.WriteClusterRecord(ctx, *stored, rev); err == nil {
		t.Fatal("WriteClusterRecord at a revision read before a change succeeded")
	}
	if _, err := b.s.CheckJoin(ctx, "fair", ""); err == nil {
		t.Fatal("a new node joined a record marked moved (its store had not read it yet)")
	}

	// Carried records.
	c1 := cluster.Carried{Breadcrumb: []byte(`{"node_id":"a"}`), History: []byte(`[]`)}
	l2 := newLayout()
	to := newNode(t, c.Endpoints(), l2, "t")
	if err := to.s.WriteCarried(ctx, c1); err != nil {
		t.Fatal(err)
	}
	got, err := to.s.ReadCarried(ctx)
	if err != nil || !bytes.Equal(got.Breadcrumb, c1.Breadcrumb) || !bytes.Equal(got.History, c1.History) || got.Pause != nil {
		t.Fatalf("ReadCarried: %+v, %v; want what was written, no pause", got, err)
	}
	if err := to.s.WriteCarried(ctx, cluster.Carried{Breadcrumb: []byte(`{"node_id":"b"}`)}); err == nil {
		t.Fatal("WriteCarried over an existing breadcrumb succeeded")
	}
	if got, _ := to.s.ReadCarried(ctx); !bytes.Equal(got.Breadcrumb, c1.Breadcrumb) {
		t.Fatalf("breadcrumb %s after a refused WriteCarried; want it unchanged", got.Breadcrumb)
	}
	var r cluster.ClusterRecord
	if none, _, err := to.s.ClusterRecord(ctx); none != nil || err != nil || json.Unmarshal([]byte(`{}`), &r) != nil {
		t.Fatalf("ClusterRecord of a place with none: %+v, %v", none, err)
	}
}
