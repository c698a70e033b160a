package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// Epochs: every term's Epoch is positive and greater than the epoch of
// every term of the cluster won before it, whichever node won it, also
// across reconnects and the loss of a node's session. Three nodes
// campaign; the leader's term ends again and again, in turn given back,
// its session lost while it leads, its entry deleted; a waiting node's
// connection drops and comes back in between. The arena checks every win
// against every earlier one.
func testEpochs(t *testing.T, b Backend) {
	a := newArena(t, b)
	for _, id := range []string{"a", "b", "c"} {
		a.campaign(id)
	}
	h := a.next(t)
	for i, f := range []fault{faultEndSession, faultRelease, faultDeleteEntry, faultEndSession, faultRelease, faultDeleteEntry, faultEndSession} {
		if i == 3 {
			// A waiting node loses its connection and gets it back: its
			// later terms still carry greater epochs.
			waiting := map[string]string{"a": "b", "b": "c", "c": "a"}[h.Node]
			b.Disconnect(t, waiting)()
		}
		f.apply(t, b, h)
		h = a.next(t)
	}
	terms := a.terms()
	if len(terms) < 8 {
		t.Fatalf("%d terms won, want at least 8", len(terms))
	}
	for i, h := range terms {
		if h.Epoch() <= 0 || i > 0 && h.Epoch() <= terms[i-1].Epoch() {
			var es []string
			for _, h := range terms {
				es = append(es, fmt.Sprintf("%s@%d", h.Node, h.Epoch()))
			}
			t.Fatalf("epochs in the order the terms were won: %v; want positive and strictly increasing", es)
		}
	}
}

// Exclusion: while a term is valid (Expiry in the future), no other term
// of the cluster is won. Three nodes campaign; each term, while held, has
// its Expiry in the future; it ends by being given back, by Finish, or by
// its node ending its candidacy, and at every win the arena checks that no
// other term still held is valid. A term is held from its win until its
// won callback returns or its own Finish begins: after that it is over by
// the controller's own act, and nothing acts on it. (Ends forced from
// outside, a deleted entry or a session the server closed, are not
// handovers a lease can cover; Expiry and GuardedWrites test those.)
func testExclusion(t *testing.T, b Backend) {
	a := newArena(t, b)
	a.exclusive = true
	nodes := map[string]*node{}
	for _, id := range []string{"a", "b", "c"} {
		nodes[id] = a.campaign(id)
	}
	for i := range 5 {
		h := a.next(t)
		// Held: valid, and nobody else wins.
		end := time.Now().Add(hold)
		for time.Now().Before(end) {
			now := time.Now()
			exp, err := h.Term.Expiry()
			if err != nil || !exp.After(now) {
				t.Fatalf("term %d of %s (epoch %d), held: Expiry = %v, %v; want an instant in the future", i, h.Node, h.Epoch(), exp, err)
			}
			time.Sleep(pollInterval)
		}
		a.quiet(t, 0, "while another term was held")
		switch i % 3 {
		case 0, 1:
			h.Release()
		case 2:
			rev, err := h.Term.WriteBreadcrumb(ctxT(t), crumb(h.Node, h.Epoch()), zeroOr(t, h.Term))
			if err != nil {
				t.Fatalf("WriteBreadcrumb of %s: %v", h.Node, err)
			}
			a.letGo(h) // over once Finish deletes the entry
			if err := h.Term.Finish(ctxT(t), rev); err != nil {
				t.Fatalf("Finish of %s: %v", h.Node, err)
			}
			h.Release()
		}
		if i == 3 {
			// The next leader ends its candidacy instead.
			h = a.next(t)
			nodes[h.Node].stop(t)
			h.waitReturned(t)
		}
	}
	a.next(t)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.violations) > 0 {
		t.Fatalf("%d violations (listed at the end)", len(a.violations))
	}
}

// zeroOr is the breadcrumb's current revision as tm reads it (the zero
// revision when there is none).
func zeroOr(t *testing.T, tm cluster.Term) cluster.Revision {
	t.Helper()
	r := readTerm(t, tm)
	if r.err != nil && !errors.Is(r.err, breadcrumb.ErrAbsent) {
		t.Fatalf("ReadBreadcrumb: %v", r.err)
	}
	return r.rev
}

