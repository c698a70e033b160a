package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// term is one leadership as its callback saw it.
type term struct {
	id         string
	epoch      int64
	start, end time.Time
	cause      error
	// anchor is the lease's anchor when the callback began (deadline - Lease).
	anchor time.Time
}

// referee watches every candidate of a test from one clock and records any
// moment when two callbacks believed they led at once.
type referee struct {
	mu       sync.Mutex
	active   map[string]bool
	terms    []term
	overlaps []string
	changed  chan struct{}
	// leaderships holds the Leadership of every active callback.
	leaderships map[string]Leadership
	// forced is set by tests that expire a session on the server by force:
	// that is instantaneous, so a successor may win before the old leader
	// can know (fencing's job); those tests check the old leader stops.
	forced bool
}

func newReferee() *referee {
	return &referee{active: map[string]bool{}, leaderships: map[string]Leadership{}, changed: make(chan struct{})}
}

func (r *referee) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *referee) callback(id string) func(ctx context.Context, l Leadership) {
	return func(ctx context.Context, l Leadership) {
		r.mu.Lock()
		for other := range r.active {
			r.overlaps = append(r.overlaps, fmt.Sprintf("%s elected (epoch %d) while %s still led", id, l.Epoch, other))
		}
		r.active[id] = true
		r.leaderships[id] = l
		now := time.Now()
		r.terms = append(r.terms, term{id: id, epoch: l.Epoch, start: now, anchor: now.Add(l.LeaseRemaining() - l.Lease)})
		i := len(r.terms) - 1
		r.notify()
		r.mu.Unlock()

		<-ctx.Done()

		r.mu.Lock()
		delete(r.active, id)
		delete(r.leaderships, id)
		r.terms[i].end = time.Now()
		r.terms[i].cause = context.Cause(ctx)
		r.notify()
		r.mu.Unlock()
	}
}

// leader returns the one active leader, or "".
func (r *referee) leader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.active {
		return id
	}
	return ""
}

// waitLeader waits until someone other than not leads and returns it.
func (r *referee) waitLeader(t *testing.T, not string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		ch := r.changed
		var got string
		for id := range r.active {
			if id != not {
				got = id
			}
		}
		r.mu.Unlock()
		if got != "" {
			return got
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no leader (other than %q) after %v", not, timeout)
		}
	}
}

func (r *referee) waitNoLeader(t *testing.T, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		ch := r.changed
		n := len(r.active)
		r.mu.Unlock()
		if n == 0 {
			return time.Now()
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("leadership not revoked after %v", timeout)
		}
	}
}

func (r *referee) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		if t.Failed() {
			for _, tm := range r.terms {
				t.Logf("term %s epoch %d %s..%s cause %v", tm.id, tm.epoch, tm.start.Format("15:04:05.000"), tm.end.Format("15:04:05.000"), tm.cause)
			}
		}
	}()
	for _, o := range r.overlaps {
		if r.forced {
			t.Log("expected after a forced expiry: " + o)
			continue
		}
		t.Error("split brain: " + o)
	}
	for i := 1; i < len(r.terms); i++ {
		if r.terms[i].epoch <= r.terms[i-1].epoch {
			t.Errorf("epoch did not increase: term %d (%s) epoch %d after term %d (%s) epoch %d",
				i, r.terms[i].id, r.terms[i].epoch, i-1, r.terms[i-1].id, r.terms[i-1].epoch)
		}
	}
}

// current returns the Leadership of candidate id's running callback; false
// when id does not lead.
func (r *referee) current(id string) (Leadership, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.leaderships[id]
	return l, ok
}

// leaderOf returns the current Leadership of candidate id's elector, which
// must lead.
func (r *referee) leaderOf(t *testing.T, id string) Leadership {
	t.Helper()
	l, ok := r.current(id)
	if !ok {
		t.Fatalf("%s does not lead", id)
	}
	return l
}

// lastTermOf returns id's newest term (zero if none).
func (r *referee) lastTermOf(id string) term {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.terms) - 1; i >= 0; i-- {
		if r.terms[i].id == id {
			return r.terms[i]
		}
	}
	return term{}
}

