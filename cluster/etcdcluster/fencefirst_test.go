package etcdcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// costWindow is how long HeartbeatCost counts the election's writes of an
// idle cluster (-args -cost-window=10s for the figures in the package doc).
var costWindow = flag.Duration("cost-window", 3*time.Second, "how long the heartbeat cost test counts writes")

// Fencing first, then taking over: the tests share one etcd member, each
// in a layout of its own.
func TestFenceFirst(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	adm := admin(t, c)
	for _, tc := range []struct {
		name string
		test func(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client)
	}{
		{"Config", testFenceFirstConfig},
		{"ProvedOut", testProvedOut},
		{"ThirdInLine", testThirdInLine},
		{"ProvedOutOnRetry", testProvedOutOnRetry},
		{"MovedWhileFenced", testMovedWhileFenced},
		{"HeartbeatMoves", testHeartbeatMoves},
		{"ProveOutFails", testProveOutFails},
		{"EndTerm", testEndTerm},
		{"NoHeartbeatNoSuspect", testNoHeartbeatNoSuspect},
		{"HeartbeatCost", testHeartbeatCost},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, c, adm) })
	}
}

// prover is a ProveOut that records its calls and answers err, or, for
// the first refuse calls, errNotProved; then runs before it answers.
type prover struct {
	mu     sync.Mutex
	calls  []cluster.Suspect
	err    error
	refuse int
	then   func(s cluster.Suspect)
}

var errNotProved = errors.New("the probe still reaches the leader")

func (p *prover) prove(ctx context.Context, s cluster.Suspect) error {
	p.mu.Lock()
	p.calls = append(p.calls, s)
	n, err, then := len(p.calls), p.err, p.then
	p.mu.Unlock()
	if then != nil {
		then(s)
	}
	if n <= p.refuse {
		return errNotProved
	}
	return err
}

func (p *prover) called() []cluster.Suspect {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]cluster.Suspect(nil), p.calls...)
}

// fenceFirst is an elector configuration of node id with fencing first.
func fenceFirst(id string, p *prover, suspectAfter time.Duration, hooks *electorHooks) ElectorConfig {
	return ElectorConfig{NodeID: id, Mode: Fair, DemoteBudget: 500 * time.Millisecond, hooks: hooks,
		FenceFirst: cluster.FenceFirst{SuspectAfter: suspectAfter, ProveOut: p.prove}}
}

