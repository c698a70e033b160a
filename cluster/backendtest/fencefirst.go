package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// FenceFirster is what the FenceFirst obligations need of a Backend; every
// backend must be one (the obligations fail otherwise).
type FenceFirster interface {
	// NodeFenceFirst is Node with the node's elector configured for
	// fencing first with ff (cluster.FenceFirst).
	NodeFenceFirst(t *testing.T, id string, ff cluster.FenceFirst) (cluster.Elector, cluster.Records)
	// SuspectAfter is a FenceFirst.SuspectAfter that fits the backend's
	// renewals as the suite configures them: a node that renews moves its
	// heartbeat well within it.
	SuspectAfter() time.Duration
	// StandStill stops node id's renewals, so that its heartbeat stands
	// still, while its election entry stays on the coordination service
	// (ZooKeeper, etcd: its connection is held, as Disconnect's, and its
	// session or lease lives on on the server until it runs out). It
	// returns how long after the call the entry stays at least unless
	// someone ends it (the life its session or lease has left at worst),
	// and resume, which lets the node renew again and returns once it can
	// (connected again). The hold ends with the test at the latest.
	StandStill(t *testing.T, id string) (stays time.Duration, resume func())
}

func init() {
	obligations = append(obligations,
		obligation{"FenceFirst/HeartbeatMoves", testFenceFirstHeartbeatMoves},
		obligation{"FenceFirst/ProvedOut", testFenceFirstProvedOut},
		obligation{"FenceFirst/NotProved", testFenceFirstNotProved},
		obligation{"FenceFirst/EndTerm", testFenceFirstEndTerm},
		obligation{"FenceFirst/OnlyNextInLine", testFenceFirstOnlyNextInLine},
	)
}

// errNotProved is the ProveOut of a candidate whose fence never proves.
var errNotProved = errors.New("backendtest: the fence did not prove the leader out")

// proveCall is one call of a candidate's ProveOut.
type proveCall struct {
	by string
	s  cluster.Suspect
	at time.Time
}

func (c proveCall) String() string {
	return fmt.Sprintf("%s suspected %s (entry %s, heartbeat %d, stood %v)", c.by, c.s.Beat.NodeID, c.s.Beat.Entry, c.s.Beat.Version, c.s.Stood)
}

// provers records every ProveOut call of an arena's nodes.
type provers struct {
	mu      sync.Mutex
	calls   []proveCall
	changed chan struct{}
}

// proveOut is node id's ProveOut: it records the call and returns result.
func (p *provers) proveOut(id string, result error) cluster.ProveOut {
	return func(ctx context.Context, s cluster.Suspect) error {
		p.mu.Lock()
		p.calls = append(p.calls, proveCall{by: id, s: s, at: time.Now()})
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		return result
	}
}

// all lists every call so far, in order.
func (p *provers) all() []proveCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// by lists node id's calls so far.
func (p *provers) by(id string) []proveCall {
	var out []proveCall
	for _, c := range p.all() {
		if c.by == id {
			out = append(out, c)
		}
	}
	return out
}

// waitCall waits until node id called ProveOut with a Suspect that ok
// accepts, and returns that call.
func (p *provers) waitCall(t *testing.T, id, what string, ok func(cluster.Suspect) bool) proveCall {
	t.Helper()
	deadline := time.After(endTimeout)
	for {
		p.mu.Lock()
		ch := p.changed
		p.mu.Unlock()
		for _, c := range p.by(id) {
			if ok(c.s) {
				return c
			}
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s did not call ProveOut (%s) within %v; calls: %v", id, what, endTimeout, p.all())
		}
	}
}

// anySuspect accepts every Suspect.
func anySuspect(cluster.Suspect) bool { return true }

// retryProveOut is how long after a refused ProveOut a candidate waits at
// least before it asks again while the same heartbeat stands
// (cluster.FenceFirst).
func retryProveOut(suspectAfter time.Duration) time.Duration {
	return max(suspectAfter, 500*time.Millisecond)
}

// ffArena is an arena whose nodes fence first.
type ffArena struct {
	*arena
	f       FenceFirster
	suspect time.Duration
	p       *provers
}

func newFFArena(t *testing.T, b Backend) *ffArena {
	t.Helper()
	f, ok := b.(FenceFirster)
	if !ok {
		t.Fatalf("backendtest: %T is no FenceFirster, which the FenceFirst obligations need", b)
	}
	sa := f.SuspectAfter()
	if sa <= 0 {
		t.Fatalf("backendtest: SuspectAfter %v", sa)
	}
	return &ffArena{arena: newArena(t, b), f: f, suspect: sa, p: &provers{changed: make(chan struct{})}}
}

