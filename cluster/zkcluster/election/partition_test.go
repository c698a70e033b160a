package election

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// A ZooKeeper quorum partition: the failoverd leader talks only to server X,
// X is cut off from its peers but keeps its client port, and syncLimit ×
// tickTime (6 s) is well above the session timeout (2 s), as in production.
// X keeps answering reads and pings from its local copy while the rest of
// the ensemble expires the leader's session and lets the other candidate
// win. The old leader must stand down (its lease ends) before the successor
// is elected; only answers the ZooKeeper leader gave may renew the lease.
func TestQuorumPartitionOldLeaderStopsFirst(t *testing.T) {
	const (
		tick      = 200 * time.Millisecond
		syncLimit = 30
		timeout   = 2 * time.Second
		budget    = 600 * time.Millisecond // as the test clusters' demote
	)
	run := func(t *testing.T, m Mode, isolateLeader bool, lease time.Duration) {
		zks := zktest.StartOpts(t, zktest.Options{Servers: 3, TickTime: tick, SyncLimit: syncLimit, ProxyQuorum: true})
		x := (zks.Leader() + 1) % 3
		if isolateLeader {
			x = zks.Leader()
		}
		var others []string
		for i, s := range zks.Servers {
			if i != x {
				others = append(others, s.Addr())
			}
		}
		// The cut comes right after a renewal was answered, before the
		// ZooKeeper leader's next ping can collect the follower's touches:
		// the worst moment, when the newest touch the leader knows of is
		// the previous renewal's.
		var armed atomic.Bool
		var cut time.Time
		cutDone := make(chan struct{})
		hooks := &testHooks{renewed: func() {
			if armed.CompareAndSwap(true, false) {
				zks.Isolate(x)
				cut = time.Now()
				close(cutDone)
			}
		}}
		r := newReferee()
		startCandidate(t, r, "a", opts{mode: m, timeout: timeout, servers: []string{zks.Servers[x].Addr()}, lease: lease, tick: tick, budget: budget, hooks: hooks})
		if l := r.waitLeader(t, "", 20*time.Second); l != "a" {
			t.Fatalf("leader %s, want a", l)
		}
		startCandidate(t, r, "b", opts{mode: m, timeout: timeout, servers: others, tick: tick, budget: budget})
		waitQueueOrLock(t, others, m)
		time.Sleep(time.Second) // a few renewals
		la := r.leaderOf(t, "a")
		if tm := la.Timing; la.Lease > tm.Max || tm.Max+tm.Budget+tm.Margin > la.SessionTimeout {
			t.Fatalf("lease %v above the longest that fits (%+v)", la.Lease, tm)
		}

		armed.Store(true)
		select {
		case <-cutDone:
		case <-time.After(10 * time.Second):
			t.Fatal("no renewal answered in 10s")
		}
		if mode, _ := zktest.Mode(zks.Servers[x].Addr()); isolateLeader && mode != "leader" || !isolateLeader && mode != "follower" {
			t.Fatalf("isolated server reports %q", mode)
		}
		succ := r.waitLeader(t, "a", 60*time.Second)
		r.mu.Lock()
		var old, next term
		for _, tm := range r.terms {
			switch tm.id {
			case "a":
				old = tm
			case succ:
				next = tm
			}
		}
		r.mu.Unlock()
		if old.end.IsZero() {
			t.Fatalf("%s elected %v after the cut while a still leads", succ, next.start.Sub(cut))
		}
		demoted, elected := old.end.Sub(cut), next.start.Sub(cut)
		t.Logf("isolated %s: old leader demoted %v after the cut (%v), successor elected %v after it: margin %v",
			map[bool]string{true: "zk leader", false: "zk follower"}[isolateLeader],
			demoted.Round(time.Millisecond), old.cause, elected.Round(time.Millisecond), (elected - demoted).Round(time.Millisecond))
		if !old.end.Before(next.start) {
			t.Errorf("old leader demoted %v after the cut, successor elected %v after it: overlap", demoted, elected)
		}
		// No write can be answered after the cut (X has no quorum, or X is
		// a follower cut off from it), so the lease ends at most Lease
		// after it; an answer X gave alone (a read, or a sync on an
		// isolated ZooKeeper leader) must not have moved it on.
		if limit := la.Lease + time.Second; demoted > limit {
			t.Errorf("old leader demoted %v after the cut, later than its lease %v (+1s)", demoted, la.Lease)
		}
		zks.Heal(x)
		r.check(t)
	}
	for _, m := range []Mode{Fair, Unfair} {
		t.Run(fmt.Sprintf("follower/%s", m), func(t *testing.T) { run(t, m, false, 0) })
	}
	t.Run("leader/fair", func(t *testing.T) { run(t, Fair, true, 0) })

}

