package zktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

func session(t *testing.T, addrs ...string) *zk.Session {
	t.Helper()
	c, err := zk.NewClient(zk.Config{Servers: addrs, SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eventually retries f for a while: right after an election the new leader
// may still be setting up.
func eventually(t *testing.T, f func() error) {
	t.Helper()
	var err error
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(100 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatal(err)
}

func mode(c *Cluster, i int) string {
	m, _ := Mode(c.Servers[i].Addr())
	return m
}

// waitMode waits until server i reports one of want; it returns how long
// that took.
func waitMode(t *testing.T, c *Cluster, i int, timeout time.Duration, want ...string) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		m := mode(c, i)
		for _, w := range want {
			if m == w {
				return time.Since(start)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server %d mode %q after %v, want %v", i, mode(c, i), timeout, want)
	return 0
}

// An isolated follower keeps its role and serves reads from its local copy
// for about syncLimit × tickTime, but cannot answer a sync; the rest of the
// ensemble keeps a leader and takes writes; after Heal it catches up.
func TestIsolatedFollowerServesReadsUntilSyncLimit(t *testing.T) {
	const tick, syncLimit = 200 * time.Millisecond, 15 // 3 s
	c := StartOpts(t, Options{Servers: 3, TickTime: tick, SyncLimit: syncLimit, ProxyQuorum: true})
	leader := c.Leader()
	f := (leader + 1) % 3
	other := 3 - leader - f
	fs := session(t, c.Servers[f].Addr())
	ls := session(t, c.Servers[leader].Addr(), c.Servers[other].Addr())
	ctx := t.Context()
	if _, _, err := fs.Create(ctx, "/x", []byte("1"), zk.Persistent); err != nil {
		t.Fatal(err)
	}

	c.Isolate(f)
	cut := time.Now()
	time.Sleep(300 * time.Millisecond)
	if m := mode(c, f); m != "follower" {
		t.Fatalf("isolated follower reports %q right away, want follower", m)
	}
	if b, _, err := fs.Get(ctx, "/x"); err != nil || string(b) != "1" {
		t.Fatalf("isolated follower does not serve reads: %q, %v", b, err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	err := fs.Sync(sctx, "/x")
	cancel()
	if err == nil {
		t.Fatal("isolated follower answered a sync")
	}
	if _, err := ls.Set(ctx, "/x", []byte("2"), -1); err != nil {
		t.Fatalf("majority does not take writes: %v", err)
	}
	if b, _, err := fs.Get(ctx, "/x"); err == nil && string(b) != "1" {
		t.Fatalf("isolated follower saw a write of the majority: %q", b)
	}
	if m := mode(c, leader); m != "leader" {
		t.Errorf("majority leader reports %q", m)
	}
	waitMode(t, c, f, 30*time.Second, "")
	stopped := time.Since(cut)
	t.Logf("isolated follower stopped serving %v after the cut (syncLimit × tickTime = %v)", stopped.Round(time.Millisecond), syncLimit*tick)
	if stopped < syncLimit*tick/2 {
		t.Errorf("isolated follower stopped after %v, well before syncLimit × tickTime %v: not a partition", stopped, syncLimit*tick)
	}

	c.Heal(f)
	d := waitMode(t, c, f, 60*time.Second, "follower")
	t.Logf("healed follower follows again %v after the heal", d.Round(time.Millisecond))
	if b, _, err := fs.Get(ctx, "/x"); err != nil || string(b) != "2" {
		// The old session may be gone (it was cut off longer than its
		// timeout); a fresh one must see the majority's write.
		b, _, err = session(t, c.Servers[f].Addr()).Get(ctx, "/x")
		if err != nil || string(b) != "2" {
			t.Fatalf("healed follower reads %q, %v; want 2", b, err)
		}
	}
}

// An isolated leader keeps reporting leader for a while; the two others
// elect a new leader among themselves; after Heal the old one follows.
func TestIsolatedLeaderIsReplaced(t *testing.T) {
	const tick, syncLimit = 200 * time.Millisecond, 10 // 2 s
	c := StartOpts(t, Options{Servers: 3, TickTime: tick, SyncLimit: syncLimit, ProxyQuorum: true})
	old := c.Leader()
	c.Isolate(old)
	cut := time.Now()
	time.Sleep(300 * time.Millisecond)
	if m := mode(c, old); m != "leader" {
		t.Fatalf("isolated leader reports %q right away, want leader", m)
	}
	var newLeader int
	var oldStopped, elected time.Duration
	deadline := time.Now().Add(60 * time.Second)
	for newLeader = -1; newLeader < 0 || oldStopped == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: new leader %d, old leader mode %q", newLeader, mode(c, old))
		}
		if oldStopped == 0 && mode(c, old) != "leader" {
			oldStopped = time.Since(cut)
		}
		for i := range c.Servers {
			if i != old && newLeader < 0 && mode(c, i) == "leader" {
				newLeader, elected = i, time.Since(cut)
			}
		}
	}
	t.Logf("majority elected server %d %v after the cut; the isolated leader gave up after %v (syncLimit × tickTime = %v)",
		newLeader, elected.Round(time.Millisecond), oldStopped.Round(time.Millisecond), syncLimit*tick)
	if os.Getenv("ZKTEST_DUMP") != "" && time.Since(cut) > 5*time.Second {
		c.DumpLogs()
	}
	s := session(t, c.Servers[newLeader].Addr())
	eventually(t, func() error {
		_, _, err := s.Create(t.Context(), "/y", nil, zk.Persistent)
		if errors.Is(err, zk.ErrNodeExists) {
			return nil
		}
		return err
	})
	c.Heal(old)
	d := waitMode(t, c, old, 60*time.Second, "follower")
	t.Logf("old leader follows %v after the heal", d.Round(time.Millisecond))
	s = session(t, c.Servers[old].Addr())
	eventually(t, func() error {
		ok, _, err := s.Exists(t.Context(), "/y")
		if err == nil && !ok {
			err = errors.New("healed old leader does not see /y")
		}
		return err
	})
}

// The case HoldCommits is for: a client's multi deleting its ephemeral is
// applied but the reply is lost; the client reconnects to a follower that
// lags (it has reached the client's last seen zxid, not the delete) while
// another session creates the same name. Without a sync the client reads
// its own old znode there; a sync waits for the held commits, and after the
// hold ends it sees the other session's znode.
func TestHeldFollowerShowsAReconnectedClientAnOldView(t *testing.T) {
	c := StartOpts(t, Options{Servers: 3, ProxyQuorum: true})
	leader := c.Leader()
	f := (leader + 1) % 3
	// Synced anew, by snapshot (the leader has no log to send a diff
	// from): the proxy must find the packets after it.
	c.Resync(f)
	if !c.Holdable(f, 30*time.Second) {
		t.Fatalf("follower %d cannot hold commits after a resync", f)
	}
	other := 3 - leader - f
	toOther := NewLossProxy(t, c.Servers[other].Addr)
	toF := NewLossProxy(t, c.Servers[f].Addr)
	toF.Refuse(true)
	s := session(t, toOther.Addr(), toF.Addr())
	ctx := t.Context()
	_, mine, err := s.Create(ctx, "/lock", nil, zk.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	held := -1
	isDelete := func(op int32, path string) bool { return op == OpMulti && path == "delete /lock" }
	toOther.LoseRepliesHooked(1, isDelete, LossHooks{
		Before: func(seen int64) {
			for z, _ := Zxid(c.Servers[f].Addr()); z < seen; z, _ = Zxid(c.Servers[f].Addr()) {
				time.Sleep(5 * time.Millisecond)
			}
			held = c.HoldCommits(f, true)
		},
		After: func() {
			toOther.Refuse(true)
			toF.Refuse(false)
		},
	})
	if err := s.Multi(ctx, zk.DeleteOp{Path: "/lock", Version: -1}); !errors.Is(err, zk.ErrConnectionLoss) {
		t.Fatalf("multi whose reply is lost: %v, want connection loss", err)
	}
	defer c.HoldCommits(f, false)
	if held != 1 {
		t.Fatalf("HoldCommits held %d links, want 1", held)
	}
	if lost := toOther.Lost(); len(lost) != 1 || lost[0].Path != "delete /lock" {
		t.Fatalf("lost replies %v", lost)
	}
	w := session(t, c.Servers[leader].Addr())
	_, theirs, err := w.Create(ctx, "/lock", nil, zk.Ephemeral)
	if err != nil {
		t.Fatalf("the successor's create: %v", err)
	}
	ok, st, err := s.Exists(ctx, "/lock")
	if err != nil || !ok || st.Czxid != mine.Czxid || st.EphemeralOwner != s.ID() {
		t.Fatalf("reconnected client reads %v %+v %v; want its own deleted znode (czxid %d) from the lagging follower", ok, st, err, mine.Czxid)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	err = s.Sync(sctx, "/lock")
	cancel()
	if err == nil {
		t.Fatal("a lagging follower answered a sync while its commits are held")
	}
	c.HoldCommits(f, false)
	eventually(t, func() error {
		if err := s.Sync(ctx, "/lock"); err != nil {
			return err
		}
		ok, st, err := s.Exists(ctx, "/lock")
		if err == nil && (!ok || st.Czxid != theirs.Czxid) {
			err = fmt.Errorf("after the hold: %v %+v, want czxid %d", ok, st, theirs.Czxid)
		}
		return err
	})
}
