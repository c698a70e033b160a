package zkcluster

import (
	"context"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/test/zktest"
)

// A new leader's first breadcrumb read is taken from the leader view's
// read on its session only when that read names it at its epoch (see
// bcRead.namesTerm): an answer naming another node, or this node at
// another epoch, or a failed read, makes it read afresh, and then it sees
// what the znode holds.
func TestPrefetchTakesTheViewsReadOnlyWhenItNamesTheTerm(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	s, c := newStore(t, zkc, "b", "inst-b")
	sess := session(t, c)
	const epoch = 4242
	real := breadcrumb.Record{NodeID: "a", Host: "host-a", Epoch: 7, Since: time.Now().UTC()}
	data, err := breadcrumb.Encode(real)
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(ctx, testLayout.Breadcrumb(), data, 0); err != nil {
		t.Fatal(err)
	}
	ours := breadcrumb.Record{NodeID: "b", Host: "host-b", Epoch: epoch, Since: time.Now().UTC()}
	enc := func(r breadcrumb.Record) []byte {
		b, err := breadcrumb.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name     string
		view     []byte
		viewErr  error
		fromView bool
	}{
		{"names this term", enc(ours), nil, true},
		{"names another node", enc(breadcrumb.Record{NodeID: "c", Host: "host-c", Epoch: epoch, Since: time.Now().UTC()}), nil, false},
		{"names this node at another epoch", enc(breadcrumb.Record{NodeID: "b", Host: "host-b", Epoch: epoch - 1, Since: time.Now().UTC()}), nil, false},
		{"unreadable", []byte("{not json"), nil, false},
		{"failed", nil, context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.startBreadcrumbRead(sess)
			p := s.prefetchReads(sess, epoch)
			r.finish(tc.view, 12, tc.viewErr) // answered after the prefetch began waiting for it
			select {
			case <-p.bcDone:
			case <-time.After(10 * time.Second):
				t.Fatal("the prefetched breadcrumb read did not end")
			}
			if p.bcFromView != tc.fromView {
				t.Fatalf("taken from the view: %v, want %v", p.bcFromView, tc.fromView)
			}
			want, wantVer := real, int32(0)
			if tc.fromView {
				want, wantVer = ours, 12
			}
			if p.bcErr != nil || p.bc.NodeID != want.NodeID || p.bc.Epoch != want.Epoch || p.bcVer != wantVer {
				t.Fatalf("prefetched %+v@%d, %v; want %+v@%d", p.bc, p.bcVer, p.bcErr, want, wantVer)
			}
		})
	}
	// An old read is not waited for.
	old := &bcRead{sess: sess, at: time.Now().Add(-time.Second), done: make(chan struct{})}
	s.bcRead.Store(old)
	if s.recentBreadcrumbRead(sess) != nil {
		t.Fatal("a view read older than prefetchMaxAge was taken")
	}
}

// At the start of a term with prefetched reads, ReadBreadcrumb takes the
// view's read when it names the term and is answered first, and the
// prefetched one otherwise.
func TestReadBreadcrumbRacesTheViewsRead(t *testing.T) {
	zkc := zktest.Start(t, 1)
	s, c := newStore(t, zkc, "b", "inst-b")
	sess := session(t, c)
	const epoch = 99
	ours := breadcrumb.Record{NodeID: "b", Host: "host-b", Epoch: epoch, Since: time.Now().UTC()}
	data, err := breadcrumb.Encode(ours)
	if err != nil {
		t.Fatal(err)
	}
	newTerm := func() (*term, *prefetched) {
		p := &prefetched{at: time.Now(), bcDone: make(chan struct{}), foDone: make(chan struct{})}
		return &term{l: election.Leadership{Epoch: epoch, NodeID: "b", Session: sess, Prefetched: p}, s: s}, p
	}

	// The prefetched read still in flight, the view's answered: the view's.
	tm, _ := newTerm()
	s.startBreadcrumbRead(sess).finish(data, 5, nil)
	got, v, err := tm.ReadBreadcrumb(t.Context())
	if err != nil || got.NodeID != "b" || got.Epoch != epoch || v != 5 {
		t.Fatalf("ReadBreadcrumb = %+v@%d, %v; want the view's record at version 5", got, v, err)
	}

	// The view's names another node: the prefetched answer, once it comes.
	tm, p := newTerm()
	other, _ := breadcrumb.Encode(breadcrumb.Record{NodeID: "a", Host: "host-a", Epoch: 3, Since: time.Now().UTC()})
	s.startBreadcrumbRead(sess).finish(other, 4, nil)
	go func() {
		time.Sleep(50 * time.Millisecond)
		p.bc, p.bcVer = breadcrumb.Record{NodeID: "a", Host: "host-a", Epoch: 3}, 6
		close(p.bcDone)
	}()
	got, v, err = tm.ReadBreadcrumb(t.Context())
	if err != nil || got.NodeID != "a" || v != 6 {
		t.Fatalf("ReadBreadcrumb = %+v@%d, %v; want the prefetched answer at version 6", got, v, err)
	}
}