// A leader whose timing rides out a reconnect (lease.Timing.RidesOutReconnect,
// which config validation warns about otherwise) keeps its leadership while
// its connection is reset again and again and it moves from server to
// server: the new connection builds its own credit chain before the old
// one's anchor runs out.
func TestReconnectKeepsLeadership(t *testing.T) {
	const (
		tick = 200 * time.Millisecond
		// A 3s session leaves 1.9s of reconnect slack: room for the ZooKeeper
		// client's one-second pause after a failed try at every server.
		timeout = 3 * time.Second
		budget  = 600 * time.Millisecond
	)
	zks := zktest.StartOpts(t, zktest.Options{Servers: 3, TickTime: tick})
	var proxies []*netproxy.Proxy
	var addrs []string
	for i := range zks.Servers {
		p := netproxy.New(t, func() string { return zks.Servers[i].Addr() })
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	r := newReferee()
	startCandidate(t, r, "a", opts{mode: Fair, timeout: timeout, servers: addrs, tick: tick, budget: budget})
	if l := r.waitLeader(t, "", 20*time.Second); l != "a" {
		t.Fatalf("leader %s, want a", l)
	}
	startCandidate(t, r, "b", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), tick: tick, budget: budget})
	waitQueueOrLock(t, zks.Addrs(), Fair)
	la := r.leaderOf(t, "a")
	if !la.Timing.RidesOutReconnect() {
		t.Fatalf("timing %+v does not ride out a reconnect; the test needs one that does", la.Timing)
	}
	first := r.lastTerm()
	for i := range 8 {
		_, changed := la.Session.State()
		// Only a's connection goes through the proxies. Reset the proxy
		// that carries it, chosen first: resetting each in turn could also
		// cut the new connection a made meanwhile through the next one,
		// and after a failed try at every server the client waits a second
		// before the next round, longer than the lease leaves.
		var carrying []*netproxy.Proxy
		for _, p := range proxies {
			if p.Conns() > 0 {
				carrying = append(carrying, p)
			}
		}
		for _, p := range carrying {
			p.Reset()
		}
		reset := time.Now()
		select {
		case <-changed: // the connection went, a reconnect follows
		case <-time.After(5 * time.Second):
			t.Fatalf("reset %d: the session's state did not change", i)
		}
		// The lease rides out a reconnect within its slack, not a slower one.
		for {
			st, changed := la.Session.State()
			if st == zk.StateConnected {
				break
			}
			select {
			case <-changed:
			case <-time.After(time.Until(reset.Add(la.Timing.ReconnectSlack()))):
				t.Fatalf("reset %d: session %v %v after the reset, longer than the reconnect slack %v",
					i, st, time.Since(reset).Round(time.Millisecond), la.Timing.ReconnectSlack())
			}
		}
		// Anywhere in the renewal cycle: 0.5 to 1.5 s apart.
		time.Sleep(time.Until(reset.Add(500*time.Millisecond + time.Duration(i)*125*time.Millisecond)))
	}
	time.Sleep(time.Second)
	if l := r.leaderOf(t, "a"); l.Epoch != first.epoch {
		t.Fatalf("leadership changed: epoch %d, want %d", l.Epoch, first.epoch)
	}
	if last := r.lastTerm(); last.epoch != first.epoch || !last.end.IsZero() {
		t.Errorf("term ended through reconnects: %+v (cause %v)", last, last.cause)
	}
	r.check(t)
}
