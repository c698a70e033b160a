package election

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// probeSession leaves an ephemeral znode of id's session: while it exists,
// ZooKeeper has not expired that session.
func probeSession(t *testing.T, r *referee, id string) string {
	t.Helper()
	p := "/failoverd/test/probe-" + id
	if _, _, err := r.leaderOf(t, id).Session.Create(t.Context(), p, nil, zk.Ephemeral); err != nil {
		t.Fatal(err)
	}
	return p
}

func exists(t *testing.T, servers []string, p string) bool {
	t.Helper()
	s, closeS := openSession(t, servers, 4*time.Second)
	defer closeS()
	ok, _, err := s.Exists(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// A leader cut off from ZooKeeper stops at its own deadline, and the
// candidate next in line takes over right after it, while ZooKeeper still
// keeps the old session: before the expiry, never before the old leader
// stopped.
func TestTakeOverAtTheLeadersDeadline(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	proxy := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
	const timeout = 3 * time.Second
	// A lease below the longest (2.55 s) puts a's deadline, 2.45 s after
	// its newest heartbeat, well before the session's expiry (3 s after
	// its newest request, rounded up to a tick), so the race between the
	// two is not what this test measures.
	startCandidate(t, r, "a", opts{mode: Fair, timeout: timeout, servers: []string{proxy.Addr()}, takeover: true, budget: 300 * time.Millisecond,
		lease: 2 * time.Second})
	if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
		t.Fatalf("leader %s, want a", l)
	}
	probe := probeSession(t, r, "a")
	startCandidate(t, r, "b", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), takeover: true, budget: 300 * time.Millisecond})
	waitQueueLen(t, zks.Addrs(), 2)
	time.Sleep(timeout) // b has seen a's heartbeats for a while

	cut := time.Now()
	proxy.Blackhole(true)
	if l := r.waitLeader(t, "a", 4*timeout); l != "b" {
		t.Fatalf("successor %s, want b", l)
	}
	won := time.Now()
	at := r.lastTermOf("a")
	if at.end.IsZero() || !errors.Is(at.cause, ErrLeaseExpired) {
		t.Errorf("a's term: end %v cause %v, want ended by its lease", at.end, at.cause)
	}
	if !exists(t, zks.Addrs(), probe) {
		t.Errorf("a's session expired before b won (%v after the cut): b waited out the session, not a's deadline", won.Sub(cut))
	}
	t.Logf("b won %v after the cut (a's term ended %v after it; session timeout %v)",
		won.Sub(cut).Round(time.Millisecond), at.end.Sub(cut).Round(time.Millisecond), timeout)
	r.check(t)
}

// A successor whose view of the leader's heartbeat does not move (a
// lagging server) times out the version it sees, but the delete at that
// version is refused while the leader renews: the leader keeps its term.
func TestTakeOverRefusedWhileTheHeartbeatMoves(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	const timeout = 2 * time.Second
	startCandidate(t, r, "a", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), takeover: true})
	if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
		t.Fatalf("leader %s, want a", l)
	}
	epoch := r.leaderOf(t, "a").Epoch
	var stale atomic.Int64
	hooks := &testHooks{staleView: func() bool { stale.Add(1); return true }}
	startCandidate(t, r, "b", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), takeover: true, hooks: hooks})
	waitQueueLen(t, zks.Addrs(), 2)
	time.Sleep(3 * timeout) // more than two deadlines of a's
	if l, ok := r.current("a"); !ok || l.Epoch != epoch {
		t.Fatalf("a lost its term (%v) to a successor whose view of its heartbeat was stale", r.lastTermOf("a").cause)
	}
	if stale.Load() == 0 {
		t.Fatal("the stale view was never applied: the test proves nothing")
	}
	r.check(t)
}