func (r *referee) lastTerm() term {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.terms[len(r.terms)-1]
}

type cand struct {
	id     string
	client *zk.Client
	el     *Elector
	cb     func(ctx context.Context, l Leadership)

	mu      sync.Mutex
	stopped bool               // by stop: rejoin starts no Run any more
	cancel  context.CancelFunc // ends the current Run
	done    chan struct{}      // closed when the current Run returned
}

type opts struct {
	mode    Mode
	timeout time.Duration
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	servers []string
	lease   time.Duration
	renew   time.Duration
	tick    time.Duration // the ensemble's tickTime; 0: unknown
	budget  time.Duration // demote budget
	cold    bool          // Config.WarmStandby false (the tests run warm, as the daemon does by default)
	hooks   *testHooks    // the elector's failpoints (nil: none)
	// takeover: Config.TakeOverAtDeadline.
	takeover bool
	// fenceFirst: Config.FenceFirst.
	fenceFirst cluster.FenceFirst
}

// testLogger logs to stderr when ELECTION_TEST_LOG is set.
func testLogger(id string) *slog.Logger {
	if os.Getenv("ELECTION_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
}

func startCandidate(t *testing.T, r *referee, id string, o opts) *cand {
	t.Helper()
	c, err := zk.NewClient(zk.Config{Servers: o.servers, SessionTimeout: o.timeout}, zk.Deps{Dial: o.dial})
	if err != nil {
		t.Fatal(err)
	}
	el, err := New(Config{Dir: "/failoverd/test/election", NodeID: id, Mode: o.mode, Lease: o.lease, RenewInterval: o.renew,
		TickTime: o.tick, DemoteBudget: o.budget, WarmStandby: !o.cold, TakeOverAtDeadline: o.takeover, FenceFirst: o.fenceFirst, testHooks: o.hooks}, Deps{Client: c, Logger: testLogger(id)})
	if err != nil {
		t.Fatal(err)
	}
	k := &cand{id: id, client: c, el: el, cb: r.callback(id)}
	k.run()
	t.Cleanup(k.stop)
	return k
}

// run starts k's Run with a context of its own; the caller holds k.mu or
// is the only one to use k.
func (k *cand) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	k.cancel, k.done = cancel, done
	go func() {
		defer close(done)
		k.el.Run(ctx, k.cb)
	}()
}

// leave ends k's leadership or candidacy as the daemon does, by cancelling
// Run's context, and returns once Run returned: k has left the election
// (its znode deleted) and stays out. Its client and session live on.
func (k *cand) leave() {
	k.mu.Lock()
	cancel, done := k.cancel, k.done
	k.mu.Unlock()
	cancel()
	<-done
}

// rejoin has k leave, then starts Run again on the same elector after d,
// in the background.
func (k *cand) rejoin(d time.Duration) {
	k.leave()
	time.AfterFunc(d, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if !k.stopped {
			k.run()
		}
	})
}

func (k *cand) stop() {
	k.mu.Lock()
	k.stopped = true
	k.mu.Unlock()
	k.leave()
	k.client.Close()
}

// startCandidates starts n0, n1, ... and returns them by id.
func startCandidates(t *testing.T, r *referee, n int, o opts) map[string]*cand {
	t.Helper()
	cands := map[string]*cand{}
	for i := range n {
		id := fmt.Sprintf("n%d", i)
		cands[id] = startCandidate(t, r, id, o)
	}
	return cands
}

func modes(t *testing.T, f func(t *testing.T, m Mode)) {
	for _, m := range []Mode{Fair, Unfair} {
		t.Run(m.String(), func(t *testing.T) { f(t, m) })
	}
}

func TestExactlyOneLeaderAcrossHandovers(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		cands := startCandidates(t, r, 5, opts{mode: m, timeout: 2 * time.Second, servers: zks.Addrs()})
		prev := ""
		for range 6 {
			l := r.waitLeader(t, prev, 10*time.Second)
			cands[l].rejoin(time.Second)
			prev = l
		}
		// Stopping the leader for good, its client closed, hands over too.
		l := r.waitLeader(t, prev, 10*time.Second)
		cands[l].stop()
		r.waitLeader(t, l, 10*time.Second)
		r.check(t)
	})
}

