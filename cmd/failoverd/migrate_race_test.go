package main

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/failoverd/failoverd/cluster"
)

// memPlace is one coordination service's records, in memory, as the
// migration sees them (the operatorStore methods migrate uses; any other
// call panics through the nil embedded interface).
type memPlace struct {
	operatorStore

	mu      sync.Mutex
	rec     *cluster.ClusterRecord
	ver     int64 // the record's version (0: absent)
	zxid    int64 // the place's write counter: every write's stamp
	members func() []cluster.Member
	carried cluster.Carried
}

func (p *memPlace) ClusterRecord(context.Context) (*cluster.ClusterRecord, cluster.Revision, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rec == nil {
		return nil, cluster.Revision{}, nil
	}
	c := *p.rec
	c.MovedFrom = slices.Clone(p.rec.MovedFrom)
	return &c, cluster.RevisionOf(p.ver), nil
}

func (p *memPlace) WriteClusterRecord(_ context.Context, rec cluster.ClusterRecord, rev cluster.Revision) (cluster.Revision, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := rev.Backend()
	switch {
	case !ok && p.rec != nil:
		return cluster.Revision{}, 0, errors.New("exists")
	case ok && (p.rec == nil || v != p.ver):
		return cluster.Revision{}, 0, errors.New("bad version")
	}
	p.zxid++
	p.ver++
	p.rec = &rec
	return cluster.RevisionOf(p.ver), p.zxid, nil
}

func (p *memPlace) Members(context.Context) ([]cluster.Member, error) {
	if p.members == nil {
		return nil, nil
	}
	return p.members(), nil
}

func (p *memPlace) Queue(context.Context) ([]string, error) { return nil, nil }

func (p *memPlace) ReadCarried(context.Context) (cluster.Carried, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.carried, nil
}

func (p *memPlace) WriteCarried(_ context.Context, c cluster.Carried) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.carried = c
	return nil
}

// Two migrates at once (an operator's retry while the first still runs,
// or two operators): the first one's check after its mark sees a node
// still there and takes its mark back, but meanwhile the second re-marked
// the record (with the same new ID, read from the first's mark), found
// nobody and created the new record. The first must leave the second's
// mark in place: an old record open again beside a new one that admits
// the same nodes would be two elections of one cluster.
func TestConcurrentMigratesLeaveOneElection(t *testing.T) {
	old := &memPlace{rec: &cluster.ClusterRecord{ElectionMode: "fair", ID: "old-id"}, ver: 1, zxid: 1000}
	newPlace := &memPlace{}
	m := migration{old: old, new: newPlace, mode: "fair", oldWhere: "zk", newWhere: "etcd"}

	calls := 0
	old.members = func() []cluster.Member {
		calls++
		if calls == 2 {
			// migrate #1 looks after its mark: node x is still there
			// (its session is about to go). While it looks, migrate #2
			// runs to the end and, x gone, finds nobody.
			if err := m.run(context.Background(), io.Discard); err != nil {
				t.Fatalf("migrate #2: %v", err)
			}
			return []cluster.Member{{NodeID: "x"}}
		}
		return nil
	}
	err := m.run(context.Background(), io.Discard)
	if err == nil {
		t.Fatal("migrate #1 succeeded; want it refused (x ran)")
	}
	oldRec, _, _ := old.ClusterRecord(context.Background())
	newRec, _, _ := newPlace.ClusterRecord(context.Background())
	if newRec == nil {
		t.Fatal("migrate #2 created no new record")
	}
	if calls < 3 {
		t.Fatalf("members read %d times; want migrate #1's two checks and #2's", calls)
	}
	errOld := cluster.Admit(oldRec, "zk", "fair", "old-id")
	errNew := cluster.Admit(newRec, "etcd", "fair", "old-id")
	if errOld == nil || errNew != nil {
		t.Fatalf("after two concurrent migrates: the old record %+v admits a node of home old-id (%v), the new record %+v: %v; "+
			"want only the new one to", *oldRec, errOld, *newRec, errNew)
	}
	if oldRec.ElectionMode != cluster.MovedMode || oldRec.ModeBeforeMove != "fair" {
		t.Fatalf("the marked record %+v; want mode %q (no version joins it), the mode before kept", *oldRec, cluster.MovedMode)
	}
}

// A move refused because a node runs changes nothing: checked before the
// mark; and one refused after its mark (a node started in between) takes
// its own mark back, restoring the record's mode.
func TestRefusedMigrateLeavesTheRecord(t *testing.T) {
	orig := cluster.ClusterRecord{ElectionMode: "unfair", ID: "old-id"}
	old := &memPlace{rec: &orig, ver: 1, zxid: 1000}
	old.members = func() []cluster.Member { return []cluster.Member{{NodeID: "x"}} }
	m := migration{old: old, new: &memPlace{}, mode: "unfair", oldWhere: "zk", newWhere: "etcd"}
	if err := m.run(context.Background(), io.Discard); err == nil {
		t.Fatal("migrate with a member running succeeded")
	}
	if old.ver != 1 {
		t.Fatalf("the old record was written (version %d) by a move refused before its mark", old.ver)
	}
	calls := 0
	old.members = func() []cluster.Member {
		calls++
		if calls == 2 {
			return []cluster.Member{{NodeID: "x"}}
		}
		return nil
	}
	if err := m.run(context.Background(), io.Discard); err == nil {
		t.Fatal("migrate with a member started after the mark succeeded")
	}
	rec, _, _ := old.ClusterRecord(context.Background())
	if rec.MovedTo != "" || rec.ElectionMode != "unfair" || rec.ModeBeforeMove != "" || rec.ID != "old-id" {
		t.Fatalf("the record after a mark taken back: %+v; want it as it was", *rec)
	}
}
