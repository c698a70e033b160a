package zkcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// entry is a history entry of node id's term epoch.
func entry(id string, epoch int64) cluster.HistoryEntry {
	return cluster.HistoryEntry{At: time.Now().UTC().Truncate(time.Millisecond), NewLeader: id, NewEpoch: epoch, NewHost: "host-" + id,
		Reason: cluster.HistoryHandoff, FenceMethod: cluster.FenceNone, DurationMS: 12}
}

// guardTerm is a term of node id whose guard is an ephemeral znode of a
// session of its own, made by the test: several of them can append at
// once, which the election never allows, to race their writes.
func guardTerm(t *testing.T, zkc *zktest.Cluster, id string, epoch int64) (*wonTerm, *zk.Session) {
	t.Helper()
	s, c := newStore(t, zkc, id, "inst-"+id)
	sess := session(t, c)
	if err := sess.EnsurePath(t.Context(), testLayout.ElectionDir()); err != nil {
		t.Fatal(err)
	}
	p, _, err := sess.Create(t.Context(), testLayout.ElectionDir()+"/guard-"+id, nil, zk.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	return asWon(s.NewTerm(&term{l: election.Leadership{Session: sess, Path: p, Epoch: epoch, NodeID: id}, s: s})), sess
}

// The history of a real term: appended and read back in order, the old
// leader taken from the newest entry, a retried append not doubled, and
// the record bounded to the newest MaxHistory entries, strings cut.
func TestAppendHistory(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	admin, _ := newStore(t, zkc, "", "")
	if h, err := admin.History(ctx); err != nil || h != nil {
		t.Fatalf("History before any append = %v, %v; want nil, nil", h, err)
	}
	s, c := newStore(t, zkc, "a", "inst-a")
	tm := elect(t, s, c, "a")
	first := entry("a", tm.Epoch())
	if _, err := tm.AppendHistory(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := tm.AppendHistory(ctx, first); err != nil { // a retry whose first attempt went through
		t.Fatal(err)
	}
	h, err := admin.History(ctx)
	if err != nil || len(h) != 1 {
		t.Fatalf("History = %+v, %v; want one entry", h, err)
	}
	if h[0].Reason != cluster.HistoryStart || h[0].OldLeader != "" || h[0].NewEpoch != tm.Epoch() || !h[0].At.Equal(first.At) {
		t.Errorf("first entry = %+v, want a start of a@%d", h[0], tm.Epoch())
	}

	// Later terms (guard znodes of their own): a handoff names the newest
	// entry's leader; MaxHistory+5 appends keep the newest MaxHistory.
	g, _ := guardTerm(t, zkc, "b", 0)
	long := strings.Repeat("é", 1000)
	for i := range cluster.MaxHistory + 5 {
		e := entry("b", tm.Epoch()+int64(i)+1)
		e.RequestedBy = long
		if _, err := g.AppendHistory(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	h, err = admin.History(ctx)
	if err != nil || len(h) != cluster.MaxHistory {
		t.Fatalf("History after %d more appends: %d entries, %v; want %d", cluster.MaxHistory+5, len(h), err, cluster.MaxHistory)
	}
	if got, want := h[0].NewEpoch, tm.Epoch()+6; got != want {
		t.Errorf("oldest entry kept has epoch %d, want %d (the newest %d)", got, want, cluster.MaxHistory)
	}
	for i := 1; i < len(h); i++ {
		if h[i].OldLeader != "b" || h[i].OldEpoch != h[i-1].NewEpoch || h[i].Reason != cluster.HistoryHandoff {
			t.Fatalf("entry %d = %+v, want a handoff from b@%d", i, h[i], h[i-1].NewEpoch)
		}
	}
	if n := len(h[0].RequestedBy); n > 128 || n == 0 || !strings.HasPrefix(long, h[0].RequestedBy) {
		t.Errorf("a long string is kept as %d bytes %q, want a prefix of at most 128", n, h[0].RequestedBy)
	}
	data, _, err := session(t, admin.client).Get(ctx, testLayout.History())
	if err != nil || len(data) > 100<<10 {
		t.Errorf("history record: %d bytes, %v; want at most 100 KB", len(data), err)
	}
}

// A term that is over appends nothing: its election znode deleted (by an
// operator), or its session expired.
func TestAppendHistoryGuarded(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	admin, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)

	s, c := newStore(t, zkc, "a", "inst-a")
	tm := elect(t, s, c, "a")
	if err := adm.Delete(ctx, tm.l.Path, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := tm.AppendHistory(ctx, entry("a", tm.Epoch())); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("append of a term whose znode is gone = %v, want ErrNoNode", err)
	}

	g, gs := guardTerm(t, zkc, "b", 99)
	if err := zktest.Expire(zkc.Servers[0].Addr(), gs.ID(), gs.Password()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gs.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not notice its session expired")
	}
	if _, err := g.AppendHistory(ctx, entry("b", 99)); err == nil {
		t.Error("append on an expired session succeeded")
	}
	if h, err := admin.History(ctx); err != nil || h != nil {
		t.Errorf("History = %+v, %v; want none", h, err)
	}
}

// A change of the history between an append's read and its write (an
// operator's, or another writer's) fails the write on its version; the
// append reads again and adds its entry after that change, for a record
// that did not exist yet (create) as for one that did (set).
func TestAppendHistoryVersionConflictRetried(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	admin, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	g, _ := guardTerm(t, zkc, "a", 0)
	other := func(epoch int64) {
		data, st, err := adm.Get(ctx, testLayout.History())
		version := st.Version
		if errors.Is(err, zk.ErrNoNode) {
			data, version = nil, -1
		} else if err != nil {
			t.Fatal(err)
		}
		h, _ := cluster.DecodeHistory(data)
		h, _, _ = cluster.AppendHistory(h, entry("x", epoch))
		b, _ := json.Marshal(h)
		if version < 0 {
			_, _, err = adm.Create(ctx, testLayout.History(), b, zk.Persistent)
		} else {
			_, err = adm.Set(ctx, testLayout.History(), b, version)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, epoch := range []int64{10, 20} { // the first creates the record, the second sets it
		interfered := 0
		g.s.BeforeHistoryWrite = func() {
			if interfered < 2 {
				interfered++
				other(epoch + int64(interfered))
			}
		}
		if _, err := g.AppendHistory(ctx, entry("a", epoch+5)); err != nil {
			t.Fatalf("round %d: append after two conflicting changes: %v", i, err)
		}
	}
	h, err := admin.History(ctx)
	var got []string
	for _, e := range h {
		got = append(got, fmt.Sprintf("%s@%d", e.NewLeader, e.NewEpoch))
	}
	if want := "x@11 x@12 a@15 x@21 x@22 a@25"; err != nil || strings.Join(got, " ") != want {
		t.Errorf("History = %v, %v; want %s", got, err, want)
	}
}

// Writers racing on the history lose no entry: a version conflict reads
// the record again and appends to what is there now.
func TestAppendHistoryConcurrent(t *testing.T) {
	zkc := zktest.Start(t, 1)
	admin, _ := newStore(t, zkc, "", "")
	const writers, each = 3, 3 // a writer loses a round only to another's append: at most 6 in a row, fewer than historyAttempts
	var wg sync.WaitGroup
	for w := range writers {
		g, _ := guardTerm(t, zkc, fmt.Sprintf("n%d", w), 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := g.AppendHistory(context.Background(), entry(g.l.NodeID, int64(100*w+i+1))); err != nil {
					t.Errorf("writer %d, append %d: %v", w, i, err)
				}
			}
		}()
	}
	wg.Wait()
	h, err := admin.History(t.Context())
	if err != nil || len(h) != writers*each {
		t.Fatalf("History = %d entries, %v; want %d", len(h), err, writers*each)
	}
	last := map[string]int64{}
	for _, e := range h {
		if e.NewEpoch <= last[e.NewLeader] {
			t.Errorf("%s's entries out of order: %d after %d", e.NewLeader, e.NewEpoch, last[e.NewLeader])
		}
		last[e.NewLeader] = e.NewEpoch
	}
}

// A corrupt history (not JSON, or larger than failoverd writes) is
// reported to readers and replaced by the next append, which must not
// fail over it.
func TestAppendHistoryCorrupt(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	admin, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	if err := adm.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	g, _ := guardTerm(t, zkc, "a", 0)
	for i, data := range [][]byte{
		[]byte("not json"),
		[]byte(`{"an":"object"}`),
		[]byte("[" + strings.Repeat(" ", cluster.MaxHistoryBytes) + "]"),
	} {
		_ = adm.Delete(ctx, testLayout.History(), -1)
		if _, _, err := adm.Create(ctx, testLayout.History(), data, zk.Persistent); err != nil {
			t.Fatal(err)
		}
		var ce *cluster.HistoryCorruptError
		if _, err := admin.History(ctx); !errors.As(err, &ce) || ce.Size != len(data) {
			t.Errorf("case %d: History = %v, want a HistoryCorruptError of %d bytes", i, err, len(data))
		}
		if _, err := g.AppendHistory(ctx, entry("a", int64(i+1))); err != nil {
			t.Fatalf("case %d: append over a corrupt history: %v", i, err)
		}
		h, err := admin.History(ctx)
		if err != nil || len(h) != 1 || h[0].NewEpoch != int64(i+1) || h[0].Reason != cluster.HistoryStart {
			t.Errorf("case %d: History after the append = %+v, %v; want a fresh list of the new entry", i, h, err)
		}
	}
}