// Guarded writes: every write a Term offers fails, and changes nothing,
// once the term's election entry is gone (here: deleted by an operator,
// or gone with the node's session). Node a wins and writes the
// breadcrumb and its leader position; a failover request to a stands.
// After the fault, a's term tries WriteBreadcrumb, CompleteFailover,
// WriteLeaderPosition, AppendHistory and Finish: each fails, and the
// successor b (and observer c) read back exactly what stood before.
func testGuardedWrites(t *testing.T, b Backend, f fault) {
	ar := newArena(t, b)
	c := ar.add("c")
	ar.campaign("a")
	ha := ar.nextBy(t, "a")
	ar.campaign("b")
	e := ha.Epoch()
	ctx := ctxT(t)

	rev, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", e), cluster.Revision{})
	if err != nil {
		t.Fatalf("WriteBreadcrumb of a's valid term: %v", err)
	}
	if err := ha.Term.WriteLeaderPosition(ctx, position("a", e, 10)); err != nil {
		t.Fatalf("WriteLeaderPosition of a's valid term: %v", err)
	}
	req := request("req-guard", "a", "c")
	if err := c.rec.ProposeFailover(ctx, req); err != nil {
		t.Fatalf("ProposeFailover: %v", err)
	}

	f.apply(t, b, ha)

	var failed []string
	if _, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", e+1), rev); err == nil {
		failed = append(failed, "WriteBreadcrumb succeeded")
	}
	if err := ha.Term.CompleteFailover(ctx, ha.Epoch()); err == nil {
		failed = append(failed, "CompleteFailover succeeded")
	}
	if err := ha.Term.WriteLeaderPosition(ctx, position("a", e, 20)); err == nil {
		failed = append(failed, "WriteLeaderPosition succeeded")
	}
	if _, err := ha.Term.AppendHistory(ctx, historyEntry("a", e)); err == nil {
		failed = append(failed, "AppendHistory succeeded")
	}
	if err := ha.Term.Finish(ctx, rev); err == nil {
		failed = append(failed, "Finish succeeded")
	}
	if len(failed) > 0 {
		t.Errorf("after %s of a's term: %v; want every write to fail", f, failed)
	}

	hb := ar.nextBy(t, "b")
	wantCrumb(t, "the successor's ReadBreadcrumb", readTerm(t, hb.Term), crumb("a", e), rev)
	wantCrumb(t, "c's ReadBreadcrumb", readRecords(t, c.rec), crumb("a", e), rev)
	if got, err := c.rec.ReadFailover(ctx); err != nil || got == nil || got.Done || got.ID != req.ID {
		t.Errorf("c's ReadFailover = %s, %v; want %s standing, not done", showFailover(got), err, req.ID)
	}
	if got, err := hb.Term.ReadFailover(ctx); err != nil || got == nil || got.Done || got.ID != req.ID {
		t.Errorf("the successor's ReadFailover = %s, %v; want %s standing, not done", showFailover(got), err, req.ID)
	}
	want := position("a", e, 10)
	if got, err := hb.Term.ReadLeaderPosition(ctx); err != nil || !samePosition(got, &want) {
		t.Errorf("the successor's ReadLeaderPosition = %+v, %v; want %+v", got, err, want)
	}
	if h := b.History(t); len(h) != 0 {
		t.Errorf("history %+v; want none (a's append came after its entry went)", h)
	}
	// The history is read back for real: the successor's append shows.
	if _, err := hb.Term.AppendHistory(ctx, historyEntry("b", hb.Epoch())); err != nil {
		t.Fatalf("AppendHistory of the successor: %v", err)
	}
	if h := b.History(t); len(h) != 1 || h[0].NewLeader != "b" || h[0].NewEpoch != hb.Epoch() {
		t.Errorf("history %+v; want only b's entry of epoch %d", h, hb.Epoch())
	}
}

// Compare-and-set: a write at a Revision fails when the record is no
// longer at that Revision; a write at the zero Revision fails when the
// record exists; the Revision a write returns is the one the next write
// and Finish use. A Finish at a stale revision changes nothing (the
// breadcrumb stays, the term goes on); at the current one it deletes the
// breadcrumb and ends the term, and the next node wins.
func testCompareAndSet(t *testing.T, b Backend) {
	ar := newArena(t, b)
	c := ar.add("c")
	ar.campaign("a")
	ha := ar.nextBy(t, "a")
	ar.campaign("b")
	e := ha.Epoch()
	ctx := ctxT(t)
	tm := ha.Term

	wantAbsent(t, "before any write", readTerm(t, tm))
	r1, err := tm.WriteBreadcrumb(ctx, crumb("a", e), cluster.Revision{})
	if err != nil {
		t.Fatalf("WriteBreadcrumb at the zero revision, none there: %v", err)
	}
	if !r1.Exists() {
		t.Fatalf("WriteBreadcrumb returned the zero revision for a record it created")
	}
	wantCrumb(t, "after the first write", readTerm(t, tm), crumb("a", e), r1)
	if _, err := tm.WriteBreadcrumb(ctx, crumb("a", e+100), cluster.Revision{}); err == nil {
		t.Fatal("WriteBreadcrumb at the zero revision succeeded although a breadcrumb exists")
	}
	wantCrumb(t, "after a refused create", readRecords(t, c.rec), crumb("a", e), r1)

	second := crumb("a", e)
	second.Host = "host-a2"
	r2, err := tm.WriteBreadcrumb(ctx, second, r1)
	if err != nil {
		t.Fatalf("WriteBreadcrumb at the revision the first write returned: %v", err)
	}
	if r2 == r1 || !r2.Exists() {
		t.Fatalf("the second write returned revision %s (the first: %s)", r2, r1)
	}
	wantCrumb(t, "after the second write", readRecords(t, c.rec), second, r2)
	if _, err := tm.WriteBreadcrumb(ctx, crumb("a", e+200), r1); err == nil {
		t.Fatal("WriteBreadcrumb at a stale revision succeeded")
	}
	wantCrumb(t, "after a write at a stale revision", readRecords(t, c.rec), second, r2)

	if err := tm.Finish(ctx, r1); err == nil {
		t.Fatal("Finish at a stale revision succeeded")
	}
	wantCrumb(t, "after a Finish at a stale revision", readRecords(t, c.rec), second, r2)
	if _, err := tm.Expiry(); err != nil || ha.Ctx.Err() != nil {
		t.Fatalf("after a Finish at a stale revision the term is over (Expiry %v, context %v); want it to go on", err, context.Cause(ha.Ctx))
	}
	ar.quiet(t, quietInterval, "after a Finish at a stale revision")
	// The stale Finish must have left the entry: the term can still write.
	r3, err := tm.WriteBreadcrumb(ctx, second, r2)
	if err != nil {
		t.Fatalf("WriteBreadcrumb after a Finish at a stale revision: %v", err)
	}

	ar.letGo(ha)
	if err := tm.Finish(ctx, r3); err != nil {
		t.Fatalf("Finish at the current revision: %v", err)
	}
	ha.Release()
	wantAbsent(t, "after Finish", readRecords(t, c.rec))
	hb := ar.nextBy(t, "b")
	wantAbsent(t, "the successor's read after Finish", readTerm(t, hb.Term))
}

