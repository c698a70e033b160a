package election

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// TestTimingForAnyLease checks that, whatever the configuration, the timing
// the elector derives never has a renew interval a ticker would panic on,
// keeps lease + demote budget + margin within the session timeout, and
// refuses leases that leave no tolerance.
func TestTimingForAnyLease(t *testing.T) {
	timeouts := []time.Duration{time.Nanosecond, time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond,
		2 * time.Second, 5 * time.Second, 40 * time.Second}
	values := []time.Duration{0, 1, 3, 4, 100, time.Microsecond, time.Millisecond, 99 * time.Millisecond,
		300 * time.Millisecond, time.Second, 3 * time.Second, 5 * time.Second, time.Hour}
	for _, T := range timeouts {
		for _, l := range values {
			for _, renew := range values {
				for _, tick := range []time.Duration{0, 1, T / 10, T / 2, T} {
					for _, budget := range []time.Duration{0, T / 4, 1500 * time.Millisecond} {
						e := &Elector{cfg: Config{Lease: l, RenewInterval: renew, TickTime: tick, DemoteBudget: budget}}
						name := fmt.Sprintf("T=%v lease=%v renew=%v tick=%v budget=%v", T, l, renew, tick, budget)
						tm, err := e.timing(T)
						if err != nil {
							if !errors.Is(err, ErrLeaseTooShort) {
								t.Fatalf("%s: %v", name, err)
							}
							if tm.Lease >= tm.MinLease() {
								t.Errorf("%s: refused a lease of %v >= %v", name, tm.Lease, tm.MinLease())
							}
							continue
						}
						if tm.Renew < lease.MinRenewInterval || tm.Renew < lease.Gap(T, tick) {
							t.Errorf("%s: renew interval %v below the gap %v", name, tm.Renew, lease.Gap(T, tick))
						}
						if used := tm.Lease + budget + T/20; used > T || tm.Grace() < budget {
							t.Errorf("%s: lease %v + budget + margin = %v > session timeout (grace %v)", name, tm.Lease, used, tm.Grace())
						}
						if tm.Tolerance() < lease.MinTolerance {
							t.Errorf("%s: tolerance %v", name, tm.Tolerance())
						}
						if l > 0 && l+budget+T/20 <= T && tm.Lease != l {
							t.Errorf("%s: a lease that fits was changed to %v", name, tm.Lease)
						}
						// The timer of a real leadership must not panic.
						time.NewTicker(tm.Renew).Stop()
					}
				}
			}
		}
	}
	// The default is the longest lease that fits.
	e := &Elector{cfg: Config{DemoteBudget: 1500 * time.Millisecond}}
	if tm, err := e.timing(5 * time.Second); err != nil || tm.Clamped || tm.Lease != 5*time.Second-1500*time.Millisecond-250*time.Millisecond {
		t.Errorf("default timing for 5s: %+v, %v", tm, err)
	}
}

// A validated but tiny lease (3ns) or renew interval (1ns) never panics: the
// elector refuses to lead with a lease that leaves no tolerance (and keeps running),
// and floors a tiny renew interval.
func TestTinyLeasesDoNotPanic(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	startCandidate(t, r, "tiny", opts{mode: Fair, timeout: 2 * time.Second, servers: zks.Addrs(), lease: 3, tick: zktest.TickTime})
	time.Sleep(2 * time.Second)
	if l := r.leader(); l != "" {
		t.Fatalf("%s leads with a 3ns lease", l)
	}
	startCandidate(t, r, "fast", opts{mode: Unfair, timeout: 2 * time.Second, servers: zks.Addrs(), lease: 500 * time.Millisecond, renew: 1, tick: zktest.TickTime})
	if l := r.waitLeader(t, "", 10*time.Second); l != "fast" {
		t.Fatalf("leader %s, want fast", l)
	}
	time.Sleep(time.Second) // renewing every 10ms, no panic
	// A loaded machine may starve a 500ms lease for a moment: the
	// candidate must still be running and lead again.
	if l := r.waitLeader(t, "", 10*time.Second); l != "fast" {
		t.Errorf("leader after a second: %q, want fast", l)
	}
}

