package zk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

func newClient(t *testing.T, servers []string, timeout time.Duration) *zk.Client {
	t.Helper()
	c, err := zk.NewClient(zk.Config{Servers: servers, SessionTimeout: timeout}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestSessionBasicsAndExpiry(t *testing.T) {
	zks := zktest.Start(t, 1)
	c := newClient(t, zks.Addrs(), 1500*time.Millisecond)
	ctx := t.Context()
	s, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Timeout(); got != 1500*time.Millisecond {
		t.Errorf("negotiated timeout = %v, want 1.5s", got)
	}
	if len(s.Password()) == 0 || s.ID() == 0 {
		t.Fatalf("no session credentials: id=%x passwd=%x", s.ID(), s.Password())
	}
	before := time.Now()
	if err := s.EnsurePath(ctx, "/a/b"); err != nil {
		t.Fatal(err)
	}
	p, st, err := s.Create(ctx, "/a/b/n-", []byte("x"), zk.EphemeralSequential)
	if err != nil {
		t.Fatal(err)
	}
	if st.EphemeralOwner != s.ID() || st.Czxid == 0 {
		t.Errorf("stat = %+v, want owner %x and a czxid", st, s.ID())
	}
	acks := s.Acks()
	if len(acks) == 0 || acks[0].Sent.Before(before) {
		t.Errorf("acks %+v: want the writes, sent after %v", acks, before)
	}
	// Reads may be answered by a follower cut off from the leader, and syncs
	// by a leader cut off from its quorum: neither may add to Acks; an
	// answered write does.
	newest := func() zk.Ack { a := s.Acks(); return a[len(a)-1] }
	last := newest()
	time.Sleep(5 * time.Millisecond)
	if _, _, err := s.Exists(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := newest(); got != last {
		t.Errorf("a read added ack %+v", got)
	}
	if err := s.Sync(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := newest(); got != last {
		t.Errorf("a sync added ack %+v", got)
	}
	sent := time.Now()
	if err := s.Multi(ctx, zk.CheckOp{Path: p, Version: -1}); err != nil {
		t.Fatal(err)
	}
	acks = s.Acks()
	if newest() == last {
		t.Fatalf("an answered write did not add to Acks (%d)", len(acks))
	}
	if a := acks[len(acks)-1]; a.Sent.Before(sent) || a.Answered.Before(a.Sent) || a.Conn == 0 {
		t.Errorf("newest ack %+v: want sent after %v, answered after sent, a connection", a, sent)
	}
	if _, _, err := s.Create(ctx, "/a/b", nil, zk.Persistent); !errors.Is(err, zk.ErrNodeExists) {
		t.Errorf("Create existing = %v, want ErrNodeExists", err)
	}
	err = s.Multi(ctx, zk.CheckOp{Path: "/a/none", Version: -1}, zk.SetOp{Path: "/a/b", Version: -1})
	var me *zk.MultiError
	if !errors.As(err, &me) || me.Index != 0 || !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("Multi with failing check = %v, want MultiError{0, ErrNoNode}", err)
	}

	if err := zktest.Expire(zks.Servers[0].Addr(), s.ID(), s.Password()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session not reported dead after server-side expiry")
	}
	if _, _, err := s.Exists(ctx, p); !errors.Is(err, zk.ErrSessionExpired) {
		t.Errorf("call on expired session = %v, want ErrSessionExpired", err)
	}
	// A new session is handed out; the old ephemeral node is gone.
	s2, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s2 == s || s2.ID() == s.ID() {
		t.Fatal("expected a new session")
	}
	if ok, _, err := s2.Exists(ctx, p); err != nil || ok {
		t.Errorf("ephemeral of expired session exists=%v err=%v", ok, err)
	}
}

func TestWatchEventsCounted(t *testing.T) {
	zks := zktest.Start(t, 1)
	c := newClient(t, zks.Addrs(), 2*time.Second)
	ctx := t.Context()
	s, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, "/w", nil, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	_, _, ch, err := s.ExistsW(ctx, "/w")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "/w", -1); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.Type != zk.EventNodeDeleted {
			t.Errorf("event = %+v, want deleted", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event")
	}
	if n := c.WatchEvents(); n != 1 {
		t.Errorf("WatchEvents = %d, want 1", n)
	}
}