// Succession: a new term's reads see everything its predecessors wrote
// before their entries went. Node a wins, publishes its member record as
// leader, writes the breadcrumb and its leader position, and marks the
// failover request to it done; then its term ends (given back, or its
// entry deleted). The successor b's term reads all of it at once; and the
// leader position it then publishes is never replaced by one of an
// earlier epoch (ErrStalePosition).
func testSuccession(t *testing.T, b Backend, f fault) {
	ar := newArena(t, b)
	c := ar.add("c")
	na := ar.campaign("a")
	ha := ar.nextBy(t, "a")
	ar.campaign("b")
	e := ha.Epoch()
	ctx := ctxT(t)

	req := request("req-succession", "a", "c")
	if err := c.rec.ProposeFailover(ctx, req); err != nil {
		t.Fatalf("ProposeFailover: %v", err)
	}
	publish(t, na, cluster.StateLeader, e)
	rev, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", e), cluster.Revision{})
	if err != nil {
		t.Fatalf("WriteBreadcrumb: %v", err)
	}
	pos := position("a", e, 42)
	if err := ha.Term.WriteLeaderPosition(ctx, pos); err != nil {
		t.Fatalf("WriteLeaderPosition: %v", err)
	}
	if err := ha.Term.CompleteFailover(ctx, ha.Epoch()); err != nil {
		t.Fatalf("CompleteFailover: %v", err)
	}
	f.apply(t, b, ha)

	hb := ar.nextBy(t, "b")
	wantCrumb(t, "the successor's ReadBreadcrumb", readTerm(t, hb.Term), crumb("a", e), rev)
	if got, err := hb.Term.ReadFailover(ctx); err != nil || got == nil || got.ID != req.ID || !got.Done || got.Epoch != e {
		t.Errorf("the successor's ReadFailover = %s, %v; want %s done at epoch %d", showFailover(got), err, req.ID, e)
	}
	ms, err := hb.Term.ReadMembers(ctx)
	if err != nil {
		t.Fatalf("the successor's ReadMembers: %v", err)
	}
	i := slices.IndexFunc(ms, func(m cluster.Member) bool { return m.NodeID == "a" })
	if i < 0 || ms[i].State != cluster.StateLeader || ms[i].Epoch != e {
		t.Errorf("the successor's ReadMembers = %s; want a as leader at epoch %d", showMembers(ms), e)
	}
	if got, err := hb.Term.ReadLeaderPosition(ctx); err != nil || !samePosition(got, &pos) {
		t.Errorf("the successor's ReadLeaderPosition = %+v, %v; want %+v", got, err, pos)
	}
	// The leader position never goes back to an earlier epoch.
	mine := position("b", hb.Epoch(), 43)
	if err := hb.Term.WriteLeaderPosition(ctx, mine); err != nil {
		t.Fatalf("the successor's WriteLeaderPosition: %v", err)
	}
	if err := hb.Term.WriteLeaderPosition(ctx, pos); !errors.Is(err, cluster.ErrStalePosition) {
		t.Errorf("WriteLeaderPosition of epoch %d over one of epoch %d = %v; want ErrStalePosition", e, hb.Epoch(), err)
	}
	if got, err := hb.Term.ReadLeaderPosition(ctx); err != nil || !samePosition(got, &mine) {
		t.Errorf("after a refused stale write, ReadLeaderPosition = %+v, %v; want %+v", got, err, mine)
	}
}