// The failover request is taken from the failover watch's last read, with
// no read of its own, only while that watch saw no event since: a request
// written before the predecessor's election entry went is seen by the new
// leader's prefetched read, whichever goroutine reports the events first.
func TestPrefetchedFailoverRequestIsCurrentAsOfTheHandoff(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	_, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	sa, ca := newStore(t, zkc, "a", "inst-a")
	sb, cb := newStore(t, zkc, "b", "inst-b")
	// In the rounds with a request, the watch reads again only after the
	// check: the prefetch must not take its older value.
	hold := make(chan chan struct{}, 1)
	sb.afterFailoverEvent = func() {
		select {
		case h := <-hold:
			<-h
		default:
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	seen := make(chan *cluster.FailoverRequest, 16)
	go sb.WatchFailover(wctx, func(r *cluster.FailoverRequest) { seen <- r })
	select {
	case <-seen:
	case <-time.After(20 * time.Second):
		t.Fatal("the failover watch read nothing")
	}
	counted := map[bool]int{}
	for round := 0; counted[true] < 3 || counted[false] < 3; round++ {
		if round == 20 {
			t.Fatalf("only %d rounds with a request and %d without won through the predecessor's deletion", counted[true], counted[false])
		}
		ta, stopA := campaignFair(t, sa, ca, "a")
		a := nextTerm(t, ta)
		tb, stopB := campaignFair(t, sb, cb, "b")
		waitQueueLen(t, adm, 2)
		time.Sleep(100 * time.Millisecond) // b's watch on a's entry is set
		withRequest := round%2 == 1
		release := make(chan struct{})
		if withRequest {
			hold <- release
			// Written, then a's entry deleted right away: b's session gets
			// the failover event first, its goroutines may see it later.
			if err := sa.RequestFailover(ctx, cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "r", By: "test"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := adm.Delete(ctx, a.l.Path, -1); err != nil {
			t.Fatal(err)
		}
		b := nextTerm(t, tb)
		p, _ := b.l.Prefetched.(*prefetched)
		if p == nil {
			// b found itself first before its watch on a's entry was set.
			t.Logf("round %d: b won without prefetched reads; not counted", round)
		} else {
			counted[withRequest]++
			checkPrefetchedFailover(t, round, p, withRequest)
		}
		close(release)
		stopB()
		stopA()
		if withRequest {
			if err := adm.Delete(ctx, testLayout.Failover(), -1); err != nil {
				t.Fatal(err)
			}
			// The watch reads the deletion before the next round.
			waitFor(t, 20*time.Second, "the failover watch to see the request go", func() bool {
				r, ok := sb.failoverNow(session(t, cb))
				return ok && r == nil
			})
		}
		waitQueueLen(t, adm, 0)
	}
}

func checkPrefetchedFailover(t *testing.T, round int, p *prefetched, withRequest bool) {
	t.Helper()
	// The prefetched answer itself (ReadFailover takes it only while
	// it is fresh, and these electors are cold standbys).
	select {
	case <-p.foDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the prefetched failover read did not end")
	}
	fo := p.fo
	switch {
	case withRequest && (fo == nil || fo.To != "c"):
		t.Fatalf("round %d: b's first read of the failover request = %+v (from the watch: %v); want the request to c written before a's entry went", round, fo, p.foFromWatch)
	case !withRequest && (fo != nil || !p.foFromWatch):
		t.Fatalf("round %d: no request: got %+v, from the watch %v; want none, taken from the watch", round, fo, p.foFromWatch)
	}
	if withRequest && p.foFromWatch {
		t.Fatalf("round %d: the failover watch's value was taken although its watch fired and it had not read again", round)
	}
}

// The read the leader view is about to send is waited for only when the
// view's watch on the breadcrumb has fired on that session: then the read
// it posts is returned; without an event nothing is waited for; with an
// event but no read posted, the wait ends after viewReadWait.
func TestComingBreadcrumbRead(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	s, c := newStore(t, zkc, "b", "inst-b")
	sess := session(t, c)
	_, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	if err := adm.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := adm.Create(ctx, testLayout.Breadcrumb(), []byte("{}"), 0); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w := newWatchSet(wctx)
	if _, err := s.breadcrumbRecord(ctx, sess, w); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { viewReadWait = d }(viewReadWait)
	// Armed, no event: nothing coming, no wait (of the 10 s it could be).
	viewReadWait = 10 * time.Second
	start := time.Now()
	if r := s.comingBreadcrumbRead(ctx, sess, start); r != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("without an event: %v after %v; want nil at once", r, time.Since(start))
	}
	if _, err := adm.Set(ctx, testLayout.Breadcrumb(), []byte("{ }"), -1); err != nil {
		t.Fatal(err)
	}
	if err := sess.Sync(ctx, testLayout.Breadcrumb()); err != nil { // the event has arrived
		t.Fatal(err)
	}
	// The event, no read posted: nil after viewReadWait.
	viewReadWait = 100 * time.Millisecond
	start = time.Now()
	if r := s.comingBreadcrumbRead(ctx, sess, start); r != nil || time.Since(start) < viewReadWait {
		t.Fatalf("with no read posted: %v after %v; want nil after %v", r, time.Since(start), viewReadWait)
	}
	// The event, a read posted meanwhile: that read (a wait long enough
	// for any scheduling delay here).
	viewReadWait = 10 * time.Second
	start = time.Now()
	got := make(chan *bcRead, 1)
	go func() { got <- s.comingBreadcrumbRead(ctx, sess, start) }()
	time.Sleep(20 * time.Millisecond)
	posted := s.startBreadcrumbRead(sess)
	select {
	case r := <-got:
		if r != posted {
			t.Fatalf("returned %p, want the read posted after the start %p", r, posted)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("comingBreadcrumbRead did not return")
	}
}

// The leader's prediction of its successor takes the successor's
// addresses from the member watch's list, without reading its member
// record, while no member watch fired since; with no watched list it reads
// the record.
func TestSuccessorTakesAddressesFromTheWatchedList(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	sa, ca := newStore(t, zkc, "a", "inst-a")
	sb, cb := newStore(t, zkc, "b", "inst-b")
	mb := member("b", "inst-b", "standby")
	mb.AdminURL, mb.ServiceAddress = "http://b:9101", "10.0.0.2:6379"
	if err := sb.PublishMember(ctx, mb); err != nil {
		t.Fatal(err)
	}
	ta, _ := campaignFair(t, sa, ca, "a")
	a := nextTerm(t, ta)
	campaignFair(t, sb, cb, "b")
	_, ac := newStore(t, zkc, "", "")
	waitQueueLen(t, session(t, ac), 2)
	check := func(next *cluster.Successor, err error) {
		t.Helper()
		if err != nil || next == nil || next.Record.NodeID != "b" || next.Record.Host != mb.Host || next.Record.AdminURL != mb.AdminURL || next.Record.ServiceAddress != mb.ServiceAddress {
			t.Fatalf("Successor = %+v, %v; want b with its member record's addresses", next, err)
		}
	}
	// No watched list: the record is read.
	before := sa.memberReads.Load()
	check(a.Successor(ctx))
	if sa.memberReads.Load() == before {
		t.Fatal("no member record read without a watched list")
	}
	// A watched list: taken from it.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go sa.WatchMembers(wctx, func([]cluster.Member) {})
	waitFor(t, 20*time.Second, "the watched member list", func() bool {
		_, ok := sa.cachedMembers(a.l.Session)
		return ok
	})
	before = sa.memberReads.Load()
	check(a.Successor(ctx))
	if n := sa.memberReads.Load() - before; n != 0 {
		t.Fatalf("%d member record reads with a watched list; want none", n)
	}
}
