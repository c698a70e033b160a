package election

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// The test clusters' timing: session 2 s, tickTime 200 ms, demote timeout
// 600 ms, so a lease of 800 ms renewed every 105 ms.
var clusterTiming = opts{timeout: 2 * time.Second, tick: zktest.TickTime,
	budget: 1100 * time.Millisecond}

// leaveTimes records when each elector given its hooks sent the delete of
// its znode at the end of a term (the leave hook runs right before it).
type leaveTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (lt *leaveTimes) hooks() *testHooks {
	return &testHooks{leave: func(*zk.Session, string) bool {
		lt.mu.Lock()
		lt.at = append(lt.at, time.Now())
		lt.mu.Unlock()
		return false
	}}
}

func (lt *leaveTimes) last() time.Time {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if len(lt.at) == 0 {
		return time.Time{}
	}
	return lt.at[len(lt.at)-1]
}

// handovers has the leader leave rounds times and returns, per handover, the
// time from the leaver's delete of its znode to the successor's callback,
// and the successor's term. settle is how long the next candidate in line
// needs to become ready (fair mode builds its chain only once it is next).
func handovers(t *testing.T, r *referee, cands map[string]*cand, lt *leaveTimes, rounds int, settle time.Duration) ([]time.Duration, []term, []time.Time) {
	t.Helper()
	var delays []time.Duration
	var terms []term
	var deletes []time.Time
	prev := r.waitLeader(t, "", 10*time.Second)
	for range rounds {
		time.Sleep(settle)
		cands[prev].leave()
		next := r.waitLeader(t, prev, 10*time.Second)
		tm := r.lastTermOf(next)
		del := lt.last()
		if del.IsZero() || del.After(tm.start) {
			t.Fatalf("no delete recorded before %s's term (delete %v, term %v)", next, del, tm.start)
		}
		delays = append(delays, tm.start.Sub(del))
		terms = append(terms, tm)
		deletes = append(deletes, del)
		prev = next
	}
	return delays, terms, deletes
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// A warm standby (fair: the one next in line; unfair: every one) leads
// at once when the leader goes: its lease runs from the chain it kept
// while waiting (an anchor before the leaver's delete), and the time from
// that delete to its callback is far below a renew interval.
func TestWarmChainLeaderValidAtOnce(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		lt := &leaveTimes{}
		r := newReferee()
		o := clusterTiming
		o.mode, o.servers, o.hooks = m, zks.Addrs(), lt.hooks()
		cands := map[string]*cand{}
		for i := range 5 {
			id := fmt.Sprintf("n%d", i)
			cands[id] = startCandidate(t, r, id, o)
			if m == Fair {
				waitQueueLen(t, zks.Addrs(), i+1)
			}
		}
		tm := r.leaderOf(t, r.waitLeader(t, "", 10*time.Second)).Timing
		delays, terms, deletes := handovers(t, r, cands, lt, 4, 4*tm.Renew)
		// A renewal of the chain that a loaded machine delays past the
		// leaver's delete makes that successor settle (still safe, only
		// slower): at load 27 two of four did. None leading from its
		// chain means there is no chain.
		settled := 0
		for i, d := range delays {
			left := terms[i].anchor.Add(tm.Lease).Sub(terms[i].start)
			t.Logf("handover %d to %s: delete → elected %v, lease left %v (anchor %v before the delete)", i, terms[i].id,
				d.Round(100*time.Microsecond), left.Round(time.Millisecond), deletes[i].Sub(terms[i].anchor).Round(time.Millisecond))
			if !terms[i].anchor.Before(deletes[i]) {
				settled++
				t.Logf("handover %d: the lease runs from %v after the delete: the successor settled instead of using its chain",
					i, terms[i].anchor.Sub(deletes[i]))
				continue
			}
			if min := tm.Lease - 2*tm.Renew - lease.MinTolerance/2 - 50*time.Millisecond; left < min {
				t.Errorf("handover %d: lease left %v at election, want at least about %v", i, left, min)
			}
		}
		if settled == len(delays) {
			t.Errorf("all %d successors settled instead of leading from their chain", settled)
		}
		// How fast is make bench's to measure (BenchmarkHandoff); logged.
		t.Logf("delete → elected: median %v (renew interval %v)", median(delays), tm.Renew)
		r.check(t)
	})
}