// One change wakes exactly one candidate, the one that moved up, and with
// warm standbys also the one behind it (the new leader's first renewal
// tells it that it is next in line now).
func TestFairModeIsFIFOAndHerdFree(t *testing.T) {
	zks := zktest.Start(t, 1)
	for _, warm := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(t *testing.T) {
			fifoHerdFree(t, zks, warm)
		})
	}
}

func fifoHerdFree(t *testing.T, zks *zktest.Cluster, warm bool) {
	r := newReferee()
	const n = 50
	var cands []*cand
	for i := range n {
		o := opts{mode: Fair, timeout: 4 * time.Second, servers: zks.Addrs(), cold: true}
		if warm {
			// The announce comes with the first renewal, within a renew
			// interval (105 ms) of the win.
			o.cold, o.tick = false, zktest.TickTime
		}
		k := startCandidate(t, r, fmt.Sprintf("n%02d", i), o)
		cands = append(cands, k)
		waitQueueLen(t, zks.Addrs(), i+1)
	}
	if l := r.waitLeader(t, "", 10*time.Second); l != "n00" {
		t.Fatalf("first leader = %s, want n00 (the first to join)", l)
	}
	time.Sleep(500 * time.Millisecond) // the first leader's announce has come and gone
	for round := 0; round < 3; round++ {
		leader := cands[round]
		before := make([]int64, n)
		for i, k := range cands {
			before[i] = k.client.WatchEvents()
		}
		leader.leave()
		next := r.waitLeader(t, leader.id, 10*time.Second)
		if want := cands[round+1].id; next != want {
			t.Fatalf("round %d: leader %s, want %s (FIFO)", round, next, want)
		}
		time.Sleep(500 * time.Millisecond) // let any stray notification arrive
		moved := map[string]bool{next: true}
		if warm {
			moved[cands[round+2].id] = true
		}
		woken := 0
		for i, k := range cands {
			if k == leader {
				continue
			}
			d := k.client.WatchEvents() - before[i]
			if d > 0 {
				woken++
				if !moved[k.id] {
					t.Errorf("round %d: %s got %d watch events though it did not move up", round, k.id, d)
				}
			}
		}
		if woken != len(moved) {
			t.Errorf("round %d: %d candidates woken by one change, want exactly %d", round, woken, len(moved))
		}
	}
	r.check(t)
}

// openSession connects a client of its own, with the given session
// timeout, to servers and waits for its session. The caller calls the
// returned func (it closes the client) when done with the session.
func openSession(t *testing.T, servers []string, timeout time.Duration) (*zk.Session, func()) {
	t.Helper()
	c, err := zk.NewClient(zk.Config{Servers: servers, SessionTimeout: timeout}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Session(t.Context())
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	return s, c.Close
}

func waitQueueLen(t *testing.T, servers []string, n int) {
	t.Helper()
	s, closeSess := openSession(t, servers, 2*time.Second)
	defer closeSess()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		q, _ := Queue(t.Context(), s, "/failoverd/test/election")
		if len(q) >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("queue never reached %d", n)
}

func TestEpochsStrictlyIncreaseOver100Changes(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		cands := startCandidates(t, r, 3, opts{mode: m, timeout: 2 * time.Second, servers: zks.Addrs()})
		prevEpoch := int64(0)
		for i := 0; i < 100; i++ {
			l := r.waitLeader(t, "", 10*time.Second)
			tm := r.lastTerm()
			if tm.epoch <= prevEpoch {
				t.Fatalf("change %d: epoch %d not above %d", i, tm.epoch, prevEpoch)
			}
			prevEpoch = tm.epoch
			cands[l].rejoin(0)
			r.waitNoLeaderOrOther(t, l, tm.epoch)
		}
		r.check(t)
	})
}

