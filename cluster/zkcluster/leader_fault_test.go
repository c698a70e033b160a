package zkcluster

import (
	"context"
	"encoding/binary"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// A connection lost while the leader's member record is read is not "no
// leader": members() used to skip a record whose Get failed for any reason,
// not only NoNode, and with the breadcrumb read succeeding after the
// reconnect WatchLeader delivered "no leader" although the leader never
// changed (its data watch stayed marked armed, so the false answer stood
// until some other watch fired). Found by an independent review.
func TestLostConnectionDuringLeaderReadIsNotNoLeader(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var armed atomic.Bool
	proxy := zktest.NewFrameProxy(t, zkc.Servers[0].Addr(), func(f *zktest.Frame) zktest.Action {
		if f.Op() == opGetData && armed.Load() && len(f.Body) > 12 {
			n := int(binary.BigEndian.Uint32(f.Body[8:]))
			if 12+n <= len(f.Body) && strings.HasSuffix(string(f.Body[12:12+n]), "/members/a") {
				armed.Store(false)
				return zktest.Drop
			}
		}
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
	a, ac := newStore(t, zkc, "a", "inst-a")
	b, _ := newStore(t, zkc, "b", "inst-b")
	if err := a.PublishMember(ctx, leaderMember("a", "inst-a", 1)); err != nil {
		t.Fatal(err)
	}
	putBreadcrumb(t, ac, "a", 1)

	w := watchLeader(t, ctx, ws)
	wantLeader(t, w.next(0, "a"), "a", 1)

	// b's record appears (the children watch fires): the watcher reads
	// again, and its connection is lost on a's record.
	armed.Store(true)
	if err := b.PublishMember(ctx, member("b", "inst-b", "standby")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	w.mu.Lock()
	got := append(w.got[:0:0], w.got...)
	w.mu.Unlock()
	if len(got) > 1 {
		time.Sleep(5 * time.Second)
		w.mu.Lock()
		last := w.got[len(w.got)-1]
		w.mu.Unlock()
		t.Fatalf("a connection lost during a re-read, the leader unchanged: WatchLeader delivered %+v after a; 8s later the last delivery is still %+v", got[1:], last)
	}
}

// Fresh answers only while the client's server is in touch with the
// quorum: a follower cut off from its leader keeps its clients connected
// and serves them old reads (here for syncLimit 60 x 200 ms = 12 s, three
// session timeouts), but cannot answer a sync. The daemon's leader view
// (GET /v1/leader) refuses to answer when no sync was answered for a
// session timeout; before, it looked only at the connection, and named an
// old leader for as long as the follower kept serving (found by an
// independent review).
func TestFreshFailsOnACutOffFollower(t *testing.T) {
	zkc := zktest.StartOpts(t, zktest.Options{Servers: 3, ProxyQuorum: true, SyncLimit: 60})
	f := (zkc.Leader() + 1) % 3
	c, err := zk.NewClient(zk.Config{Servers: []string{zkc.Servers[f].Addr()}, SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := New(Config{Layout: testLayout}, Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	fresh := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		return s.Fresh(ctx)
	}
	if err := fresh(10 * time.Second); err != nil {
		t.Fatalf("connected follower in its quorum: %v", err)
	}
	zkc.Isolate(f)
	healed := false
	defer func() {
		if !healed {
			zkc.Heal(f)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	if err := fresh(2 * time.Second); err == nil {
		t.Fatalf("a follower cut off from its quorum answered a sync (connected: %v)", s.Connected())
	}
	if !s.Connected() {
		t.Logf("note: the client lost its connection too (the follower gave up early)")
	}
	zkc.Heal(f)
	healed = true
	deadline := time.Now().Add(30 * time.Second)
	for fresh(2*time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no sync answered 30s after the follower was healed")
		}
	}
}