// Without a chain (Config.WarmStandby false) a successor still renews for
// a renew interval after its win before it leads, as before; with it, a
// fair-mode candidate that is not next in line keeps no chain and sends no
// write while it waits, and the one next in line sends about 2/R.
func TestColdCandidateStillSettles(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		lt := &leaveTimes{}
		r := newReferee()
		o := clusterTiming
		o.mode, o.servers, o.cold, o.hooks = m, zks.Addrs(), true, lt.hooks()
		cands := map[string]*cand{}
		for i := range 4 {
			id := fmt.Sprintf("n%d", i)
			cands[id] = startCandidate(t, r, id, o)
			if m == Fair {
				waitQueueLen(t, zks.Addrs(), i+1)
			}
		}
		tm := r.leaderOf(t, r.waitLeader(t, "", 10*time.Second)).Timing
		delays, terms, deletes := handovers(t, r, cands, lt, 3, 4*tm.Renew)
		for i, d := range delays {
			t.Logf("handover %d to %s: delete → elected %v", i, terms[i].id, d.Round(100*time.Microsecond))
			if terms[i].anchor.Before(deletes[i]) {
				t.Errorf("handover %d: a cold successor's lease runs from %v before the delete", i, deletes[i].Sub(terms[i].anchor))
			}
			if gap := lease.Gap(tm.Session, tm.Tick); d < gap {
				t.Errorf("handover %d: elected %v after the delete, less than the gap %v a chain needs", i, d, gap)
			}
		}
		r.check(t)
	})
	t.Run("writes while waiting", func(t *testing.T) {
		r := newReferee()
		o := clusterTiming
		o.mode, o.servers = Fair, zks.Addrs()
		var cands []*cand
		for i := range 3 {
			cands = append(cands, startCandidate(t, r, fmt.Sprintf("w%d", i), o))
			waitQueueLen(t, zks.Addrs(), i+1)
		}
		r.waitLeader(t, "", 10*time.Second)
		time.Sleep(time.Second)
		const window = time.Second
		rate := func(k *cand, from time.Time) float64 {
			n := 0
			for _, a := range k.client.Current().Acks() {
				if a.Sent.After(from) && a.Sent.Before(from.Add(window)) {
					n++
				}
			}
			return float64(n) / window.Seconds()
		}
		// The roles are read from the queue before and after the window:
		// on a loaded machine a lost lease or session reorders it, and a
		// window across that says nothing about waiting; it is measured
		// again.
		byID := map[string]*cand{}
		for i, k := range cands {
			byID[fmt.Sprintf("w%d", i)] = k
		}
		queue := func() []string {
			s, closeSess := openSession(t, zks.Addrs(), 2*time.Second)
			defer closeSess()
			q, _ := Queue(t.Context(), s, "/failoverd/test/election")
			return q
		}
		var leader, next, third float64
		for attempt := 1; ; attempt++ {
			before := queue()
			from := time.Now()
			time.Sleep(window)
			after := queue()
			if len(before) == 3 && slices.Equal(before, after) && r.leader() == before[0] {
				leader, next, third = rate(byID[before[0]], from), rate(byID[before[1]], from), rate(byID[before[2]], from)
				break
			}
			if attempt == 10 {
				t.Fatalf("the queue kept changing (%v, then %v): no quiet window to measure", before, after)
			}
			t.Logf("window %d: the queue changed (%v, then %v, leader %q); measuring again", attempt, before, after, r.leader())
			time.Sleep(time.Second)
		}
		t.Logf("writes/s: leader %.1f, next in line %.1f, third %.1f", leader, next, third)
		if third != 0 {
			t.Errorf("the third in line wrote %.1f/s while waiting, want 0", third)
		}
		if next == 0 || next > 2*leader+5 {
			t.Errorf("the one next in line wrote %.1f/s, want about the leader's %.1f", next, leader)
		}
	})
}

