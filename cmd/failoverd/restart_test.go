package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// campaignAs runs el's candidacy until the test ends and reports each term
// won on the returned channel (the term is held until the test ends).
func campaignAs(t *testing.T, el cluster.Elector) <-chan cluster.Term {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wins := make(chan cluster.Term, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		el.Campaign(ctx, func(tctx context.Context, tm cluster.Term) {
			wins <- tm
			<-tctx.Done()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return wins
}

func waitTerm(t *testing.T, wins <-chan cluster.Term, within time.Duration, who string) cluster.Term {
	t.Helper()
	select {
	case tm := <-wins:
		return tm
	case <-time.After(within):
		t.Fatalf("%s did not win within %v", who, within)
		return nil
	}
}

// A term won is recorded in the node state file before the controller
// sees it; a later process of the node removes that entry at its first
// candidacy, so the standby wins at once, but only once the earlier
// process's lock is gone: while it is held (another live process of the
// node) nothing is removed.
func TestRestartRemovesOwnPreviousEntry(t *testing.T) {
	w := controllertest.New()
	path := filepath.Join(t.TempDir(), "c", "a.json")
	logger := slog.New(slog.DiscardHandler)
	openA := func() *homeFile {
		st, _, err := readHome(path)
		if err != nil {
			t.Fatal(err)
		}
		st.Cluster, st.NodeID = "c", "a"
		return &homeFile{path: path, st: st}
	}
	h1 := openA()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeFileSync(path, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r1, _ := newRestarter(h1, w.Node("a"), "first", logger)
	wa := campaignAs(t, withRestarter(w.Node("a"), r1))
	ta := waitTerm(t, wa, 5*time.Second, "a")
	want, _ := cluster.EntryOf(ta)
	if got, ok := openA().Entry(); !ok || got != want {
		t.Fatalf("the state file records %v (%v); want %v", got, ok, want)
	}
	wb := campaignAs(t, w.Node("b"))
	for len(w.Queue()) < 2 {
		time.Sleep(time.Millisecond)
	}

	// The first process still holds the lock: a second one removes nothing.
	r2, _ := newRestarter(openA(), w.Node("a-live"), "second", logger)
	campaignAs(t, withRestarter(w.Node("a-live"), r2))
	for len(w.Queue()) < 3 {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-wb:
		t.Fatal("b won while the first process of a was alive (its lock held)")
	case <-time.After(300 * time.Millisecond):
	}
	if w.Leader() != "a" {
		t.Fatalf("leader %q; want a still", w.Leader())
	}

	// The first process exits (its lock goes): the next one removes its entry.
	h1.lockFile.Close()
	start := time.Now()
	r3, prev := newRestarter(openA(), w.Node("a-restarted"), "third", logger)
	campaignAs(t, withRestarter(w.Node("a-restarted"), r3))
	if prev != "first" {
		t.Errorf("the restarted process names %q as its previous one; want first", prev)
	}
	var tb cluster.Term
	select {
	case tb = <-wb:
	case <-time.After(2 * time.Second):
		t.Fatalf("b did not win within 2s of the restart; queue %v", w.Queue())
	}
	if tb.Epoch() <= ta.Epoch() {
		t.Errorf("b won at %d, not above %d", tb.Epoch(), ta.Epoch())
	}
	t.Logf("b won %v after the restart", time.Since(start))
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := openA().Entry(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the removed entry is still recorded")
		}
	}
}