// Watches: WatchFailover, WatchMembers, WatchLeader and WatchPause deliver
// the current value first, then every change, never an older value, and
// miss no change made while the watcher's connection was lost and came
// back. Node w watches; other nodes change every record one step at a
// time (each step waits for its delivery); then w's connection drops, a
// change of every record is made meanwhile, and each must be delivered
// after the reconnect; a last change shows the watches still work.
func testWatches(t *testing.T, b Backend) {
	ar := newArena(t, b)
	c := ar.add("c")
	na := ar.add("a")
	w := ar.add("w")
	ctx := ctxT(t)

	p0 := cluster.Pause{By: "op", Reason: "first", At: since}
	b.SetPause(t, &p0)
	publish(t, c, "standby", 0)

	pause := watchWith(t, "WatchPause", w.rec.WatchPause, showPause)
	pause.became(showPause(&p0))
	fo := watchWith(t, "WatchFailover", w.rec.WatchFailover, showFailover)
	fo.became("none")
	mem := watchWith(t, "WatchMembers", w.rec.WatchMembers, showMembers)
	mem.became("[c:standby:0]")
	ld := watchWith(t, "WatchLeader", w.rec.WatchLeader, showLeader)
	ld.became("none")
	all := []*recorder{pause, fo, mem, ld}
	for _, r := range all {
		r.waitLast(t)
	}

	b.SetPause(t, nil)
	pause.became("none")
	pause.waitLast(t)

	r1 := request("req-w1", "a", "c")
	if err := c.rec.ProposeFailover(ctx, r1); err != nil {
		t.Fatalf("ProposeFailover: %v", err)
	}
	fo.became(showFailover(&r1))
	fo.waitLast(t)

	publish(t, na, "standby", 0)
	mem.became("[a:standby:0 c:standby:0]")
	mem.waitLast(t)

	ar.start(na)
	ha := ar.nextBy(t, "a")
	e := ha.Epoch()
	publish(t, na, cluster.StateLeader, e)
	mem.became(fmt.Sprintf("[a:leader:%d c:standby:0]", e))
	mem.waitLast(t)
	if _, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", e), cluster.Revision{}); err != nil {
		t.Fatalf("WriteBreadcrumb: %v", err)
	}
	ld.became(leaderName("a", e))
	ld.waitLast(t)

	if err := c.rec.WithdrawFailover(ctx, r1.ID); err != nil {
		t.Fatalf("WithdrawFailover: %v", err)
	}
	fo.became("none")
	fo.waitLast(t)

	// w's connection drops; every record changes meanwhile. A read w
	// starts meanwhile is answered on the new connection.
	reconnect := b.Disconnect(t, "w")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.rec.ReadFailover(ctx)
	}()
	p1 := cluster.Pause{By: "op", Reason: "while away", At: since.Add(time.Minute)}
	b.SetPause(t, &p1)
	pause.became(showPause(&p1))
	r2 := request("req-w2", "c", "a")
	if err := na.rec.ProposeFailover(ctx, r2); err != nil {
		t.Fatalf("ProposeFailover while w is away: %v", err)
	}
	fo.became(showFailover(&r2))
	publish(t, na, "demoting", e)
	mem.became(fmt.Sprintf("[a:demoting:%d c:standby:0]", e))
	ld.became("none")
	reconnect()
	for _, r := range all {
		r.waitLast(t)
	}
	wg.Wait()

	b.SetPause(t, nil)
	pause.became("none")
	pause.waitLast(t)
	for _, r := range all {
		r.checkOrder(t)
	}
}

// Watches: WatchMembers delivers a change of any field of a member record,
// not only of the fields a node acts on: status displays and operators'
// tools show them all. Node c's record changes one field at a time (its
// epoch alone, its host alone, what it follows, its position, its
// priority); each must be delivered.
func testWatchesEveryMemberField(t *testing.T, b Backend) {
	ar := newArena(t, b)
	c := ar.add("c")
	w := ar.add("w")
	ctx := ctxT(t)

	m := member("c", "standby", 0)
	pub := func(what string) {
		t.Helper()
		if err := c.rec.PublishMember(ctx, m); err != nil {
			t.Fatalf("PublishMember (%s): %v", what, err)
		}
	}
	pub("first")
	mem := watchWith(t, "WatchMembers", w.rec.WatchMembers, showMembersFully)
	mem.became(showMembersFully([]cluster.Member{m}))
	mem.waitLast(t)
	prio, pos := 2, int64(42)
	for _, step := range []struct {
		what   string
		change func(m *cluster.Member)
	}{
		{"epoch", func(m *cluster.Member) { m.Epoch = 7 }},
		{"host", func(m *cluster.Member) { m.Host = "elsewhere-c" }},
		{"following", func(m *cluster.Member) { m.Following, m.FollowingEpoch = "a", 7 }},
		{"following epoch", func(m *cluster.Member) { m.FollowingEpoch = 8 }},
		{"position", func(m *cluster.Member) { m.Position = &pos }},
		{"priority", func(m *cluster.Member) { m.Priority = &prio }},
		{"last error", func(m *cluster.Member) { m.LastError = "test: changed" }},
	} {
		step.change(&m)
		pub(step.what)
		mem.became(showMembersFully([]cluster.Member{m}))
		mem.waitLast(t)
	}
	mem.checkOrder(t)
}