// campaign makes node id, fencing first with a ProveOut that records its
// calls and returns result, and starts its candidacy.
func (x *ffArena) campaign(id string, result error) *node {
	x.t.Helper()
	el, rec := x.f.NodeFenceFirst(x.t, id, cluster.FenceFirst{SuspectAfter: x.suspect, ProveOut: x.p.proveOut(id, result)})
	n := x.adopt(id, el, rec)
	x.start(n)
	return n
}

// queuer is what the suite asks of a node's Records to see the election's
// order (the Store's Queue).
type queuer interface {
	Queue(ctx context.Context) ([]string, error)
}

// waitQueue waits until the election's order, as n reads it, is want.
func waitQueue(t *testing.T, n *node, want ...string) {
	t.Helper()
	q, ok := n.rec.(queuer)
	if !ok {
		t.Fatalf("the Records of %s (%T) have no Queue", n.id, n.rec)
	}
	var got []string
	waitFor(t, winTimeout, fmt.Sprintf("the election's order %v", want), func() bool {
		var err error
		got, err = q.Queue(ctxT(t))
		return err == nil && slices.Equal(got, want)
	})
}

// termEnder is what the suite asks of a node's Records for EndTerm (the
// Store's).
type termEnder interface {
	EndTerm(ctx context.Context, b cluster.Beat) error
}

func enderOf(t *testing.T, n *node) termEnder {
	t.Helper()
	e, ok := n.rec.(termEnder)
	if !ok {
		t.Fatalf("the Records of %s (%T) have no EndTerm", n.id, n.rec)
	}
	return e
}

// entryOf is h's election entry, which the term must name.
func entryOf(t *testing.T, h *held) cluster.Entry {
	t.Helper()
	e, ok := cluster.EntryOf(h.Term)
	if !ok || e.IsZero() {
		t.Fatalf("the term of %s names no election entry (%v, %v)", h.Node, e, ok)
	}
	return e
}

// wantSuspect fails t unless c suspects leader h by its entry, after its
// heartbeat stood still for SuspectAfter at least.
func (x *ffArena) wantSuspect(t *testing.T, c proveCall, h *held, e cluster.Entry) {
	t.Helper()
	if c.s.Beat.NodeID != h.Node || c.s.Beat.Entry != e {
		t.Errorf("%v; want it to name %s's node and entry %v", c, h.Node, e)
	}
	if c.s.Stood < x.suspect {
		t.Errorf("%v; want it to have stood still for SuspectAfter %v at least", c, x.suspect)
	}
}

// stillLeads fails t unless h's term is valid.
func stillLeads(t *testing.T, h *held, why string) {
	t.Helper()
	if _, err := h.Term.Expiry(); err != nil || h.Ctx.Err() != nil {
		t.Fatalf("the term of %s ended %s: Expiry %v, context %v", h.Node, why, err, context.Cause(h.Ctx))
	}
}

// FenceFirst, while the heartbeat moves: a leader that renews is never
// suspected. Node a leads and renews, b and c wait, all fencing first;
// for six times SuspectAfter nobody calls ProveOut, nobody else wins, and
// a's term stays valid.
func testFenceFirstHeartbeatMoves(t *testing.T, b Backend) {
	x := newFFArena(t, b)
	x.campaign("a", errNotProved)
	ha := x.nextBy(t, "a")
	nb := x.campaign("b", errNotProved)
	waitQueue(t, nb, "a", "b")
	x.campaign("c", errNotProved)
	waitQueue(t, nb, "a", "b", "c")
	watched := 6 * x.suspect
	x.quiet(t, watched, "while the leader's heartbeat moves")
	if calls := x.p.all(); len(calls) > 0 {
		t.Errorf("ProveOut was called within %v while the leader renewed: %v", watched, calls)
	}
	stillLeads(t, ha, "while it renewed")
}

