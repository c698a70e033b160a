package zkcluster

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// A breadcrumb deleted and written again between the watcher's data read
// (no node) and its exists read (there again), as at an unfair-mode
// handoff where the leaver's Finish deletes it and the next winner creates
// its own at once: the exists watch then stands for the breadcrumb, and
// its read must be fresh. The value cached when the breadcrumb's data
// watch was armed used to outlive that watch and was returned instead: the
// leader view kept naming the old record, so the new leader was never
// delivered (no follow hook towards it) until the breadcrumb changed
// again. (A member record read in the same pass hides it: the breadcrumb
// is then read afresh, see TestLeaderViewReadsTheBreadcrumbAfterTheMembers;
// so here no member record changes with it.) Found by an independent
// review.
func TestBreadcrumbRecreatedBetweenReadsIsReadFresh(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	bcPath := testLayout.Breadcrumb()
	var armed atomic.Bool
	recreated := make(chan error, 1)
	proxy := zktest.NewFrameProxy(t, zkc.Servers[0].Addr(), func(f *zktest.Frame) zktest.Action {
		if f.Op() != opExists || !armed.Load() || len(f.Body) <= 12 {
			return zktest.Forward
		}
		n := int(binary.BigEndian.Uint32(f.Body[8:]))
		if 12+n > len(f.Body) || string(f.Body[12:12+n]) != bcPath {
			return zktest.Forward
		}
		// The watcher found no breadcrumb and now asks whether one
		// exists: b's is created before the question reaches the server.
		armed.Store(false)
		b, err := breadcrumb.Encode(breadcrumb.Record{NodeID: "b", Host: "host-b", Epoch: 2, Since: time.Now().UTC()})
		if err == nil {
			_, _, err = adm.Create(ctx, bcPath, b, zk.Persistent)
		}
		recreated <- err
		return zktest.Forward
	})
	wc, err := zk.NewClient(zk.Config{Servers: []string{proxy.Addr()}, SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wc.Close)
	ws, err := New(Config{Layout: testLayout}, Deps{Client: wc})
	if err != nil {
		t.Fatal(err)
	}
	a, ac1 := newStore(t, zkc, "a", "inst-a")
	b, _ := newStore(t, zkc, "b", "inst-b")
	if err := a.PublishMember(ctx, leaderMember("a", "inst-a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishMember(ctx, member("b", "inst-b", "standby")); err != nil {
		t.Fatal(err)
	}
	putBreadcrumb(t, ac1, "a", 1)

	w := watchLeader(t, ctx, ws)
	wantLeader(t, w.next(0, "a"), "a", 1)
	if err := a.PublishMember(ctx, member("a", "inst-a", "standby")); err != nil {
		t.Fatal(err)
	}
	wantNone(t, w.next(1, "a demoted"), "a demoted")
	// b's record says leader before its breadcrumb is there (as a named
	// successor's never does; here so that no member read follows the
	// breadcrumb's change and reads it afresh along).
	if err := b.PublishMember(ctx, leaderMember("b", "inst-b", 2)); err != nil {
		t.Fatal(err)
	}
	w.quiet(2, time.Second, "the breadcrumb still names a")
	// a's breadcrumb changes (its watch is armed again, and its value
	// cached, in a pass that reads no member record).
	putBreadcrumb(t, ac1, "a", 1)
	w.quiet(2, time.Second, "a's breadcrumb rewritten")

	// a's Finish deletes the breadcrumb; b's is there by the watcher's
	// exists read.
	armed.Store(true)
	deleteBreadcrumb(t, ac1)
	select {
	case err := <-recreated:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watcher never asked whether the breadcrumb exists")
	}
	wantLeader(t, w.next(2, "b's breadcrumb"), "b", 2)
}

// The leader view reads the member records before the breadcrumb, so that
// a leader whose successor already wrote its breadcrumb (and so had fenced
// it) is never named. A breadcrumb served from the cache is as old as the
// read that armed its watch: with a member record read afresh after it,
// the order was reversed, and x, promoted and then fenced by s, was
// delivered as the leader (its follow hook pointed at a fenced node)
// although the breadcrumb named s before x's record was read. Found by an
// independent review.
func TestLeaderViewReadsTheBreadcrumbAfterTheMembers(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	memberPath := testLayout.Member("x")
	var armed atomic.Bool
	written := make(chan error, 1)
	proxy := zktest.NewFrameProxy(t, zkc.Servers[0].Addr(), func(f *zktest.Frame) zktest.Action {
		if f.Op() != opGetData || !armed.Load() || len(f.Body) <= 12 {
			return zktest.Forward
		}
		n := int(binary.BigEndian.Uint32(f.Body[8:]))
		if 12+n > len(f.Body) || string(f.Body[12:12+n]) != memberPath {
			return zktest.Forward
		}
		// The watcher reads x's record: s has fenced x and written its
		// breadcrumb before the read reaches the server.
		armed.Store(false)
		b, err := breadcrumb.Encode(breadcrumb.Record{NodeID: "s", Host: "host-s", Epoch: 2, Since: time.Now().UTC()})
		if err == nil {
			_, err = adm.Set(ctx, testLayout.Breadcrumb(), b, -1)
		}
		written <- err
		return zktest.Forward
	})
	wc, err := zk.NewClient(zk.Config{Servers: []string{proxy.Addr()}, SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wc.Close)
	ws, err := New(Config{Layout: testLayout}, Deps{Client: wc})
	if err != nil {
		t.Fatal(err)
	}
	x, xc := newStore(t, zkc, "x", "inst-x")
	if err := x.PublishMember(ctx, member("x", "inst-x", "fencing")); err != nil {
		t.Fatal(err)
	}
	putBreadcrumb(t, xc, "x", 1)
	w := watchLeader(t, ctx, ws)
	wantNone(t, w.next(0, "x fencing"), "x fencing")

	armed.Store(true)
	if err := x.PublishMember(ctx, leaderMember("x", "inst-x", 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watcher never read x's record again")
	}
	w.quiet(1, 2*time.Second, "the breadcrumb named s when x's record was read")
}