// waitNoLeaderOrOther waits until the term with epoch has ended.
func (r *referee) waitNoLeaderOrOther(t *testing.T, id string, epoch int64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		ch := r.changed
		last := r.terms[len(r.terms)-1]
		r.mu.Unlock()
		if last.epoch != epoch || !last.end.IsZero() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("term %d of %s did not end", epoch, id)
		}
	}
}

// A leader cut off from ZooKeeper (a partition: nothing answers, nothing
// closes) gives up leadership within the lease, before the server expires its
// session and lets anyone else win.
func TestPartitionedLeaderStepsDownBeforeSuccessorWins(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		proxy := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
		const timeout = 1500 * time.Millisecond
		a := startCandidate(t, r, "a", opts{mode: m, timeout: timeout, servers: []string{proxy.Addr()}})
		if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
			t.Fatalf("leader %s, want a", l)
		}
		b := startCandidate(t, r, "b", opts{mode: m, timeout: timeout, servers: zks.Addrs()})
		_ = b
		waitQueueOrLock(t, zks.Addrs(), m)

		cut := time.Now()
		proxy.Blackhole(true)
		revoked := r.waitNoLeader(t, 3*timeout)
		if got := context.Cause(ctxOf(r, "a")); !errors.Is(got, ErrLeaseExpired) {
			t.Errorf("cause = %v, want ErrLeaseExpired", got)
		}
		if d := revoked.Sub(cut); d > timeout {
			t.Errorf("revoked %v after the partition, later than the session timeout %v", d, timeout)
		}
		if l := r.waitLeader(t, "a", 10*timeout); l != "b" {
			t.Fatalf("successor %s, want b", l)
		}
		proxy.Blackhole(false)
		// a's session is gone; it rejoins as a standby with a new znode and
		// must not disturb b. (b's own lease may end on a starved machine,
		// 0.6 s without an answered renewal with this 1.5 s session; then
		// another term follows, which is not what this test is about.)
		waitQueueLenAtLeast(t, zks.Addrs(), m, 2)
		if l := r.leader(); l != "b" {
			if bt := r.lastTermOf("b"); !bt.end.IsZero() && errors.Is(bt.cause, ErrLeaseExpired) {
				t.Logf("b's own lease ended (%v after it began): %v", bt.end.Sub(bt.start), bt.cause)
			} else {
				t.Errorf("after heal leader = %q, want b (b's last term: %+v)", l, bt)
			}
		}
		_ = a
		r.check(t)
	})
}

// ctxOf fakes a context carrying the cause of id's last term, for errors.Is.
func ctxOf(r *referee, id string) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.terms) - 1; i >= 0; i-- {
		if r.terms[i].id == id {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(r.terms[i].cause)
			return ctx
		}
	}
	return context.Background()
}

func waitQueueOrLock(t *testing.T, servers []string, m Mode) {
	t.Helper()
	if m == Fair {
		waitQueueLen(t, servers, 2)
		return
	}
	time.Sleep(200 * time.Millisecond) // unfair: b watches the lock
}

func waitQueueLenAtLeast(t *testing.T, servers []string, m Mode, n int) {
	t.Helper()
	if m == Fair {
		waitQueueLen(t, servers, n)
		return
	}
	time.Sleep(500 * time.Millisecond)
}

