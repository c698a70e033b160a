package zk_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// TestReconnectWithWatchesUnderRace reconnects a session again and again
// while watches are registered and requests are in flight. Under -race it
// caught go-zookeeper v1.0.4 reading Conn.lastZxid on reconnect (to re-send
// the watches) while the new connection's receive loop wrote it; the copy in
// third_party/go-zookeeper fixes that. It also checks that watches survive
// the reconnects.
func TestReconnectWithWatchesUnderRace(t *testing.T) {
	zks := zktest.Start(t, 1)
	p := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
	// Every write is slowed down, so that on reconnect the replies to the
	// first queued requests come back while go-zookeeper still works through
	// its send queue towards the re-sent watches.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return slowWrites{c}, nil
	}
	c, err := zk.NewClient(zk.Config{Servers: []string{p.Addr()}, SessionTimeout: 6 * time.Second}, zk.Deps{Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := t.Context()
	s, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsurePath(ctx, "/race"); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var watches []<-chan zk.Event
	for i := range n {
		path := fmt.Sprintf("/race/n%d", i)
		if _, _, err := s.Create(ctx, path, nil, zk.Persistent); err != nil {
			t.Fatal(err)
		}
		_, _, ch, err := s.ExistsW(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, ch)
	}
	_, kids, err := s.ChildrenW(ctx, "/race")
	if err != nil {
		t.Fatal(err)
	}

	// Requests in flight all the time, from more goroutines than
	// go-zookeeper's send queue holds: on reconnect, replies to queued
	// requests arrive while the re-sent watches still wait in the queue.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 40 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if w%4 == 0 { // writes on a znode nobody watches
					s.Set(ctx, "/race", []byte{byte(i)}, -1)
				} else {
					s.Exists(ctx, fmt.Sprintf("/race/n%d", w%n))
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	for i := range 6 {
		_, changed := s.State()
		p.Reset()
		select {
		case <-changed:
		case <-time.After(30 * time.Second):
			t.Fatalf("reset %d: no disconnect seen", i)
		}
		waitState(t, s, zk.StateConnected, fmt.Sprintf("reset %d: not reconnected", i))
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	// The watches were re-registered on every reconnect and still fire.
	if _, _, err := s.Create(ctx, "/race/new", nil, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, kids, zk.EventNodeChildrenChanged)
	for i, ch := range watches {
		if err := s.Delete(ctx, fmt.Sprintf("/race/n%d", i), -1); err != nil {
			t.Fatal(err)
		}
		expectEvent(t, ch, zk.EventNodeDeleted)
	}
}

type slowWrites struct{ net.Conn }

func (c slowWrites) Write(p []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
	return c.Conn.Write(p)
}

// waitState waits (generously) until the session is in state want.
func waitState(t *testing.T, s *zk.Session, want zk.State, msg string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		st, changed := s.State()
		if st == want {
			return
		}
		if st == zk.StateExpired || st == zk.StateClosed {
			t.Fatalf("%s: session %v (%v)", msg, st, s.Err())
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%s: still %v", msg, st)
		}
	}
}

func expectEvent(t *testing.T, ch <-chan zk.Event, want zk.EventType) {
	t.Helper()
	select {
	case ev := <-ch:
		if ev.Type != want {
			t.Errorf("event = %+v, want type %d", ev, want)
		}
		if ev.Err != nil && !errors.Is(ev.Err, zk.ErrConnectionLoss) {
			t.Errorf("event error %v", ev.Err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("no %d event", want)
	}
}