// Acks are per connection: a warm standby whose connection was reset just
// before it won does not lead at once on the old connection's chain; it
// builds one on the new connection first.
func TestWarmChainAcrossReconnectNotReused(t *testing.T) {
	const tick = time.Second // gap 525 ms: no chain can form on the new connection before the win
	zks := zktest.StartOpts(t, zktest.Options{Servers: 1, TickTime: tick})
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		o := opts{mode: m, timeout: 6 * time.Second, tick: tick, servers: zks.Addrs()}
		a := startCandidate(t, r, "a", o)
		r.waitLeader(t, "", 10*time.Second)
		// Two ways to the one server: when the connection through one
		// breaks, b moves to the other at once (no pause before a retry).
		var proxies []*netproxy.Proxy
		o.servers = nil
		for range 2 {
			p := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
			proxies = append(proxies, p)
			o.servers = append(o.servers, p.Addr())
		}
		b := startCandidate(t, r, "b", o)
		waitQueueOrLock(t, zks.Addrs(), m)
		tm := r.leaderOf(t, "a").Timing
		time.Sleep(3 * tm.Renew) // b's chain on its first connection
		sess := b.client.Current()
		oldConn := sess.Conn()
		gap := lease.Gap(tm.Session, tick)
		// Right after a renewal pair the old chain is as fresh as it gets:
		// reused, it would let b lead at once.
		// On a loaded machine an answer can come late enough that the
		// chain is not fresh after this pair: wait for a pair that is.
		for attempt := 1; ; attempt++ {
			n := len(sess.Acks())
			for len(sess.Acks()) == n {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			a := Anchor(sess.Acks(), gap)
			if !a.IsZero() && time.Since(a) <= 2*tm.Renew {
				break
			}
			if attempt == 20 {
				t.Fatalf("b keeps no fresh chain while it waits (anchor %v)", a)
			}
		}
		_, changed := sess.State()
		for _, p := range proxies {
			p.Reset()
		}
		<-changed
		deadline := time.Now().Add(10 * time.Second)
		for st, _ := sess.State(); st != zk.StateConnected; st, _ = sess.State() {
			if time.Now().After(deadline) {
				t.Fatal("b did not reconnect")
			}
			time.Sleep(time.Millisecond)
		}
		reconnected := time.Now()
		a.leave()
		if l := r.waitLeader(t, "a", 10*time.Second); l != "b" {
			t.Fatalf("leader %s, want b", l)
		}
		tb := r.lastTermOf("b")
		l := r.leaderOf(t, "b")
		conn := l.Session.Conn()
		var onConn []zk.Ack
		for _, a := range l.Session.Acks() {
			if a.Conn == conn {
				onConn = append(onConn, a)
			}
		}
		anchor := Anchor(onConn, gap)
		t.Logf("reconnected (conn %d → %d), elected %v later; chain on the new connection from %v after the reconnect",
			oldConn, conn, tb.start.Sub(reconnected).Round(time.Millisecond), anchor.Sub(reconnected).Round(time.Millisecond))
		if conn == oldConn {
			t.Fatal("the connection did not change")
		}
		if anchor.IsZero() || anchor.Before(reconnected) {
			t.Errorf("b led without a chain on its new connection (anchor %v)", anchor)
		}
		if d := tb.start.Sub(reconnected); d < gap {
			t.Errorf("b led %v after the reconnect, sooner than a chain can form", d)
		}
		r.check(t)
	})
}

// The chain proves a touch of the session, whatever znode its writes named
// and whether a check found its znode: a create, a check of a znode that
// does not exist (answered NoNode) and a check of the directory form one.
func TestAnchorIndependentOfZnode(t *testing.T) {
	// Hand-made: the acks carry no znode, so only times and connections count.
	const gap = 500 * time.Millisecond
	if got := anchorMs([]zk.Ack{ack(0, 10), ack(510, 520), ack(520, 530)}, gap); got != 0 {
		t.Errorf("anchor %d, want 0", got)
	}
	// Live: three different writes on one session.
	zks := zktest.Start(t, 1)
	s, closeSess := openSession(t, zks.Addrs(), 2*time.Second)
	defer closeSess()
	if err := s.EnsurePath(t.Context(), testDir); err != nil {
		t.Fatal(err)
	}
	before := len(s.Acks())
	if _, _, err := s.Create(t.Context(), testDir+"/probe", nil, zk.Ephemeral); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gap)
	if err := s.Multi(t.Context(), zk.CheckOp{Path: testDir + "/missing", Version: -1}); err == nil {
		t.Fatal("check of a missing znode succeeded")
	}
	if err := s.Multi(t.Context(), zk.CheckOp{Path: testDir, Version: -1}); err != nil {
		t.Fatal(err)
	}
	acks := s.Acks()[before:]
	if len(acks) != 3 {
		t.Fatalf("%d acks for a create and two checks (one answered NoNode), want 3", len(acks))
	}
	if got, want := Anchor(acks, gap), acks[0].Sent; !got.Equal(want) {
		t.Errorf("anchor %v, want the create's send time %v", got, want)
	}
}