// nodeOn is node id in layout l on client cli, its lease timing cfg.
func nodeOn(t *testing.T, cli *clientv3.Client, l cluster.Layout, id string, cfg ConnConfig) *node {
	t.Helper()
	cfg.Logger = testLogger(id)
	conn, err := NewConn(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	s, err := New(Config{Layout: l, NodeID: id, Instance: "inst-" + id}, Deps{Conn: conn, Logger: testLogger(id)})
	if err != nil {
		t.Fatal(err)
	}
	return &node{id: id, cli: cli, conn: conn, s: s}
}

// dialed is a client of endpoints, closed when the test ends.
func dialed(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := Dial(DialConfig{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// queued waits until n candidates are in l's election.
func queued(t *testing.T, adm *clientv3.Client, l cluster.Layout, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, "the queue", func() bool {
		q, err := (&Store{cli: adm, layout: l}).queue(ctxT(t))
		return err == nil && len(q) == n
	})
}

// keyOf reads key with adm (nil: gone).
func keyOf(t *testing.T, adm *clientv3.Client, key string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := adm.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// leaseGone reports whether etcd no longer has lease id.
func leaseGone(t *testing.T, adm *clientv3.Client, id int64) bool {
	t.Helper()
	resp, err := adm.TimeToLive(ctxT(t), clientv3.LeaseID(id))
	if err != nil {
		t.Fatal(err)
	}
	return resp.TTL == -1
}

// The elector refuses fencing first in unfair mode and without a
// SuspectAfter.
func testFenceFirstConfig(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	a := newNode(t, c.Endpoints(), newLayout(), "a")
	p := &prover{}
	cfg := fenceFirst("a", p, time.Second, nil)
	cfg.Mode = Unfair
	if _, err := a.s.Elector(cfg); err == nil || !strings.Contains(err.Error(), "fair") {
		t.Errorf("an unfair elector with fencing first: %v; want a refusal naming the fair mode", err)
	}
	if _, err := a.s.Elector(fenceFirst("a", p, 0, nil)); err == nil {
		t.Error("fencing first without SuspectAfter was accepted")
	}
	if _, err := a.s.Elector(fenceFirst("a", p, time.Second, nil)); err != nil {
		t.Errorf("a fair elector with fencing first: %v", err)
	}
}

// A leader cut off from etcd stops renewing, and so its heartbeat stands
// still: the candidate next in line asks ProveOut once, ends the term and
// wins long before the leader's 10s lease could expire, at a greater
// epoch; the ended term's lease is revoked and its guarded writes fail.
func testProvedOut(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	proxy, cli := proxiedClient(t, c)
	const ttl = 10 * time.Second
	a := nodeOn(t, cli, l, "a", ConnConfig{LeaseTTL: ttl, RenewInterval: 250 * time.Millisecond})
	pa, pb := &prover{}, &prover{}
	cha, _ := a.campaignWith(t, fenceFirst("a", pa, time.Second, nil))
	wa := next(t, cha)
	b := newNode(t, c.Endpoints(), l, "b")
	chb, _ := b.campaignWith(t, fenceFirst("b", pb, time.Second, nil))
	queued(t, adm, l, 2)
	time.Sleep(1500 * time.Millisecond) // heartbeats move: nobody is suspected
	if n := len(pb.called()); n != 0 {
		t.Fatalf("ProveOut called %d times while the leader's heartbeat moved", n)
	}
	lease := int64(wa.t.sess.ID)
	proxy.Blackhole(true)
	cut := time.Now()
	defer proxy.Blackhole(false)
	wb := next(t, chb)
	took := wb.at.Sub(cut)
	t.Logf("b won %v after a was cut off (a's lease: %v)", took.Round(time.Millisecond), ttl)
	if took > ttl/2 {
		t.Errorf("b won %v after the cut; want well before a's lease of %v could expire", took, ttl)
	}
	if wb.t.Epoch() <= wa.t.Epoch() {
		t.Errorf("b's epoch %d is not above a's %d", wb.t.Epoch(), wa.t.Epoch())
	}
	calls := pb.called()
	if len(calls) != 1 {
		t.Fatalf("ProveOut called %d times; want once", len(calls))
	}
	s := calls[0]
	want := cluster.Entry{Key: wa.t.key, Owner: lease, Created: wa.t.Epoch()}
	if s.Beat.NodeID != "a" || s.Beat.Entry != want || s.Beat.Version < wa.t.Epoch() || s.Stood < 1250*time.Millisecond {
		t.Errorf("ProveOut got %+v; want node a, entry %v, a version of it, stood at least the renew interval and SuspectAfter (1.25s)", s, want)
	}
	if len(pa.called()) != 0 {
		t.Errorf("the leader called ProveOut")
	}
	if !leaseGone(t, adm, lease) {
		t.Errorf("a's lease %x lives on after its term was ended", lease)
	}
	// Every guarded write of a's term fails (on b's live client: a's is
	// cut off).
	old := b.s.NewTerm(&term{s: b.s, sess: b.session(t), key: wa.t.key, epoch: wa.t.Epoch(), nodeID: "a"})
	err := old.WriteLeaderPosition(ctxT(t), cluster.LeaderPosition{NodeID: "a", Epoch: wa.t.Epoch(), Position: 1})
	if !errors.Is(err, cluster.ErrEntryDeleted) {
		t.Errorf("a guarded write of a's ended term: %v; want ErrEntryDeleted", err)
	}
}

// A ProveOut that did not prove the leader out at first is asked again
// while the heartbeat stands (a leader cut off from etcd answers a probe
// that it is connected until its own renewals failed): the second ask
// proves it out, and the successor wins long before the lease expires.
func testProvedOutOnRetry(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	proxy, cli := proxiedClient(t, c)
	const ttl = 10 * time.Second
	a := nodeOn(t, cli, l, "a", ConnConfig{LeaseTTL: ttl, RenewInterval: 250 * time.Millisecond})
	cha, _ := a.campaignWith(t, fenceFirst("a", &prover{}, 500*time.Millisecond, nil))
	wa := next(t, cha)
	pb := &prover{refuse: 1}
	chb, _ := newNode(t, c.Endpoints(), l, "b").campaignWith(t, fenceFirst("b", pb, 500*time.Millisecond, nil))
	queued(t, adm, l, 2)
	proxy.Blackhole(true)
	cut := time.Now()
	defer proxy.Blackhole(false)
	wb := next(t, chb)
	took := wb.at.Sub(cut)
	calls := pb.called()
	t.Logf("b won %v after a was cut off (a's lease: %v); ProveOut asked %d times", took.Round(time.Millisecond), ttl, len(calls))
	if took > ttl/2 {
		t.Errorf("b won %v after the cut; want well before a's lease of %v could expire", took, ttl)
	}
	if len(calls) != 2 || calls[0].Beat != calls[1].Beat || calls[1].Stood-calls[0].Stood < 450*time.Millisecond {
		t.Errorf("ProveOut calls %+v; want two about one heartbeat, at least 500ms apart", calls)
	}
	if wb.t.Epoch() <= wa.t.Epoch() {
		t.Errorf("b's epoch %d is not above a's %d", wb.t.Epoch(), wa.t.Epoch())
	}
}

// A heartbeat that moves while ProveOut runs keeps the term: a's
// heartbeats stop while its lease is renewed; b suspects a, and its
// ProveOut lets a's heartbeats go on and returns nil once one moved;
// EndTerm refuses, a's term goes on, b does not win, and b does not
// suspect a again while the heartbeat moves.
func testMovedWhileFenced(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	var frozen atomic.Bool
	hooks := &electorHooks{beat: func() bool { return !frozen.Load() }}
	a := nodeOn(t, dialed(t, c.Endpoints()), l, "a", ConnConfig{LeaseTTL: testTTL, RenewInterval: 250 * time.Millisecond})
	cha, _ := a.campaignWith(t, fenceFirst("a", &prover{}, 500*time.Millisecond, hooks))
	wa := next(t, cha)
	pb := &prover{then: func(s cluster.Suspect) { // in the elector's goroutine: no t.Fatal
		frozen.Store(false)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if resp, err := adm.Get(t.Context(), s.Beat.Entry.Key); err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].ModRevision > s.Beat.Version {
				return
			}
		}
	}}
	chb, _ := newNode(t, c.Endpoints(), l, "b").campaignWith(t, fenceFirst("b", pb, 500*time.Millisecond, nil))
	queued(t, adm, l, 2)
	frozen.Store(true)
	waitFor(t, 10*time.Second, "b's suspicion", func() bool { return len(pb.called()) > 0 })
	none(t, chb, 3*time.Second, "after the heartbeat moved while ProveOut ran")
	if calls := pb.called(); len(calls) != 1 {
		t.Errorf("ProveOut calls %+v; want one (the heartbeat moves since)", calls)
	}
	if _, err := wa.t.Expiry(); err != nil || wa.ctx.Err() != nil {
		t.Errorf("a's term ended: %v, %v", err, context.Cause(wa.ctx))
	}
}

// The candidate behind the one next in line times its predecessor once
// that one leads: a is cut off and proved out by b, which wins; then b is
// cut off, and c proves it out and wins long before b's lease could
// expire.
func testThirdInLine(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	const ttl = 10 * time.Second
	var proxies []*etcdtest.DelayProxy
	var terms []<-chan *won
	provers := map[string]*prover{}
	for _, id := range []string{"a", "b"} {
		proxy, cli := proxiedClient(t, c)
		n := nodeOn(t, cli, l, id, ConnConfig{LeaseTTL: ttl, RenewInterval: 250 * time.Millisecond})
		provers[id] = &prover{}
		ch, _ := n.campaignWith(t, fenceFirst(id, provers[id], time.Second, nil))
		proxies, terms = append(proxies, proxy), append(terms, ch)
		defer proxy.Blackhole(false)
		queued(t, adm, l, len(terms))
	}
	wa := next(t, terms[0])
	provers["c"] = &prover{}
	chc, _ := newNode(t, c.Endpoints(), l, "c").campaignWith(t, fenceFirst("c", provers["c"], time.Second, nil))
	queued(t, adm, l, 3)
	proxies[0].Blackhole(true)
	wb := next(t, terms[1])
	time.Sleep(time.Second) // b leads and beats
	proxies[1].Blackhole(true)
	cut := time.Now()
	wc := next(t, chc)
	took := wc.at.Sub(cut)
	t.Logf("c won %v after b was cut off (b's lease: %v)", took.Round(time.Millisecond), ttl)
	if took > ttl/2 {
		t.Errorf("c won %v after b was cut off; want well before b's lease of %v could expire", took, ttl)
	}
	if !(wa.t.Epoch() < wb.t.Epoch() && wb.t.Epoch() < wc.t.Epoch()) {
		t.Errorf("epochs a %d, b %d, c %d; want them increasing", wa.t.Epoch(), wb.t.Epoch(), wc.t.Epoch())
	}
	if calls := provers["c"].called(); len(calls) != 1 || calls[0].Beat.NodeID != "b" {
		t.Errorf("c's ProveOut calls %+v; want one, of b", calls)
	}
	if calls := provers["b"].called(); len(calls) != 1 || calls[0].Beat.NodeID != "a" {
		t.Errorf("b's ProveOut calls %+v; want one, of a", calls)
	}
}

// While the leader's heartbeat moves (every 250ms), the candidate next in
// line never suspects it, over four overdue periods (1.25s); the heartbeats move
// the key's mod revision and keep its value and lease.
func testHeartbeatMoves(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := nodeOn(t, dialed(t, c.Endpoints()), l, "a", ConnConfig{LeaseTTL: testTTL, RenewInterval: 250 * time.Millisecond})
	cha, _ := a.campaignWith(t, fenceFirst("a", &prover{}, time.Second, nil))
	wa := next(t, cha)
	b := newNode(t, c.Endpoints(), l, "b")
	pb := &prover{}
	chb, _ := b.campaignWith(t, fenceFirst("b", pb, time.Second, nil))
	queued(t, adm, l, 2)
	before := keyOf(t, adm, wa.t.key)
	none(t, chb, 5*time.Second, "while the leader's heartbeat moves")
	after := keyOf(t, adm, wa.t.key)
	if n := len(pb.called()); n != 0 {
		t.Errorf("ProveOut called %d times while the leader's heartbeat moved", n)
	}
	beats := after.ModRevision - before.ModRevision
	t.Logf("a's key moved by %d revisions in 5s (a renews every 250ms)", beats)
	if beats < 5 {
		t.Errorf("a's key moved by %d revisions in 5s; want heartbeats", beats)
	}
	if after.CreateRevision != wa.t.Epoch() || after.Lease != int64(wa.t.sess.ID) || string(after.Value) != string(before.Value) {
		t.Errorf("a heartbeat changed the key: %v, now %v", before, after)
	}
	var cand candidate
	if err := json.Unmarshal(after.Value, &cand); err != nil || cand.RenewMS != 250 || cand.NodeID != "a" || cand.Join == "" {
		t.Errorf("a's key holds %s (%v); want node a, a join nonce, renew_ms 250", after.Value, err)
	}
}

// ProveOut failing: the term is not ended early, ProveOut is asked again
// about the same heartbeat no more often than every max(SuspectAfter,
// 0.5s), and the successor wins once the leader's lease expired.
func testProveOutFails(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	proxy, cli := proxiedClient(t, c)
	const ttl = 6 * time.Second
	a := nodeOn(t, cli, l, "a", ConnConfig{LeaseTTL: ttl, RenewInterval: 250 * time.Millisecond})
	cha, _ := a.campaignWith(t, fenceFirst("a", &prover{}, 500*time.Millisecond, nil))
	next(t, cha)
	b := newNode(t, c.Endpoints(), l, "b")
	pb := &prover{err: errors.New("the probe still reaches a's service")}
	chb, _ := b.campaignWith(t, fenceFirst("b", pb, 500*time.Millisecond, nil))
	queued(t, adm, l, 2)
	proxy.Blackhole(true)
	cut := time.Now()
	defer proxy.Blackhole(false)
	wb := next(t, chb)
	took := wb.at.Sub(cut)
	t.Logf("b won %v after a was cut off (a's lease: %v)", took.Round(time.Millisecond), ttl)
	if took < ttl*2/3 {
		t.Errorf("b won %v after the cut although ProveOut failed; want it only after a's lease (%v) expired", took, ttl)
	}
	calls := pb.called()
	if len(calls) == 0 {
		t.Fatal("ProveOut was never called")
	}
	for i, s := range calls {
		if s.Beat != calls[0].Beat {
			t.Errorf("ProveOut call %d named %+v, call 0 %+v; want one heartbeat (it stood still)", i, s.Beat, calls[0].Beat)
		}
		if i > 0 && s.Stood-calls[i-1].Stood < 450*time.Millisecond {
			t.Errorf("ProveOut asked again %v after the call before; want at least 500ms", s.Stood-calls[i-1].Stood)
		}
	}
	t.Logf("ProveOut asked %d times, the last when the heartbeat stood %v", len(calls), calls[len(calls)-1].Stood.Round(time.Millisecond))
}

// EndTerm removes the entry only at the heartbeat named: after a heartbeat
// moved it is ErrBeatMoved, for a key gone or created again
// ErrEntryChanged; of two calls racing with one Beat exactly one
// succeeds, and it revokes the lease.
func testEndTerm(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := nodeOn(t, dialed(t, c.Endpoints()), l, "a", ConnConfig{LeaseTTL: testTTL, RenewInterval: 250 * time.Millisecond})
	var frozen atomic.Bool
	hooks := &electorHooks{beat: func() bool { return !frozen.Load() }}
	cha, _ := a.campaignWith(t, fenceFirst("a", &prover{}, time.Second, hooks))
	wa := next(t, cha)
	o1, o2 := newNode(t, c.Endpoints(), l, "o1"), newNode(t, c.Endpoints(), l, "o2")
	ctx := ctxT(t)

	if err := o1.s.EndTerm(ctx, cluster.Beat{}); !errors.Is(err, cluster.ErrEntryChanged) {
		t.Errorf("EndTerm of no entry: %v; want ErrEntryChanged", err)
	}
	stale := beatOf(keyOf(t, adm, wa.t.key))
	waitFor(t, 10*time.Second, "a heartbeat", func() bool { return keyOf(t, adm, wa.t.key).ModRevision > stale.Version })
	if err := o1.s.EndTerm(ctx, stale); !errors.Is(err, cluster.ErrBeatMoved) {
		t.Errorf("EndTerm after a heartbeat moved: %v; want ErrBeatMoved", err)
	}
	if keyOf(t, adm, wa.t.key) == nil {
		t.Fatal("a refused EndTerm removed the key")
	}
	other := stale
	other.Entry.Created--
	if err := o1.s.EndTerm(ctx, other); !errors.Is(err, cluster.ErrEntryChanged) {
		t.Errorf("EndTerm of another creation: %v; want ErrEntryChanged", err)
	}

	frozen.Store(true)
	time.Sleep(1500 * time.Millisecond) // a heartbeat in flight (1s at most) lands
	b := beatOf(keyOf(t, adm, wa.t.key))
	if b.NodeID != "a" || b.Entry != (cluster.Entry{Key: wa.t.key, Owner: int64(wa.t.sess.ID), Created: wa.t.Epoch()}) {
		t.Fatalf("the beat read: %+v", b)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, n := range []*node{o1, o2} {
		wg.Go(func() { errs[i] = n.s.EndTerm(ctx, b) })
	}
	wg.Wait()
	ok, changed := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, cluster.ErrEntryChanged):
			changed++
		}
	}
	if ok != 1 || changed != 1 {
		t.Errorf("two EndTerm calls with one Beat: %v; want one nil, one ErrEntryChanged", errs)
	}
	if keyOf(t, adm, wa.t.key) != nil {
		t.Error("the key is there after EndTerm")
	}
	if !leaseGone(t, adm, b.Entry.Owner) {
		t.Error("the lease lives on after EndTerm")
	}
	select {
	case <-wa.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Error("a's term did not end after EndTerm")
	}

	// The same key created again: not the entry named.
	if _, err := adm.Put(ctx, b.Entry.Key, `{"node_id":"x"}`); err != nil {
		t.Fatal(err)
	}
	if err := o1.s.EndTerm(ctx, b); !errors.Is(err, cluster.ErrEntryChanged) {
		t.Errorf("EndTerm of a key created again: %v; want ErrEntryChanged", err)
	}
	if keyOf(t, adm, b.Entry.Key) == nil {
		t.Error("EndTerm removed a key created again")
	}
	if _, err := adm.Delete(ctx, b.Entry.Key); err != nil {
		t.Fatal(err)
	}
}