func TestServerSideExpiryEndsLeadership(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		r.forced = true
		a := startCandidate(t, r, "a", opts{mode: m, timeout: 4 * time.Second, servers: zks.Addrs()})
		r.waitLeader(t, "", 10*time.Second)
		startCandidate(t, r, "b", opts{mode: m, timeout: 4 * time.Second, servers: zks.Addrs()})
		waitQueueOrLock(t, zks.Addrs(), m)
		l := r.leaderOf(t, "a")
		if err := zktest.Expire(zks.Servers[0].Addr(), l.Session.ID(), l.Session.Password()); err != nil {
			t.Fatal(err)
		}
		// A forced expiry is instantaneous on the server, so b may win before
		// a hears of it; what matters is that a stops promptly and for good.
		r.waitLeader(t, "a", 10*time.Second)
		deadline := time.Now().Add(10 * time.Second)
		for _, leads := r.current("a"); leads && time.Now().Before(deadline); _, leads = r.current("a") {
			time.Sleep(10 * time.Millisecond)
		}
		if _, leads := r.current("a"); leads {
			t.Fatal("a still leads after its session expired")
		}
		if err := l.Valid(); !errors.Is(err, ErrSessionExpired) {
			t.Errorf("Valid() = %v, want ErrSessionExpired", err)
		}
		// The expired leader cannot do leader-only writes any more, neither on
		// its dead session nor guarded by its old znode from a new session.
		err := l.Session.Multi(context.Background(), zk.CheckOp{Path: l.Path, Version: -1},
			zk.CreateOp{Path: "/failoverd/test/breadcrumb-probe", Data: []byte("x")})
		if !errors.Is(err, zk.ErrSessionExpired) {
			t.Errorf("write on the expired session = %v, want ErrSessionExpired", err)
		}
		s2, err := a.client.Session(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		err = s2.Multi(t.Context(), zk.CheckOp{Path: l.Path, Version: -1},
			zk.CreateOp{Path: "/failoverd/test/breadcrumb-probe", Data: []byte("x")})
		if m == Fair && !errors.Is(err, zk.ErrNoNode) {
			t.Errorf("write guarded by the expired znode = %v, want ErrNoNode", err)
		}
		if m == Unfair && err != nil {
			// Unfair: b now owns "lock"; a's guard must check ownership
			// (the dead session refuses, which is what breadcrumb relies on).
			t.Logf("unfair guarded write from a new session: %v", err)
		}
		s2.Delete(t.Context(), "/failoverd/test/breadcrumb-probe", -1)
		r.check(t)
	})
}

func TestStandaloneServerRestart(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		for _, id := range []string{"a", "b", "c"} {
			startCandidate(t, r, id, opts{mode: m, timeout: 3 * time.Second, servers: zks.Addrs()})
		}
		first := r.waitLeader(t, "", 10*time.Second)
		zks.Stop(0)
		r.waitNoLeader(t, 10*time.Second)
		zks.Restart(0)
		l := r.waitLeader(t, "", 30*time.Second)
		t.Logf("leader before restart %s, after %s", first, l)
		time.Sleep(4 * time.Second) // old sessions expire; still one leader
		if r.leader() == "" {
			r.waitLeader(t, "", 20*time.Second)
		}
		r.check(t)
	})
}

func TestEnsembleMemberDeath(t *testing.T) {
	zks := zktest.Start(t, 3)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		cands := map[string]*cand{}
		for _, id := range []string{"a", "b", "c"} {
			cands[id] = startCandidate(t, r, id, opts{mode: m, timeout: 4 * time.Second, servers: zks.Addrs()})
		}
		r.waitLeader(t, "", 20*time.Second)
		// Kill a follower, then the ZooKeeper leader; each time the cluster
		// must keep or regain exactly one failoverd leader.
		victims := []int{(zks.Leader() + 1) % 3}
		for _, v := range victims {
			zks.Stop(v)
		}
		time.Sleep(time.Second)
		r.waitLeader(t, "", 30*time.Second)
		zks.Restart(victims[0])
		zkLeader := zks.Leader()
		zks.Stop(zkLeader)
		time.Sleep(2 * time.Second)
		l := r.waitLeader(t, "", 30*time.Second)
		cands[l].rejoin(time.Second) // and a handover still works on two servers
		r.waitLeader(t, l, 30*time.Second)
		zks.Restart(zkLeader)
		r.check(t)
	})
}