// Known members: a known-member record outlives its node's session. Node
// a publishes its member record and remembers itself twice (the second
// write replaces the first); forgetting a is refused while its member
// record exists; a's session ends, its member record goes, its known
// record stays; then forgetting it succeeds once, and it is no longer
// listed.
func testKnownMembers(t *testing.T, b Backend) {
	ar := newArena(t, b)
	w := ar.add("w")
	na := ar.campaign("a")
	ha := ar.nextBy(t, "a")
	ctx := ctxT(t)

	publish(t, na, "standby", 0)
	known := func(at time.Time) cluster.KnownMember {
		return cluster.KnownMember{NodeID: "a", Host: "host-a", AdminURL: "http://host-a:9101", Instance: "inst-a", LastSeen: at}
	}
	wantKnown := func(what string, want ...cluster.KnownMember) {
		t.Helper()
		got, err := w.rec.KnownMembers(ctx)
		if err != nil {
			t.Fatalf("KnownMembers (%s): %v", what, err)
		}
		if len(got) != len(want) {
			t.Fatalf("KnownMembers (%s) = %+v, want %+v", what, got, want)
		}
		for i := range got {
			if g, k := got[i], want[i]; g.NodeID != k.NodeID || g.Host != k.Host || g.AdminURL != k.AdminURL ||
				g.Instance != k.Instance || !g.LastSeen.Equal(k.LastSeen) {
				t.Fatalf("KnownMembers (%s) = %+v, want %+v", what, got, want)
			}
		}
	}
	wantKnown("none yet")
	if err := na.rec.RememberMember(ctx, known(since)); err != nil {
		t.Fatalf("RememberMember: %v", err)
	}
	wantKnown("remembered", known(since))
	later := since.Add(time.Minute)
	if err := na.rec.RememberMember(ctx, known(later)); err != nil {
		t.Fatalf("RememberMember again: %v", err)
	}
	wantKnown("remembered again", known(later))

	if forgot, err := w.rec.ForgetMember(ctx, "a"); !errors.Is(err, cluster.ErrMemberLive) || forgot {
		t.Fatalf("ForgetMember of a live member = %v, %v; want ErrMemberLive", forgot, err)
	}
	wantKnown("after a refused forget", known(later))

	mem := watchWith(t, "WatchMembers", w.rec.WatchMembers, showMembers)
	b.EndSession(t, ha.Node)
	waitFor(t, watchTimeout, "a's member record gone with its session", func() bool {
		got, _ := mem.deliveries()
		return len(got) > 0 && got[len(got)-1] == "[]"
	})
	wantKnown("after a's session ended", known(later))

	if forgot, err := w.rec.ForgetMember(ctx, "a"); err != nil || !forgot {
		t.Fatalf("ForgetMember of a gone member = %v, %v; want it forgotten", forgot, err)
	}
	wantKnown("forgotten")
	if forgot, err := w.rec.ForgetMember(ctx, "a"); err != nil || forgot {
		t.Fatalf("ForgetMember of an unknown member = %v, %v; want nothing to forget", forgot, err)
	}
}

// Leader view: WatchLeader names a node only once its member record says
// it is promoted (State leader) at the breadcrumb's epoch, and never after
// a successor wrote its breadcrumb, even while the old leader's member
// record still says leader. Node a wins; its member record says leader
// while there is no breadcrumb, then leader at another epoch while a's
// breadcrumb stands, then leader at a's epoch: only then is a named. a
// gives its term back (the view stays); b wins and writes its breadcrumb
// while its member record says promoting: a is no longer named (and never
// again), b only once its member record says leader.
func testLeaderView(t *testing.T, b Backend) {
	ar := newArena(t, b)
	na := ar.campaign("a")
	ha := ar.nextBy(t, "a")
	nb := ar.campaign("b")
	w := ar.add("w")
	ctx := ctxT(t)
	e1 := ha.Epoch()

	ld := watchWith(t, "WatchLeader", w.rec.WatchLeader, showLeader)
	ld.became("none")
	ld.waitLast(t)
	// a's member record says leader before any breadcrumb exists, then at
	// another epoch than the breadcrumb's: a is not named yet.
	publish(t, na, cluster.StateLeader, e1)
	time.Sleep(quietInterval)
	publish(t, na, cluster.StateLeader, e1+1000)
	if _, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", e1), cluster.Revision{}); err != nil {
		t.Fatalf("WriteBreadcrumb of a: %v", err)
	}
	time.Sleep(quietInterval)
	agree := time.Now()
	publish(t, na, cluster.StateLeader, e1)
	ld.became(leaderName("a", e1))
	ld.waitLast(t)

	ha.Release()
	hb := ar.nextBy(t, "b")
	e2 := hb.Epoch()
	publish(t, nb, "promoting", e2)
	time.Sleep(quietInterval) // the view must stay a's meanwhile
	got, _ := ld.deliveries()
	if got[len(got)-1] != leaderName("a", e1) {
		t.Fatalf("before b wrote its breadcrumb, WatchLeader delivered %q; want a@%d to stand", got, e1)
	}
	if _, err := hb.Term.WriteBreadcrumb(ctx, crumb("b", e2), zeroOr(t, hb.Term)); err != nil {
		t.Fatalf("WriteBreadcrumb of b: %v", err)
	}
	ld.became("none")
	ld.waitLast(t)
	time.Sleep(quietInterval)
	bAgree := time.Now()
	publish(t, nb, cluster.StateLeader, e2)
	ld.became(leaderName("b", e2))
	ld.waitLast(t)
	time.Sleep(quietInterval)

	got, at := ld.deliveries()
	for i, g := range got {
		switch {
		case g == leaderName("a", e1) && at[i].Before(agree):
			t.Errorf("WatchLeader named a at %v, before a's member record and breadcrumb agreed", agree.Sub(at[i]))
		case g == leaderName("b", e2) && at[i].Before(bAgree):
			t.Errorf("WatchLeader named b at %v, before b's member record and breadcrumb agreed", bAgree.Sub(at[i]))
		case g != "none" && g != leaderName("a", e1) && g != leaderName("b", e2):
			t.Errorf("WatchLeader delivered %q, which never was the leader", g)
		}
	}
	ld.checkOrder(t)
}