// A leader that publishes no heartbeats (the option off on its node) is
// never taken over early: its successor waits for ZooKeeper to expire it.
func TestNoEarlyTakeOverFromALeaderWithoutHeartbeats(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	proxy := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
	const timeout = 2 * time.Second
	startCandidate(t, r, "a", opts{mode: Fair, timeout: timeout, servers: []string{proxy.Addr()}})
	if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
		t.Fatalf("leader %s, want a", l)
	}
	probe := probeSession(t, r, "a")
	startCandidate(t, r, "b", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), takeover: true})
	waitQueueLen(t, zks.Addrs(), 2)
	proxy.Blackhole(true)
	if l := r.waitLeader(t, "a", 5*timeout); l != "b" {
		t.Fatalf("successor %s, want b", l)
	}
	if exists(t, zks.Addrs(), probe) {
		t.Error("b won while a's session lived: it took over from a leader that published no deadline")
	}
	r.check(t)
}

func TestTakeOverNeedsFairMode(t *testing.T) {
	zks := zktest.Start(t, 1)
	c, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 2 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := New(Config{Dir: "/x", NodeID: "a", Mode: Unfair, TakeOverAtDeadline: true}, Deps{Client: c}); err == nil {
		t.Error("New accepted taking over at the deadline in unfair mode")
	}
}

// With the option on, a leader's lease runs from its heartbeats only: a
// leader whose renewals stop while other writes of its session (the
// term's guarded writes) go on is past its own deadline when the
// successor takes over, and its term ends by its lease, not by the
// successor's delete.
func TestLeaseRunsFromHeartbeatsOnly(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	const timeout = 2 * time.Second
	var stopBeats atomic.Bool
	hooks := &testHooks{skipRenewal: stopBeats.Load}
	startCandidate(t, r, "a", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), takeover: true, hooks: hooks})
	if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
		t.Fatalf("leader %s, want a", l)
	}
	la := r.leaderOf(t, "a")
	startCandidate(t, r, "b", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), takeover: true})
	waitQueueLen(t, zks.Addrs(), 2)
	time.Sleep(timeout)

	stopBeats.Store(true)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the term's guarded writes go on, each answered by the quorum
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			la.Session.Multi(t.Context(), zk.CheckOp{Path: la.Path, Version: -1})
		}
	}()
	if l := r.waitLeader(t, "a", 5*timeout); l != "b" {
		t.Fatalf("successor %s, want b", l)
	}
	close(stop)
	<-done
	if at := r.lastTermOf("a"); !errors.Is(at.cause, ErrLeaseExpired) {
		t.Errorf("a's term ended by %v, want its lease: its non-heartbeat writes kept it past the deadline the successor timed", at.cause)
	}
	r.check(t)
}

// The third candidate re-arms its watch on the warm standby's heartbeats
// without looking again, yet learns from the new leader's first
// heartbeat that it moved up: when that leader goes silent too, it takes
// over at that leader's deadline as well.
func TestThirdCandidateMovesUpAndTakesOver(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	const timeout = 3 * time.Second
	o := func(p *netproxy.Proxy) opts {
		return opts{mode: Fair, timeout: timeout, servers: []string{p.Addr()}, takeover: true, budget: 300 * time.Millisecond,
			lease: 2 * time.Second}
	}
	pa := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
	pb := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
	pc := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
	startCandidate(t, r, "a", o(pa))
	if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
		t.Fatalf("leader %s, want a", l)
	}
	startCandidate(t, r, "b", o(pb))
	waitQueueLen(t, zks.Addrs(), 2)
	startCandidate(t, r, "c", o(pc))
	waitQueueLen(t, zks.Addrs(), 3)
	time.Sleep(timeout)

	pa.Blackhole(true)
	if l := r.waitLeader(t, "a", 4*timeout); l != "b" {
		t.Fatalf("successor %s, want b", l)
	}
	probe := probeSession(t, r, "b")
	time.Sleep(timeout) // c has timed b's heartbeats as leader for a while
	cut := time.Now()
	pb.Blackhole(true)
	if l := r.waitLeader(t, "b", 4*timeout); l != "c" {
		t.Fatalf("successor %s, want c", l)
	}
	if !exists(t, zks.Addrs(), probe) {
		t.Errorf("b's session expired before c won (%v after the cut): c did not move up to time b's heartbeats", time.Since(cut))
	}
	r.check(t)
}