// Unfair mode: the delete of the lock at the end of a term is lost (the
// lock stays, owned by our session) and at the next join the create's
// answer (NodeExists) is lost too. The elector must not adopt the old lock:
// the next leadership has a newer epoch. Fair mode faces the same faults.
func TestNoEpochReuseAfterLostDeleteAndCreateReply(t *testing.T) {
	zks := zktest.Start(t, 1)
	var loseDelete, loseCreate atomic.Bool
	hooks := &testHooks{
		leave: func(*zk.Session, string) bool { return loseDelete.CompareAndSwap(true, false) },
		afterCreate: func(_ *zk.Session, _ string, err error) error {
			if loseCreate.CompareAndSwap(true, false) {
				return fmt.Errorf("%w: injected (the server said %v)", zk.ErrConnectionLoss, err)
			}
			return nil
		},
	}
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		a := startCandidate(t, r, "a", opts{mode: m, timeout: 4 * time.Second, servers: zks.Addrs(), hooks: hooks})
		r.waitLeader(t, "", 10*time.Second)
		for i := range 3 {
			first := r.lastTerm()
			loseDelete.Store(true)
			loseCreate.Store(true)
			a.rejoin(0)
			r.waitNoLeaderOrOther(t, "a", first.epoch)
			r.waitLeader(t, "", 10*time.Second)
			next := r.lastTerm()
			t.Logf("round %d: epoch %d, then %d", i, first.epoch, next.epoch)
			if next.epoch <= first.epoch {
				t.Fatalf("round %d: leadership with epoch %d after one with %d: epoch reused", i, next.epoch, first.epoch)
			}
			if loseDelete.Load() || loseCreate.Load() {
				t.Fatalf("round %d: a fault was not injected (delete %v, create %v)", i, loseDelete.Load(), loseCreate.Load())
			}
		}
		r.check(t)
	})
}

// The lease ends leadership on time even while ZooKeeper calls hang: the
// client is cut off (bytes held, nothing closed) right when a leadership
// begins, while the elector sets up its watch, and in another round in the
// middle of a term. The lease (1s) is much shorter than the time
// go-zookeeper takes to give up on a silent connection (2/3 of the 6s
// session): a call made in the loop would hold leadership for about 4s.
func TestLeaseEndsWhileCallsHang(t *testing.T) {
	zks := zktest.Start(t, 1)
	const lease, slack = time.Second, time.Second
	for _, when := range []string{"at election", "mid-term"} {
		t.Run(when, func(t *testing.T) {
			proxy := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
			var cutAt atomic.Int64 // unix nanos of the cut
			var armed atomic.Bool
			armed.Store(when == "at election")
			hooks := &testHooks{leading: func(Leadership) {
				if armed.CompareAndSwap(true, false) {
					proxy.Blackhole(true)
					cutAt.Store(time.Now().UnixNano())
				}
			}}
			r := newReferee()
			startCandidate(t, r, "a", opts{mode: Fair, timeout: 6 * time.Second, servers: []string{proxy.Addr()}, lease: lease, tick: zktest.TickTime, hooks: hooks})
			r.waitLeader(t, "", 10*time.Second)
			r.leaderOf(t, "a")
			if when == "mid-term" {
				time.Sleep(700 * time.Millisecond)
				proxy.Blackhole(true)
				cutAt.Store(time.Now().UnixNano())
			}
			end := r.waitNoLeader(t, 10*time.Second)
			took := end.Sub(time.Unix(0, cutAt.Load()))
			tm := r.lastTerm()
			t.Logf("%s: leadership ended %v after the cut (lease %v): %v", when, took.Round(time.Millisecond), lease, tm.cause)
			if !errors.Is(tm.cause, ErrLeaseExpired) {
				t.Errorf("cause %v, want ErrLeaseExpired", tm.cause)
			}
			if took > lease+slack {
				t.Errorf("leadership ended %v after the cut, later than the lease %v + %v", took, lease, slack)
			}
			proxy.Blackhole(false)
			r.check(t)
		})
	}
}

