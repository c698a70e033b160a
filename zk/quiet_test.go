package zk_test

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/zktest"
	"github.com/failoverd/failoverd/zk"
)

// QuietSince: an event for a path, numbered as the connection delivered
// it, ends that path's quiet since any earlier mark, before any watcher
// goroutine sees it; other paths stay quiet; a restart of the server (a
// disconnect and a reconnect) ends every path's quiet.
func TestQuietSince(t *testing.T) {
	zks := zktest.Start(t, 1)
	c := newClient(t, zks.Addrs(), 4*time.Second)
	other := newClient(t, zks.Addrs(), 4*time.Second)
	ctx := t.Context()
	s, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o, err := other.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/q", "/r"} {
		if _, _, err := s.Create(ctx, p, []byte("0"), zk.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	mark := s.EventMark()
	if _, _, _, err := s.GetW(ctx, "/q"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.GetW(ctx, "/r"); err != nil {
		t.Fatal(err)
	}
	if !s.QuietSince("/q", mark) || !s.QuietSince("/r", mark) {
		t.Fatal("not quiet before any change")
	}
	if _, err := o.Set(ctx, "/q", []byte("1"), -1); err != nil {
		t.Fatal(err)
	}
	// A sync on our session is answered after the server sent us every
	// notification of changes committed before it.
	if err := s.Sync(ctx, "/q"); err != nil {
		t.Fatal(err)
	}
	if s.QuietSince("/q", mark) {
		t.Error("/q is quiet after another session changed it (its watch fired)")
	}
	if !s.QuietSince("/r", mark) {
		t.Error("/r is not quiet, though only /q changed")
	}
	if later := s.EventMark(); !s.QuietSince("/q", later) {
		t.Error("/q is not quiet since a mark taken after its event")
	}

	mark = s.EventMark()
	if _, _, _, err := s.GetW(ctx, "/r"); err != nil {
		t.Fatal(err)
	}
	zks.Stop(0)
	waitSessionState(t, s, func(st zk.State) bool { return st != zk.StateConnected })
	zks.Restart(0)
	waitSessionState(t, s, func(st zk.State) bool { return st == zk.StateConnected })
	if s.QuietSince("/r", mark) {
		t.Error("/r is quiet across a disconnect and a reconnect")
	}
}

func waitSessionState(t *testing.T, s *zk.Session, ok func(zk.State) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		st, changed := s.State()
		if ok(st) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("still %v after 30s", st)
		}
	}
}
