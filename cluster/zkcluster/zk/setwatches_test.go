package zk_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// After a reconnect, go-zookeeper re-registers the watches with SetWatches,
// which carries the newest zxid the client had seen: the server fires every
// watch whose znode changed after it. A reply on the new connection that
// arrives before SetWatches is built (a re-sent AddAuth, a request queued
// while disconnected) must not advance that zxid, or the server reports no
// data or child change made while the client was away: the watches stay
// set on stale reads and fire only at the next change. The copy in
// third_party/go-zookeeper reads the zxid before the new connection's loops
// start; a hook in it holds SetWatches back until a request was answered on
// the new connection, so the order that loses the events happens every time.
func TestWatchesFireForChangesMadeWhileDisconnected(t *testing.T) {
	zks := zktest.Start(t, 1)
	p := netproxy.New(t, func() string { return zks.Servers[0].Addr() })

	var armed atomic.Bool
	reached := make(chan struct{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	hook := func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		close(reached)
		<-release
	}
	conn, _, err := gozk.Connect([]string{p.Addr()}, 4*time.Second,
		gozk.WithLogger(quiet{}), gozk.WithBeforeSetWatches(hook))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	t.Cleanup(unblock) // runs first: Close must not wait for the hook

	other := newClient(t, zks.Addrs(), 4*time.Second)
	ctx := t.Context()
	o, err := other.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := o.Create(ctx, "/w", []byte("0"), zk.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, _, err := o.Create(ctx, "/elsewhere", nil, zk.Persistent); err != nil {
		t.Fatal(err)
	}

	_, _, dataW, err := conn.GetW("/w")
	if err != nil {
		t.Fatal(err)
	}
	_, _, existW, err := conn.ExistsW("/w")
	if err != nil {
		t.Fatal(err)
	}
	_, _, childW, err := conn.ChildrenW("/w")
	if err != nil {
		t.Fatal(err)
	}

	// Cut the connection and keep the client away (its reconnect reaches
	// the proxy, which holds its bytes) while the other client changes /w's
	// data and its list of children.
	armed.Store(true)
	p.Blackhole(true)
	p.Reset()
	if _, err := o.Set(ctx, "/w", []byte("1"), -1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := o.Create(ctx, "/w/kid", nil, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(false)

	// The client has reconnected (same session) and not re-registered its
	// watches yet. A read on the new connection is answered now; its reply
	// carries the server's zxid, past both changes.
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		t.Fatal("the client did not reconnect")
	}
	if _, _, err := conn.Exists("/elsewhere"); err != nil {
		t.Fatalf("read on the new connection: %v", err)
	}
	unblock()

	// SetWatches goes out now; every watch must report the change it missed.
	end := time.Now().Add(10 * time.Second)
	for _, w := range []struct {
		name string
		ch   <-chan gozk.Event
		want gozk.EventType
	}{
		{"GetW", dataW, gozk.EventNodeDataChanged},
		{"ExistsW", existW, gozk.EventNodeDataChanged},
		{"ChildrenW", childW, gozk.EventNodeChildrenChanged},
	} {
		select {
		case ev := <-w.ch:
			if ev.Type != w.want || ev.Path != "/w" {
				t.Errorf("%s watch: event %+v, want %v on /w", w.name, ev, w.want)
			}
		case <-time.After(time.Until(end)):
			t.Errorf("%s watch on /w did not fire for the change made while disconnected", w.name)
		}
	}
}
