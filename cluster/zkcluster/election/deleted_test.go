package election

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// A term that deleted its own znode and said so (Leadership.Deleted, as
// Term.Finish does) makes the elector leave without a request of its own;
// a term that did not say so is followed by the leave's delete as before.
func TestLeaveSendsNothingAfterTheTermDeletedItsZnode(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		var mu sync.Mutex
		var leaves []string
		hooks := &testHooks{leave: func(_ *zk.Session, node string) bool {
			mu.Lock()
			leaves = append(leaves, node)
			mu.Unlock()
			return false
		}}

		c, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 2 * time.Second}, zk.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		el, err := New(Config{Dir: "/failoverd/test/deleted-" + m.String(), NodeID: "n0", Mode: m, TickTime: zktest.TickTime, testHooks: hooks},
			Deps{Client: c, Logger: testLogger("n0")})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		terms := make(chan string, 4)
		done := make(chan struct{})
		go func() {
			defer close(done)
			n := 0
			el.Run(ctx, func(tctx context.Context, l Leadership) {
				n++
				if n == 1 {
					// The first term deletes its znode itself, as Finish does.
					dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer dcancel()
					if err := l.Session.Delete(dctx, l.Path, -1); err != nil {
						t.Errorf("deleting %s: %v", l.Path, err)
					}
					l.Deleted()
				}
				terms <- l.Path
				if n == 2 {
					<-tctx.Done() // the second one leads until Run ends
				}
			})
		}()
		first := waitPath(t, terms)
		second := waitPath(t, terms)
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		// One leave, the second term's: the first one's znode (in unfair
		// mode the lock, under the same name) went with its own write.
		if len(leaves) != 1 || leaves[0] != second {
			t.Errorf("leaves sent for %v, want only the second term's (%s); the first term (%s) deleted its own and said so", leaves, second, first)
		}
	})
}

func waitPath(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(15 * time.Second):
		t.Fatal("no term within 15s")
		return ""
	}
}

// In unfair mode the lock's name is shared, so the breadcrumb guard (the
// lock exists) does not tell this leader's lock from a successor's: an
// operator's delete of a live leader's lock, right after its win, must end
// the leadership at once (the watch on the lock), not only at the first
// renewal a renew interval later, when the lock another node took at the
// same path has guarded this leader's writes all along.
func TestUnfairLeaderNoticesItsLockDeletedAtTheStartOfItsTerm(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	const renew = 3 * time.Second
	startCandidate(t, r, "a", opts{mode: Unfair, timeout: 8 * time.Second, renew: renew, servers: zks.Addrs()})
	r.waitLeader(t, "", 10*time.Second)
	l := r.leaderOf(t, "a")
	s, closeSess := openSession(t, zks.Addrs(), 8*time.Second)
	defer closeSess()
	deleted := time.Now()
	if err := s.Delete(t.Context(), l.Path, -1); err != nil {
		t.Fatal(err)
	}
	// Another node takes the lock at once, as the next candidate would.
	if _, _, err := s.Create(t.Context(), l.Path, []byte(`{"node_id":"other"}`), zk.Ephemeral); err != nil {
		t.Fatal(err)
	}
	end := r.waitNoLeader(t, 3*renew)
	tm := r.lastTerm()
	t.Logf("leadership ended %v after its lock was deleted: %v", end.Sub(deleted).Round(time.Millisecond), tm.cause)
	if !errors.Is(tm.cause, ErrNodeDeleted) {
		t.Errorf("cause %v, want ErrNodeDeleted", tm.cause)
	}
	if d := end.Sub(deleted); d > renew/2 {
		t.Errorf("leadership ended %v after its lock was deleted under it, want well within the renew interval %v (the watch on the lock)", d, renew)
	}
}

// A fair-mode candidate whose own znode was deleted while it waited (by an
// operator: its session lives on) never leads with it when its
// predecessor goes, though it skips listing the queue then: it would lead
// beside the candidate behind it, which moved up in its place, and its
// term could fence that leader (a fence is no guarded write).
func TestCandidateWhoseZnodeWentDoesNotLeadWithIt(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	const renew = 3 * time.Second
	o := opts{mode: Fair, timeout: 8 * time.Second, renew: renew, servers: zks.Addrs()}
	a := startCandidate(t, r, "a", o)
	r.waitLeader(t, "", 10*time.Second)
	b := startCandidate(t, r, "b", o)
	waitQueueLen(t, zks.Addrs(), 2)
	c := startCandidate(t, r, "c", o)
	c.el.Warm(true)
	waitQueueLen(t, zks.Addrs(), 3)
	// b watches a's znode, c b's, and both keep a credit chain that
	// lets them lead at once, without a write of their own.
	time.Sleep(2*renew + time.Second)

	s, closeSess := openSession(t, zks.Addrs(), 8*time.Second)
	defer closeSess()
	const dir = "/failoverd/test/election"
	kids, err := s.Children(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var bNode string
	for _, k := range kids {
		if strings.Contains(k, b.el.guid) {
			bNode = dir + "/" + k
		}
	}
	ok, st, err := s.Exists(t.Context(), bNode)
	if err != nil || !ok {
		t.Fatalf("b's znode %q: %v %v", bNode, ok, err)
	}
	// Both within a few ms, well inside b's renew interval: b's own
	// renewals cannot tell it before a's znode goes.
	if err := s.Delete(t.Context(), bNode, -1); err != nil {
		t.Fatal(err)
	}
	a.leave()
	r.waitLeader(t, "a", 10*time.Second)
	time.Sleep(2 * time.Second) // room for a wrong term to show
	r.mu.Lock()
	for _, tm := range r.terms {
		if tm.id == "b" && tm.epoch == st.Czxid {
			t.Errorf("b led with its deleted znode %s (epoch %d, %s..%s)", bNode, tm.epoch,
				tm.start.Format("15:04:05.000"), tm.end.Format("15:04:05.000"))
		}
	}
	r.mu.Unlock()
	r.check(t)
}