// Expiry (the Deadline obligation at a win, and Term.Expiry's error):
// right after a win Expiry is an instant in the future; once the term's
// entry is gone (deleted, or gone with its session) and the backend knows
// it (the term's context ended, its cause says why), Expiry fails with
// ErrSessionExpired, ErrEntryDeleted or ErrLeaseExpired: the contract
// sets Expiry's error "once the term is known to be over", and the
// successor may already lead.
func testExpiry(t *testing.T, b Backend, f fault) {
	ar := newArena(t, b)
	ar.campaign("a")
	ha := ar.nextBy(t, "a")
	ar.campaign("b")
	now := time.Now()
	exp, err := ha.Term.Expiry()
	if err != nil || !exp.After(now) {
		t.Fatalf("Expiry right after the win = %v, %v; want an instant in the future", exp, err)
	}
	if st := ha.Term.SessionTimeout(); st <= 0 {
		t.Errorf("SessionTimeout = %v; want a positive duration", st)
	}

	faulted := time.Now()
	f.apply(t, b, ha)
	cause := ha.waitEnded(t)
	known := time.Now()
	// An ended session takes the entry with it: a backend may see either
	// first (etcd's watch sees the key of a revoked lease go before a
	// renewal is refused) and must end the term at once either way.
	switch {
	case f == faultDeleteEntry && !errors.Is(cause, cluster.ErrEntryDeleted):
		t.Errorf("the term's context ended with %v; want a cause wrapping %v", cause, cluster.ErrEntryDeleted)
	case f == faultEndSession && !errors.Is(cause, cluster.ErrSessionExpired) && !errors.Is(cause, cluster.ErrEntryDeleted):
		t.Errorf("the term's context ended with %v; want a cause wrapping %v or %v", cause, cluster.ErrSessionExpired, cluster.ErrEntryDeleted)
	}
	exp, err = ha.Term.Expiry()
	if err != nil {
		if !errors.Is(err, cluster.ErrSessionExpired) && !errors.Is(err, cluster.ErrEntryDeleted) && !errors.Is(err, cluster.ErrLeaseExpired) {
			t.Errorf("Expiry failed with %v; want an error wrapping ErrSessionExpired, ErrEntryDeleted or ErrLeaseExpired", err)
		}
		ar.nextBy(t, "b")
		return
	}
	// Still valid: measure for how long, and when the successor won.
	ahead := exp.Sub(known)
	var hb *held
	var failedAfter time.Duration = -1
	for limit := known.Add(ha.Term.SessionTimeout()); time.Now().Before(limit); time.Sleep(pollInterval) {
		if hb == nil {
			select {
			case h := <-ar.wins:
				if h.Node == "b" {
					hb = h
				} else {
					h.Release()
				}
			default:
			}
		}
		if _, err := ha.Term.Expiry(); err != nil {
			failedAfter = time.Since(known)
			break
		}
	}
	if hb == nil {
		hb = ar.nextBy(t, "b")
	}
	failed := "not within a session timeout"
	if failedAfter >= 0 {
		failed = fmt.Sprintf("only %v later", failedAfter.Round(time.Millisecond))
	}
	t.Errorf("the term is known to be over (its context ended with %q, %v after the %s), yet Expiry still reported an instant %v ahead "+
		"and no error; it failed %s; the successor b had won %v after the %s",
		cause, known.Sub(faulted).Round(time.Millisecond), f, ahead.Round(time.Millisecond), failed,
		hb.Won.Sub(faulted).Round(time.Millisecond), f)
}