// The watch on our znode runs off the loop: a data change keeps leadership
// (the watch is set again), a deletion ends it at once.
func TestZnodeChangeKeepsAndDeletionEndsLeadership(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		startCandidate(t, r, "a", opts{mode: m, timeout: 4 * time.Second, servers: zks.Addrs()})
		r.waitLeader(t, "", 10*time.Second)
		l := r.leaderOf(t, "a")
		s, closeSess := openSession(t, zks.Addrs(), 4*time.Second)
		defer closeSess()
		for range 3 {
			if _, err := s.Set(t.Context(), l.Path, []byte(`{"node_id":"a"}`), -1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		if cur, ok := r.current("a"); !ok || cur.Epoch != l.Epoch {
			t.Fatalf("data changes ended the leadership (leads %v): %+v", ok, cur)
		}
		deleted := time.Now()
		if err := s.Delete(t.Context(), l.Path, -1); err != nil {
			t.Fatal(err)
		}
		end := r.waitNoLeader(t, 5*time.Second)
		tm := r.lastTerm()
		t.Logf("leadership ended %v after its znode was deleted: %v", end.Sub(deleted).Round(time.Millisecond), tm.cause)
		if !errors.Is(tm.cause, ErrNodeDeleted) {
			t.Errorf("cause %v, want ErrNodeDeleted", tm.cause)
		}
		if d := end.Sub(deleted); d > 3*time.Second {
			t.Errorf("leadership ended %v after the deletion", d)
		}
		r.check(t)
	})
}

// A candidate whose lease cannot fit the session timeout ZooKeeper granted
// and its demote budget stays out of the election altogether (it never
// creates a znode, so it can never win and then refuse), and says why;
// one whose budget fits leads.
func TestBudgetThatCannotFitStaysOutBeforeCampaigning(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	// 2s - 1.7s - 100ms leaves 200ms, below 2 × 105ms + 100ms.
	k := startCandidate(t, r, "big", opts{mode: Fair, timeout: 2 * time.Second, servers: zks.Addrs(), tick: zktest.TickTime, budget: 1700 * time.Millisecond})
	deadline := time.Now().Add(10 * time.Second)
	for k.el.Refusal() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := k.el.Refusal(); !errors.Is(err, ErrLeaseTooShort) {
		t.Fatalf("refusal %v, want ErrLeaseTooShort", err)
	}
	t.Logf("refusal: %v", k.el.Refusal())
	time.Sleep(time.Second)
	if q := queue(t, zks.Addrs()); len(q) != 0 {
		t.Errorf("the refused candidate joined the election: %v", q)
	}
	if l := r.leader(); l != "" {
		t.Errorf("%s leads", l)
	}
	startCandidate(t, r, "fits", opts{mode: Fair, timeout: 2 * time.Second, servers: zks.Addrs(), tick: zktest.TickTime, budget: 1100 * time.Millisecond})
	if l := r.waitLeader(t, "", 10*time.Second); l != "fits" {
		t.Fatalf("leader %q, want fits", l)
	}
	if la := r.leaderOf(t, "fits"); la.Lease != 800*time.Millisecond || la.Grace < 1100*time.Millisecond {
		t.Errorf("lease %v grace %v, want 800ms and at least the 1.1s budget", la.Lease, la.Grace)
	}
}

func queue(t *testing.T, servers []string) []string {
	t.Helper()
	s, closeSess := openSession(t, servers, 2*time.Second)
	defer closeSess()
	kids, err := s.Children(t.Context(), "/failoverd/test/election")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return kids
}