// FenceFirst, proved out: the candidate next in line suspects a leader
// whose heartbeat stands still (its entry stays) and, when ProveOut
// proves it out, ends its term and wins long before the leader's session
// could run out. Node a leads, b waits; a's heartbeat stands still; b
// calls ProveOut once, naming a's node and entry, after the heartbeat
// stood for SuspectAfter; b wins, with a greater epoch, within half the
// session timeout of the standstill; a's guarded writes fail once it can
// reach the coordination service again.
func testFenceFirstProvedOut(t *testing.T, b Backend) {
	x := newFFArena(t, b)
	x.campaign("a", errNotProved)
	ha := x.nextBy(t, "a")
	nb := x.campaign("b", nil)
	waitQueue(t, nb, "a", "b")
	e := entryOf(t, ha)
	stopped := time.Now()
	stays, resume := x.f.StandStill(t, "a")
	hb := x.nextBy(t, "b")
	took := hb.Won.Sub(stopped)
	session := ha.Term.SessionTimeout()
	t.Logf("a's heartbeat stood still; b won %v later (SuspectAfter %v, session timeout %v, the entry stays %v by itself); calls: %v",
		took.Round(time.Millisecond), x.suspect, session, stays, x.p.all())
	calls := x.p.all()
	if len(calls) != 1 || calls[0].by != "b" {
		t.Fatalf("ProveOut calls %v; want exactly one, by b", calls)
	}
	x.wantSuspect(t, calls[0], ha, e)
	if calls[0].at.After(hb.Won) {
		t.Errorf("b won before it called ProveOut")
	}
	if took > session/2 {
		t.Errorf("b won %v after a's heartbeat stood still; want within half the session timeout %v", took.Round(time.Millisecond), session)
	}
	if hb.Epoch() <= ha.Epoch() {
		t.Errorf("b won with epoch %d, not above the proved-out term's %d", hb.Epoch(), ha.Epoch())
	}
	resume()
	if _, err := ha.Term.WriteBreadcrumb(ctxT(t), crumb("a", ha.Epoch()), cluster.Revision{}); err == nil {
		t.Errorf("the proved-out term's guarded write succeeded")
	}
	ha.waitEnded(t)
	if _, err := hb.Term.Expiry(); err != nil {
		t.Errorf("b's term is over: %v", err)
	}
}

// FenceFirst, not proved: ProveOut failing removes nothing. Node a leads,
// b waits with a ProveOut that fails; a's heartbeat stands still; b calls
// ProveOut, again no sooner than every SuspectAfter (at least 0.5 s), each
// time with the same Beat (the heartbeat never moves again), and wins only
// once a's entry went by itself, no earlier than StandStill said it stays.
func testFenceFirstNotProved(t *testing.T, b Backend) {
	x := newFFArena(t, b)
	x.campaign("a", errNotProved)
	ha := x.nextBy(t, "a")
	nb := x.campaign("b", errNotProved)
	waitQueue(t, nb, "a", "b")
	e := entryOf(t, ha)
	stopped := time.Now()
	stays, _ := x.f.StandStill(t, "a")
	hb := x.nextBy(t, "b")
	took := hb.Won.Sub(stopped)
	t.Logf("a's heartbeat stood still; b won %v later (the entry stays %v by itself, SuspectAfter %v); calls: %v",
		took.Round(time.Millisecond), stays, x.suspect, x.p.all())
	calls := x.p.all()
	if len(calls) == 0 {
		t.Fatal("b never called ProveOut")
	}
	retry := retryProveOut(x.suspect)
	for i, c := range calls {
		x.wantSuspect(t, c, ha, e)
		if c.by != "b" || c.s.Beat != calls[0].s.Beat {
			t.Errorf("%v; want every call by b, with the Beat of the first: %v", c, calls[0])
		}
		if i > 0 && c.at.Sub(calls[i-1].at) < retry {
			t.Errorf("ProveOut asked again %v after a refusal, while the heartbeat stood; want %v at least",
				c.at.Sub(calls[i-1].at).Round(time.Millisecond), retry)
		}
	}
	if took < stays {
		t.Errorf("b won %v after a's heartbeat stood still, before a's entry could go by itself (%v), though ProveOut failed",
			took.Round(time.Millisecond), stays)
	}
	if hb.Epoch() <= ha.Epoch() {
		t.Errorf("b won with epoch %d, not above a's %d", hb.Epoch(), ha.Epoch())
	}
}

