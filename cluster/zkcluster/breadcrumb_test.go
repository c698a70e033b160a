package zkcluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// The breadcrumb as a term writes it (one multi: a check of the term's
// election znode and a compare-and-set of the breadcrumb's znode) and as
// the Store and a term read it.

func bcRec(id string, epoch int64) breadcrumb.Record {
	return breadcrumb.Record{NodeID: id, Host: "127.0.0.1", AdminURL: "http://127.0.0.1:9101", Epoch: epoch, Since: time.Now().UTC().Truncate(time.Second)}
}

// A term writes the breadcrumb; the Store and the term read it back at the
// revision the write returned; Assess judges it; the term's Finish deletes
// it with the term's election znode.
func TestWriteReadAssess(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	admin, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)

	r, _, err := admin.ReadBreadcrumb(ctx)
	if !errors.Is(err, breadcrumb.ErrAbsent) || breadcrumb.Assess(r, err, "a", 5) != breadcrumb.NothingToFence {
		t.Fatalf("absent: ReadBreadcrumb = %v, %v", r, err)
	}
	tm, _ := guardTerm(t, zkc, "a", 5)
	_, rev, err := tm.ReadBreadcrumb(ctx)
	if !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("absent: the term's ReadBreadcrumb = %v", err)
	}
	wrote, err := tm.WriteBreadcrumb(ctx, bcRec("a", 5), rev)
	if err != nil {
		t.Fatal(err)
	}
	got, rev, err := admin.ReadBreadcrumb(ctx)
	if err != nil || got.NodeID != "a" || got.Epoch != 5 || got.Version != breadcrumb.Version {
		t.Fatalf("ReadBreadcrumb = %+v, %v", got, err)
	}
	if rev != wrote {
		t.Errorf("ReadBreadcrumb at %v, the write returned %v", rev, wrote)
	}
	for _, tc := range []struct {
		self  string
		epoch int64
		want  breadcrumb.Verdict
	}{
		{"a", 5, breadcrumb.NothingToFence},
		{"a", 9, breadcrumb.MustFence}, // an older incarnation of us
		{"b", 9, breadcrumb.MustFence},
	} {
		if got := breadcrumb.Assess(got, nil, tc.self, tc.epoch); got != tc.want {
			t.Errorf("Assess(self=%s, epoch=%d) = %v, want %v", tc.self, tc.epoch, got, tc.want)
		}
	}
	if err := tm.Finish(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after Finish: %v", err)
	}
	if ok, _, err := adm.Exists(ctx, tm.l.Path); err != nil || ok {
		t.Errorf("the term's election znode after Finish: exists %v, %v", ok, err)
	}
}

// A breadcrumb that cannot be decoded is a *CorruptError, read outside a
// term as in one, which Assess refuses; the operator's clear at the
// revision read removes it.
func TestCorruptBreadcrumbIsRefused(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	admin, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	if err := adm.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	tm, _ := guardTerm(t, zkc, "b", 7)
	path := testLayout.Breadcrumb()
	for _, data := range []string{"", "garbage", `{"version":2,"node_id":"a","epoch":1}`, `{"version":1,"node_id":"","epoch":1}`,
		// A node id no hook or fencer can be started with.
		`{"version":1,"node_id":"a\u0000b","host":"127.0.0.1","epoch":1}`} {
		adm.Delete(ctx, path, -1)
		if _, _, err := adm.Create(ctx, path, []byte(data), zk.Persistent); err != nil {
			t.Fatal(err)
		}
		for _, rd := range []struct {
			who  string
			read func(context.Context) (breadcrumb.Record, cluster.Revision, error)
		}{{"Store", admin.ReadBreadcrumb}, {"term", tm.ReadBreadcrumb}} {
			r, _, err := rd.read(ctx)
			var ce *breadcrumb.CorruptError
			if !errors.As(err, &ce) {
				t.Errorf("the %s's ReadBreadcrumb of %q: error = %v, want *CorruptError", rd.who, data, err)
			}
			if v := breadcrumb.Assess(r, err, "b", 7); v != breadcrumb.Refuse {
				t.Errorf("Assess after the %s's read of %q = %v, want refuse", rd.who, data, v)
			}
		}
	}
	_, rev, _ := admin.ReadBreadcrumb(ctx)
	if err := admin.ClearBreadcrumb(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after ClearBreadcrumb: %v", err)
	}
}

// A term whose session expired neither rewrites nor deletes (Finish) the
// breadcrumb, and a term naming its election znode on a brand-new session
// finds the znode gone.
func TestExpiredLeaderCannotWriteOrDelete(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	old, sess := guardTerm(t, zkc, "a", 5)
	rev, err := old.WriteBreadcrumb(ctx, bcRec("a", 5), cluster.Revision{})
	if err != nil {
		t.Fatal(err)
	}
	if err := zktest.Expire(zkc.Servers[0].Addr(), sess.ID(), sess.Password()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session not expired")
	}
	if _, err := old.WriteBreadcrumb(ctx, bcRec("a", 5), rev); err == nil {
		t.Error("expired leader overwrote the breadcrumb")
	}
	if err := old.Finish(ctx, rev); err == nil {
		t.Error("expired leader deleted the breadcrumb")
	}
	// Even through a brand-new session, the old election znode is gone, so
	// a term guarded by it fails.
	s, c := newStore(t, zkc, "a", "inst-a-again")
	fresh := session(t, c)
	stale := s.NewTerm(&term{l: election.Leadership{Session: fresh, Path: old.l.Path, Epoch: 5, NodeID: "a"}, s: s})
	if _, err := stale.WriteBreadcrumb(ctx, bcRec("a", 5), rev); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("write guarded by a vanished znode = %v, want ErrNoNode", err)
	}
	if err := stale.Finish(ctx, rev); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("Finish of a term whose znode vanished = %v, want ErrNoNode", err)
	}
	r, _, err := s.ReadBreadcrumb(ctx)
	if err != nil || r.NodeID != "a" {
		t.Errorf("breadcrumb changed: %+v %v", r, err)
	}
}

// Terms racing to write the breadcrumb from the same revision (several
// guards live at once, which the election never allows): exactly one
// write goes through, the others conflict.
func TestConcurrentWritersResolveByCAS(t *testing.T) {
	zkc := zktest.Start(t, 1)
	admin, _ := newStore(t, zkc, "", "")
	for round := 0; round < 5; round++ {
		var tms []*wonTerm
		for i := range 4 {
			tm, _ := guardTerm(t, zkc, fmt.Sprintf("r%d-%c", round, 'a'+i), int64(round*10+i+1))
			tms = append(tms, tm)
		}
		_, rev, err := tms[0].ReadBreadcrumb(t.Context())
		if err != nil && !errors.Is(err, breadcrumb.ErrAbsent) {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []int
		for i, tm := range tms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := tm.WriteBreadcrumb(context.Background(), bcRec(tm.l.NodeID, tm.Epoch()), rev)
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, i)
					mu.Unlock()
				case errors.Is(err, cluster.ErrConflict) && (errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists)):
				default:
					t.Errorf("writer %d: unexpected error %v", i, err)
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d writers succeeded from the same revision, want exactly 1", round, len(won))
		}
		w := tms[won[0]]
		if r, _, err := admin.ReadBreadcrumb(t.Context()); err != nil || r.NodeID != w.l.NodeID || r.Epoch != w.Epoch() {
			t.Fatalf("round %d: breadcrumb %+v, %v; want the winner's, %s@%d", round, r, err, w.l.NodeID, w.Epoch())
		}
	}
}