// Deadline: Term.Expiry is never later than the instant the backend can
// guarantee no other term begins before, also for a leader whose part of
// the coordination service is cut off from the rest (ZooKeeper: its
// server loses its quorum but keeps serving it). Node a leads through the
// minority part; b campaigns through the majority. After the cut, a's
// Expiry is watched until it fails: b must win only after the latest
// instant a's Expiry ever reported, and after a's Expiry failed.
func testDeadlineCutOff(t *testing.T, p Partition) {
	ar := newArena(t, nil)
	el, rec := p.MinorityNode(t, "a")
	na := ar.adopt("a", el, rec)
	ar.start(na)
	ha := ar.nextBy(t, "a")
	el, rec = p.Node(t, "b")
	ar.start(ar.adopt("b", el, rec))

	time.Sleep(time.Second) // a few renewals, b queued
	if exp, err := ha.Term.Expiry(); err != nil || !exp.After(time.Now()) {
		t.Fatalf("a's Expiry before the cut = %v, %v; want an instant in the future", exp, err)
	}
	var (
		mu      sync.Mutex
		latest  time.Time // the latest instant a's Expiry reported
		failed  time.Time // when it first failed
		failErr error
	)
	stop := make(chan struct{})
	polled := make(chan struct{})
	heal := p.CutOff(t)
	healed := false
	defer func() {
		if !healed {
			heal()
		}
	}()
	cut := time.Now()
	go func() {
		defer close(polled)
		for {
			exp, err := ha.Term.Expiry()
			now := time.Now()
			mu.Lock()
			if err != nil {
				if failed.IsZero() {
					failed, failErr = now, err
				}
			} else if exp.After(latest) {
				latest = exp
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			default:
			}
			time.Sleep(time.Millisecond)
		}
	}()
	hb := ar.nextBy(t, "b")
	close(stop)
	<-polled
	heal()
	healed = true
	mu.Lock()
	defer mu.Unlock()
	t.Logf("after the cut: a's latest Expiry %v, a's Expiry failed %v (%v), b won %v",
		latest.Sub(cut).Round(time.Millisecond), failed.Sub(cut).Round(time.Millisecond), failErr, hb.Won.Sub(cut).Round(time.Millisecond))
	if !hb.Won.After(latest) {
		t.Errorf("b won %v before the latest instant a's Expiry reported", latest.Sub(hb.Won))
	}
	switch {
	case failed.IsZero():
		t.Errorf("a's Expiry had not failed when b won")
	case !errors.Is(failErr, cluster.ErrLeaseExpired) && !errors.Is(failErr, cluster.ErrSessionExpired):
		t.Errorf("a's Expiry failed with %v; want ErrLeaseExpired or ErrSessionExpired", failErr)
	case !failed.Before(hb.Won):
		t.Errorf("a's Expiry failed %v after b won", failed.Sub(hb.Won))
	}
}

// Revision opacity: the zero Revision means "absent". With no breadcrumb,
// ReadBreadcrumb (outside a term and in one) returns breadcrumb.ErrAbsent
// and the zero Revision; a write at the zero Revision creates the record
// and returns a Revision that exists; once Finish deleted it, it reads as
// absent with the zero Revision again.
func testRevisionZeroIsAbsent(t *testing.T, b Backend) {
	ar := newArena(t, b)
	c := ar.add("c")
	wantAbsent(t, "Records.ReadBreadcrumb on a new cluster", readRecords(t, c.rec))
	na := ar.campaign("a")
	ha := ar.nextBy(t, "a")
	wantAbsent(t, "Term.ReadBreadcrumb on a new cluster", readTerm(t, ha.Term))
	wantAbsent(t, "the winner's Records.ReadBreadcrumb", readRecords(t, na.rec))
	rev, err := ha.Term.WriteBreadcrumb(ctxT(t), crumb("a", ha.Epoch()), cluster.Revision{})
	if err != nil {
		t.Fatalf("WriteBreadcrumb at the zero revision: %v", err)
	}
	if !rev.Exists() || rev == (cluster.Revision{}) {
		t.Fatalf("WriteBreadcrumb returned %s for the record it created; want a revision that exists", rev)
	}
	wantCrumb(t, "after the write", readRecords(t, c.rec), crumb("a", ha.Epoch()), rev)
	ar.letGo(ha)
	if err := ha.Term.Finish(ctxT(t), rev); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	ha.Release()
	wantAbsent(t, "Records.ReadBreadcrumb after Finish", readRecords(t, c.rec))
	ha2 := ar.nextBy(t, "a")
	wantAbsent(t, "Term.ReadBreadcrumb after Finish", readTerm(t, ha2.Term))
}