// FenceFirst, EndTerm (cluster.TermEnder): a Beat a candidate suspected
// ends the term only while the entry is the one named and its heartbeat
// still at the Beat's version. Node a leads, b waits with a failing
// ProveOut; a's heartbeat stands still and b suspects it (Beat 1). A wrong
// Key or Created is refused with ErrEntryChanged; a renews again, and Beat
// 1 is refused with ErrBeatMoved; a's term stays valid, nobody else wins
// meanwhile, and b suspects no other version while the heartbeat moves.
// a's heartbeat stands still again, b suspects it anew (Beat 2, another
// version); two callers race EndTerm with Beat 2: exactly one succeeds,
// and b wins with a greater epoch.
func testFenceFirstEndTerm(t *testing.T, b Backend) {
	x := newFFArena(t, b)
	x.campaign("a", errNotProved)
	ha := x.nextBy(t, "a")
	nb := x.campaign("b", errNotProved)
	nx := x.add("x") // an operator's tool: the second caller of the race
	waitQueue(t, nb, "a", "b")
	e := entryOf(t, ha)
	ctx := ctxT(t)

	_, resume := x.f.StandStill(t, "a")
	c1 := x.p.waitCall(t, "b", "a first suspicion", anySuspect)
	x.wantSuspect(t, c1, ha, e)
	beat := c1.s.Beat
	frozen, err := ha.Term.Expiry()
	if err != nil {
		t.Fatalf("a's term ended %v after b suspected it (%v); the test needs it to outlive SuspectAfter %v",
			time.Since(c1.at).Round(time.Millisecond), err, x.suspect)
	}
	for _, wrong := range []cluster.Entry{
		{Key: e.Key + "x", Owner: e.Owner, Created: e.Created},
		{Key: e.Key, Owner: e.Owner, Created: e.Created + 1},
	} {
		w := beat
		w.Entry = wrong
		if err := enderOf(t, nx).EndTerm(ctx, w); !errors.Is(err, cluster.ErrEntryChanged) {
			t.Errorf("EndTerm naming %v, not a's entry %v: %v; want ErrEntryChanged", wrong, e, err)
		}
	}
	stillLeads(t, ha, "after EndTerm named another entry")

	resume()
	waitFor(t, endTimeout, "a's term renewed again", func() bool {
		exp, err := ha.Term.Expiry()
		if err != nil || ha.Ctx.Err() != nil {
			t.Fatalf("a's term ended before it renewed again (%v, %v); the test needs it to outlive the hold", err, context.Cause(ha.Ctx))
		}
		return exp.After(frozen)
	})
	time.Sleep(x.suspect) // the heartbeat moves within it
	if err := enderOf(t, nx).EndTerm(ctx, beat); !errors.Is(err, cluster.ErrBeatMoved) {
		t.Errorf("EndTerm with a Beat whose heartbeat moved since: %v; want ErrBeatMoved", err)
	}
	stillLeads(t, ha, "after EndTerm with a Beat whose heartbeat moved")
	x.quiet(t, 0, "after refused EndTerms")
	for _, c := range x.p.all() {
		if c.s.Beat != beat {
			t.Errorf("%v, while a renewed; want no suspicion but of the Beat that stood: %v", c, beat)
		}
	}

	x.f.StandStill(t, "a")
	c2 := x.p.waitCall(t, "b", "a suspicion of another heartbeat version", func(s cluster.Suspect) bool { return s.Beat.Version != beat.Version })
	x.wantSuspect(t, c2, ha, e)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, n := range []*node{nb, nx} {
		wg.Go(func() { errs[i] = enderOf(t, n).EndTerm(ctx, c2.s.Beat) })
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, cluster.ErrBeatMoved) && !errors.Is(err, cluster.ErrEntryChanged):
			t.Errorf("racing EndTerm %d: %v; want nil, or a refusal (ErrEntryChanged or ErrBeatMoved)", i, err)
		}
	}
	if ok != 1 {
		t.Fatalf("two racing EndTerm with one Beat: %v; want exactly one to succeed", errs)
	}
	hb := x.nextBy(t, "b")
	if hb.Epoch() <= ha.Epoch() {
		t.Errorf("b won with epoch %d, not above the ended term's %d", hb.Epoch(), ha.Epoch())
	}
}

// FenceFirst, only the next in line: a candidate behind the next in line
// never suspects. Node a leads, b and c wait in that order, with failing
// ProveOuts; a's heartbeat stands still; b calls ProveOut, and c never
// does, while b waits for a's entry to go and after b won.
func testFenceFirstOnlyNextInLine(t *testing.T, b Backend) {
	x := newFFArena(t, b)
	x.campaign("a", errNotProved)
	ha := x.nextBy(t, "a")
	nb := x.campaign("b", errNotProved)
	waitQueue(t, nb, "a", "b")
	x.campaign("c", errNotProved)
	waitQueue(t, nb, "a", "b", "c")
	e := entryOf(t, ha)
	x.f.StandStill(t, "a")
	x.wantSuspect(t, x.p.waitCall(t, "b", "a suspicion", anySuspect), ha, e)
	hb := x.nextBy(t, "b")
	time.Sleep(2 * x.suspect) // c is next in line behind b now, whose heartbeat moves
	stillLeads(t, hb, "while it renewed")
	for _, c := range x.p.all() {
		if c.by != "b" {
			t.Errorf("%v; only b, next in line, may suspect", c)
		}
	}
}