// A leader that publishes no heartbeat (fencing first off on it) is never
// suspected, however long its key stands still.
func testNoHeartbeatNoSuspect(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	cha, _ := a.campaign(t, Fair)
	wa := next(t, cha)
	b := newNode(t, c.Endpoints(), l, "b")
	pb := &prover{}
	chb, _ := b.campaignWith(t, fenceFirst("b", pb, 300*time.Millisecond, nil))
	queued(t, adm, l, 2)
	none(t, chb, 3*time.Second, "behind a leader without heartbeats")
	if n := len(pb.called()); n != 0 {
		t.Errorf("ProveOut called %d times for a leader without heartbeats", n)
	}
	k := keyOf(t, adm, wa.t.key)
	if k.ModRevision != k.CreateRevision || strings.Contains(string(k.Value), "renew_ms") {
		t.Errorf("a's key without fencing first: %s, mod revision %d, create revision %d", k.Value, k.ModRevision, k.CreateRevision)
	}
}

// The cost of heartbeats: the writes in the election of an idle cluster
// of three candidates (a leader, two waiting), with fencing first off and
// on, at the default lease timing of the tests (3s lease, renewed every
// second), and etcd's committed raft proposals in the same window.
func testHeartbeatCost(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	window := *costWindow
	counts := map[bool]int{}
	for _, on := range []bool{false, true} {
		l := newLayout()
		var stops []func()
		for _, id := range []string{"a", "b", "c"} {
			cfg := ElectorConfig{NodeID: id, Mode: Fair, DemoteBudget: 500 * time.Millisecond}
			if on {
				cfg = fenceFirst(id, &prover{}, 5*time.Second, nil)
			}
			_, stop := newNode(t, c.Endpoints(), l, id).campaignWith(t, cfg)
			stops = append(stops, stop)
		}
		queued(t, adm, l, 3)
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), window)
		wresp := adm.Watch(ctx, dir(l.ElectionDir()), clientv3.WithPrefix())
		proposals := committedProposals(t, c)
		puts := 0
		for r := range wresp {
			for _, ev := range r.Events {
				if ev.Type == mvccpb.PUT {
					puts++
				}
			}
		}
		cancel()
		raft := committedProposals(t, c) - proposals
		counts[on] = puts
		t.Logf("fencing first %v: %d puts in the election, %d raft proposals committed in %v (%.1f puts/s)",
			on, puts, raft, window, float64(puts)/window.Seconds())
		for _, stop := range stops {
			stop()
		}
	}
	if counts[false] != 0 {
		t.Errorf("%d puts in an idle election without fencing first; want none", counts[false])
	}
	// Three candidates renewing every second: about 3 a second.
	if perSec := float64(counts[true]) / window.Seconds(); perSec < 1.5 || perSec > 4.5 {
		t.Errorf("%.1f heartbeats a second of three candidates renewing every second; want about 3", perSec)
	}
}

// committedProposals is etcd's etcd_server_proposals_committed_total of
// c's first member.
func committedProposals(t *testing.T, c *etcdtest.Cluster) int64 {
	t.Helper()
	resp, err := http.Get(c.Members[0].Endpoint() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_server_proposals_committed_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatal("no etcd_server_proposals_committed_total in the metrics")
	return 0
}
