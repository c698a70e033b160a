package election

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// testDir is the election directory of every test candidate.
const testDir = "/failoverd/test/election"

// The cause the caller cancels Run's context with is the cause of the
// term's context: a controller tells why it left without a side channel.
func TestTermCauseIsRunCause(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		c, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 2 * time.Second}, zk.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		el, err := New(Config{Dir: testDir, NodeID: "a", Mode: m}, Deps{Client: c, Logger: testLogger("a")})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			el.Run(ctx, r.callback("a"))
		}()
		r.waitLeader(t, "", 10*time.Second)
		why := errors.New("test: the service became unhealthy")
		cancel(why)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context was cancelled")
		}
		if got := r.lastTerm().cause; got != why {
			t.Errorf("term cause %v, want the Run context's cause %v", got, why)
		}
		if q := queue(t, zks.Addrs()); len(q) != 0 {
			t.Errorf("znodes left after Run returned: %v", q)
		}
	})
}

// A candidate whose Run context is cancelled while its create is in
// flight (held back by a proxy), or at any point shortly after, leaves no
// znode of its live session behind, and another candidate wins. (An
// abandoned create lands anyway: in unfair mode the lock would block
// everybody until the session ended, in fair mode the head of the queue
// would never lead.)
func TestCancelledCampaignLeavesNoZnode(t *testing.T) {
	zks := zktest.Start(t, 1)
	const hold = 300 * time.Millisecond // how long the proxy holds a create, then its Exists
	offsets := []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond,
		320 * time.Millisecond, 450 * time.Millisecond, 650 * time.Millisecond, 900 * time.Millisecond}
	modes(t, func(t *testing.T, m Mode) {
		for _, off := range offsets {
			t.Run(fmt.Sprintf("cancel %v after the create was sent", off), func(t *testing.T) {
				cancelledCampaign(t, zks, m, hold, off)
			})
		}
	})
}

func cancelledCampaign(t *testing.T, zks *zktest.Cluster, m Mode, hold, off time.Duration) {
	child := []byte(testDir + "/")
	var armed, exists atomic.Bool
	armed.Store(true)
	sent := make(chan struct{})
	proxy := zktest.NewFrameProxy(t, zks.Servers[0].Addr(), func(f *zktest.Frame) zktest.Action {
		switch {
		case f.Dir != zktest.ToServer || !bytes.Contains(f.Body, child):
		case f.Op() == 1 && armed.CompareAndSwap(true, false): // create
			close(sent)
			exists.Store(true)
			time.Sleep(hold)
		case f.Op() == 3 && exists.CompareAndSwap(true, false): // the Exists after it
			time.Sleep(hold)
		}
		return zktest.Forward
	})
	r := newReferee()
	c := startCandidate(t, r, "c", opts{mode: m, timeout: 20 * time.Second, servers: []string{proxy.Addr()}})
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the candidate sent no create")
	}
	time.Sleep(off)
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	sess := c.client.Current()
	if sess == nil {
		t.Fatal("the candidate's session is gone; the test needs it alive")
	}
	time.Sleep(2*hold + 200*time.Millisecond) // anything held back has landed
	checkNoZnodeOf(t, zks.Addrs(), sess.ID())

	b := startCandidate(t, r, "b", opts{mode: m, timeout: 2 * time.Second, servers: zks.Addrs()})
	if l := r.waitLeader(t, "c", 5*time.Second); l != "b" {
		t.Fatalf("leader %s, want b", l)
	}
	b.stop()
	checkNoZnodeOf(t, zks.Addrs(), sess.ID())
	r.check(t)
}

// checkNoZnodeOf fails the test when a znode of session id is in the
// election directory.
func checkNoZnodeOf(t *testing.T, servers []string, id int64) {
	t.Helper()
	s, closeSess := openSession(t, servers, 2*time.Second)
	defer closeSess()
	kids, err := s.Children(t.Context(), testDir)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	for _, k := range kids {
		ok, st, err := s.Exists(t.Context(), testDir+"/"+k)
		if err != nil {
			t.Fatal(err)
		}
		if ok && st.EphemeralOwner == id {
			t.Errorf("znode %s of the cancelled candidate's live session 0x%x is still there", k, id)
		}
	}
}

// Unfair mode: a term may delete its lock itself (Term.Finish deletes it in
// one multi with the breadcrumb) and a successor take the name at once;
// the elector's leave after the term must not delete the successor's lock.
func TestUnfairLeaveKeepsASuccessorsLock(t *testing.T) {
	zks := zktest.Start(t, 1)
	c, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 2 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	el, err := New(Config{Dir: testDir, NodeID: "a", Mode: Unfair}, Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ours, err := c.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	other, closeOther := openSession(t, zks.Addrs(), 2*time.Second)
	defer closeOther()
	lock := testDir + "/" + lockName
	if err := ours.EnsurePath(t.Context(), testDir); err != nil {
		t.Fatal(err)
	}
	_, st, err := ours.Create(t.Context(), lock, el.data(""), zk.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	if err := ours.Delete(t.Context(), lock, -1); err != nil { // the term's own delete
		t.Fatal(err)
	}
	if _, _, err := other.Create(t.Context(), lock, nil, zk.Ephemeral); err != nil { // the successor
		t.Fatal(err)
	}
	el.leave(ours, lock, st.Czxid)
	ok, now, err := other.Exists(t.Context(), lock)
	if err != nil {
		t.Fatal(err)
	}
	if !ok || now.EphemeralOwner != other.ID() {
		t.Fatalf("the successor's lock went with our leave (exists %v, owner 0x%x)", ok, now.EphemeralOwner)
	}
	// Our own lock still goes.
	if err := other.Delete(t.Context(), lock, -1); err != nil {
		t.Fatal(err)
	}
	if _, st, err = ours.Create(t.Context(), lock, el.data(""), zk.Ephemeral); err != nil {
		t.Fatal(err)
	}
	el.leave(ours, lock, st.Czxid)
	if ok, _, _ := other.Exists(t.Context(), lock); ok {
		t.Error("our own lock survived our leave")
	}
}