func TestLeaseRevokesWhenAllServersStop(t *testing.T) {
	zks := zktest.Start(t, 3)
	r := newReferee()
	const timeout = 2 * time.Second
	for _, id := range []string{"a", "b"} {
		startCandidate(t, r, id, opts{mode: Fair, timeout: timeout, servers: zks.Addrs()})
	}
	leader := r.waitLeader(t, "", 20*time.Second)
	time.Sleep(300 * time.Millisecond)
	stopped := time.Now()
	zks.StopAll()
	revoked := r.waitNoLeader(t, 3*timeout)
	d := revoked.Sub(stopped)
	lease := timeout * 2 / 3
	t.Logf("leader %s revoked %v after all servers stopped (lease %v, session %v)", leader, d, lease, timeout)
	if d >= timeout {
		t.Errorf("revoked after %v, not before the session timeout %v", d, timeout)
	}
	if d <= 0 {
		t.Errorf("revoked before the servers stopped")
	}
	// Nobody leads while ZooKeeper is down.
	time.Sleep(timeout)
	if l := r.leader(); l != "" {
		t.Errorf("%s leads with all zookeeper servers down", l)
	}
	zks.StartAll()
	r.waitLeader(t, "", 60*time.Second)
	r.check(t)
}

func TestLostCreateResponse(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		var once sync.Once
		hooks := &testHooks{afterCreate: func(sess *zk.Session, p string, cerr error) error {
			var err error
			if cerr == nil {
				once.Do(func() { err = fmt.Errorf("%w: injected", zk.ErrConnectionLoss) })
			}
			return err
		}}

		r := newReferee()
		// An orphan of an earlier session of this elector sits in the queue.
		old, closeOld := openSession(t, zks.Addrs(), 10*time.Second)
		defer closeOld()
		a := startCandidate(t, r, "a", opts{mode: m, timeout: 2 * time.Second, servers: zks.Addrs(), hooks: hooks})
		dir := "/failoverd/test/election"
		if err := old.EnsurePath(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
		_ = a
		r.waitLeader(t, "", 10*time.Second)
		// Now the orphan: created by another session but carrying a's GUID.
		a.rejoin(1500 * time.Millisecond)
		r.waitNoLeader(t, 5*time.Second)
		orphanName := dir + "/c_" + a.el.guid + "-n_"
		if m == Unfair {
			orphanName = dir + "/" + lockName
		}
		mode := zk.EphemeralSequential
		if m == Unfair {
			mode = zk.Ephemeral
		}
		_, _, err := old.Create(t.Context(), orphanName, a.el.data(""), mode)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
		r.waitLeader(t, "", 10*time.Second)

		kids, err := old.Children(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		mine := 0
		for _, k := range kids {
			b, st, err := old.Get(t.Context(), dir+"/"+k)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(k, a.el.guid) || strings.Contains(string(b), a.el.guid) {
				mine++
				if st.EphemeralOwner == old.ID() {
					t.Errorf("orphan %s of the earlier session survived", k)
				}
			}
		}
		if mine != 1 {
			t.Errorf("%d znodes carry a's GUID, want exactly 1 (no duplicate, no orphan): %v", mine, kids)
		}
		r.check(t)
	})
}

// A blip shorter than the lease keeps leadership: no revocation, same term.
func TestShortBlipKeepsLeadership(t *testing.T) {
	zks := zktest.Start(t, 1)
	modes(t, func(t *testing.T, m Mode) {
		r := newReferee()
		proxy := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
		startCandidate(t, r, "a", opts{mode: m, timeout: 3 * time.Second, servers: []string{proxy.Addr()}})
		if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
			t.Fatalf("leader %s, want a", l)
		}
		startCandidate(t, r, "b", opts{mode: m, timeout: 3 * time.Second, servers: zks.Addrs()})
		first := r.lastTerm()
		for range 3 {
			proxy.Blackhole(true)
			time.Sleep(500 * time.Millisecond) // lease is 2s, renewals every 500ms
			proxy.Blackhole(false)
			time.Sleep(time.Second)
		}
		if l, ok := r.current("a"); !ok || l.Epoch != first.epoch {
			t.Fatalf("leadership not kept through short blips (leads %v): %+v", ok, l)
		}
		if last := r.lastTerm(); last.epoch != first.epoch || !last.end.IsZero() {
			t.Errorf("term changed or ended: %+v", last)
		}
		r.check(t)
	})
}