// Shortcuts: a cached value or a prefetched read returns what the plain
// read would. Records.ReadBreadcrumb (outside a term, on the leader's
// node and on another) and Term.ReadBreadcrumb give the same answer, and
// so do Records.ReadFailover and Term.ReadFailover, in every state: no
// breadcrumb, one written, one rewritten, one written by the next term,
// none again after Finish; no request, a request, a request done.
func testShortcuts(t *testing.T, b Backend) {
	ar := newArena(t, b)
	c := ar.add("c")
	na := ar.campaign("a")
	ha := ar.nextBy(t, "a")
	nb := ar.campaign("b")
	ctx := ctxT(t)

	agree := func(what string, n *node, tm cluster.Term) {
		t.Helper()
		plain, mine, other := readTerm(t, tm), readRecords(t, n.rec), readRecords(t, c.rec)
		if !plain.same(mine) || !plain.same(other) {
			t.Fatalf("%s: Term.ReadBreadcrumb %s, the node's Records.ReadBreadcrumb %s, another node's %s; want one answer",
				what, plain, mine, other)
		}
		fterm, err1 := tm.ReadFailover(ctx)
		fmine, err2 := n.rec.ReadFailover(ctx)
		fother, err3 := c.rec.ReadFailover(ctx)
		if err1 != nil || err2 != nil || err3 != nil ||
			showFailover(fterm) != showFailover(fmine) || showFailover(fterm) != showFailover(fother) {
			t.Fatalf("%s: Term.ReadFailover %s (%v), the node's Records.ReadFailover %s (%v), another node's %s (%v); want one answer",
				what, showFailover(fterm), err1, showFailover(fmine), err2, showFailover(fother), err3)
		}
	}
	agree("no breadcrumb", na, ha.Term)
	r1, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", ha.Epoch()), cluster.Revision{})
	if err != nil {
		t.Fatal(err)
	}
	agree("written", na, ha.Term)
	req := request("req-shortcut", "a", "c")
	if err := c.rec.ProposeFailover(ctx, req); err != nil {
		t.Fatal(err)
	}
	agree("a request", na, ha.Term)
	if err := ha.Term.CompleteFailover(ctx, ha.Epoch()); err != nil {
		t.Fatal(err)
	}
	agree("a request done", na, ha.Term)
	again := crumb("a", ha.Epoch())
	again.Host = "host-a2"
	if _, err := ha.Term.WriteBreadcrumb(ctx, again, r1); err != nil {
		t.Fatal(err)
	}
	agree("rewritten", na, ha.Term)
	ha.Release()
	hb := ar.nextBy(t, "b")
	agree("the next term, before its write", nb, hb.Term)
	rb, err := hb.Term.WriteBreadcrumb(ctx, crumb("b", hb.Epoch()), zeroOr(t, hb.Term))
	if err != nil {
		t.Fatal(err)
	}
	agree("written by the next term", nb, hb.Term)
	ar.letGo(hb)
	if err := hb.Term.Finish(ctx, rb); err != nil {
		t.Fatal(err)
	}
	hb.Release()
	ha2 := ar.nextBy(t, "a")
	agree("after Finish", na, ha2.Term)
}

// Leader view, read narrowly: WatchLeader reads only the breadcrumb and
// the member record of the node it names, a shortcut that must deliver
// what the plain read (Store.Leader, every member record and the
// breadcrumb) says after every change: a standby's record changing
// (several times, its position too) changes nothing, the leader's own
// record changing (its position) is delivered, a successor's breadcrumb
// names nobody until the successor's record says leader.
func testLeaderViewNarrow(t *testing.T, b Backend) {
	ar := newArena(t, b)
	na := ar.campaign("a")
	ha := ar.nextBy(t, "a")
	nb := ar.campaign("b")
	w := ar.add("w")
	ctx := ctxT(t)
	e1 := ha.Epoch()
	show := func(l *cluster.Leader) string {
		if l == nil {
			return "none"
		}
		pos := "-"
		if l.Position != nil {
			pos = fmt.Sprint(*l.Position)
		}
		return fmt.Sprintf("%s@%d pos %s", l.NodeID, l.Epoch, pos)
	}
	ld := watchWith(t, "WatchLeader", w.rec.WatchLeader, show)
	plainer, ok := w.rec.(interface {
		Leader(context.Context) (*cluster.Leader, error)
	})
	if !ok {
		t.Fatalf("the backend's Records (%T) has no plain Leader read to compare the view with", w.rec)
	}
	// agree: the plain read says want, and the watch's last delivery is it.
	agree := func(step, want string) {
		t.Helper()
		plain, err := plainer.Leader(ctx)
		if err != nil {
			t.Fatalf("%s: Leader: %v", step, err)
		}
		if got := show(plain); got != want {
			t.Fatalf("%s: the plain read names %q; want %q", step, got, want)
		}
		ld.became(want)
		ld.waitLast(t)
	}
	withPos := func(n *node, state string, epoch, pos int64) {
		t.Helper()
		m := member(n.id, state, epoch)
		m.Position = &pos
		if err := n.rec.PublishMember(ctx, m); err != nil {
			t.Fatalf("PublishMember of %s: %v", n.id, err)
		}
	}
	agree("at the start", "none")
	if _, err := ha.Term.WriteBreadcrumb(ctx, crumb("a", e1), cluster.Revision{}); err != nil {
		t.Fatalf("WriteBreadcrumb of a: %v", err)
	}
	publish(t, na, cluster.StateLeader, e1)
	agree("a promoted", fmt.Sprintf("a@%d pos -", e1))
	for i := range int64(3) {
		withPos(nb, "standby", 0, 100+i)
	}
	time.Sleep(quietInterval)
	agree("after b's record changed three times", fmt.Sprintf("a@%d pos -", e1))
	withPos(na, cluster.StateLeader, e1, 7)
	agree("a's position moved", fmt.Sprintf("a@%d pos 7", e1))
	ha.Release()
	hb := ar.nextBy(t, "b")
	e2 := hb.Epoch()
	publish(t, nb, "promoting", e2)
	if _, err := hb.Term.WriteBreadcrumb(ctx, crumb("b", e2), zeroOr(t, hb.Term)); err != nil {
		t.Fatalf("WriteBreadcrumb of b: %v", err)
	}
	agree("b's breadcrumb, b promoting", "none")
	withPos(nb, cluster.StateLeader, e2, 9)
	agree("b promoted", fmt.Sprintf("b@%d pos 9", e2))
	withPos(na, "standby", 0, 8)
	time.Sleep(quietInterval)
	agree("after a stood by", fmt.Sprintf("b@%d pos 9", e2))
	ld.checkOrder(t)
}
