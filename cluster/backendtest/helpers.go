package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// Timeouts are generous: the suite runs on loaded machines, and a timeout
// only ever turns a slow pass into a failure.
const (
	winTimeout    = 45 * time.Second // a campaigning node wins once its predecessor is gone
	watchTimeout  = 30 * time.Second // a watch delivers a change
	endTimeout    = 45 * time.Second // a backend notices that a term ended
	opTimeout     = 30 * time.Second // one read or write
	stopTimeout   = 60 * time.Second // a candidacy returns once cancelled
	hold          = 300 * time.Millisecond
	pollInterval  = 10 * time.Millisecond
	quietInterval = 500 * time.Millisecond // how long "nothing more happens" is watched
)

// ctxT is a context for one operation of t.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls ok until it holds, failing t after d.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(pollInterval)
	}
}

// fault is how a test ends a term.
type fault int

const (
	faultRelease     fault = iota // the won callback returns
	faultDeleteEntry              // Backend.DeleteEntry
	faultEndSession               // Backend.EndSession
)

func (f fault) String() string {
	return [...]string{"release", "delete entry", "end session"}[f]
}

// apply ends h's term by f.
func (f fault) apply(t *testing.T, b Backend, h *held) {
	t.Helper()
	switch f {
	case faultRelease:
		h.Release()
	case faultDeleteEntry:
		b.DeleteEntry(t, h.Node)
	case faultEndSession:
		b.EndSession(t, h.Node)
	}
}

// held is one term won by a node of an arena: the won callback holds it
// until Release or until the term's context ends.
type held struct {
	Node string
	Term cluster.Term
	Ctx  context.Context // the term's context
	Won  time.Time       // when the won callback began

	release  chan struct{}
	once     sync.Once
	returned chan struct{} // closed when the won callback returned
}

// Release makes the won callback return: the node gives the term back.
func (h *held) Release() { h.once.Do(func() { close(h.release) }) }

// Epoch is the term's epoch.
func (h *held) Epoch() int64 { return h.Term.Epoch() }

// waitEnded waits until the term's context ended and returns its cause.
func (h *held) waitEnded(t *testing.T) error {
	t.Helper()
	select {
	case <-h.Ctx.Done():
		return context.Cause(h.Ctx)
	case <-time.After(endTimeout):
		t.Fatalf("the term of %s (epoch %d) did not end within %v", h.Node, h.Epoch(), endTimeout)
		return nil
	}
}

// waitReturned waits until the won callback returned.
func (h *held) waitReturned(t *testing.T) {
	t.Helper()
	select {
	case <-h.returned:
	case <-time.After(endTimeout):
		t.Fatalf("the won callback of %s (epoch %d) did not return within %v", h.Node, h.Epoch(), endTimeout)
	}
}

// node is a node of an arena.
type node struct {
	id  string
	el  cluster.Elector
	rec cluster.Records

	cancel context.CancelFunc // nil: not campaigning
	done   chan struct{}
}

// stop ends the node's candidacy and waits for Campaign to return.
func (n *node) stop(t *testing.T) {
	t.Helper()
	if n.cancel == nil {
		return
	}
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(stopTimeout):
		t.Errorf("the candidacy of %s did not return within %v of its cancellation", n.id, stopTimeout)
	}
}

// arena is the nodes of one test and every term they won, in the order
// they were won. It checks on every win that the new epoch is positive and
// above every earlier one, and, when exclusive, that no other term still
// held has its Expiry in the future.
type arena struct {
	t         *testing.T
	b         Backend
	exclusive bool

	mu         sync.Mutex
	wins       chan *held
	all        []*held
	holding    map[*held]bool
	violations []string
	nodes      map[string]*node
}

func newArena(t *testing.T, b Backend) *arena {
	a := &arena{t: t, b: b, wins: make(chan *held, 256), holding: map[*held]bool{}, nodes: map[string]*node{}}
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, v := range a.violations {
			t.Error(v)
		}
	})
	return a
}

// add makes node id of the arena without campaigning.
func (a *arena) add(id string) *node {
	a.t.Helper()
	el, rec := a.b.Node(a.t, id)
	return a.adopt(id, el, rec)
}

// adopt adds a node made elsewhere (a Partition's).
func (a *arena) adopt(id string, el cluster.Elector, rec cluster.Records) *node {
	a.t.Helper()
	if el == nil || rec == nil {
		a.t.Fatalf("backend returned node %s without an Elector or Records", id)
	}
	n := &node{id: id, el: el, rec: rec}
	a.mu.Lock()
	a.nodes[id] = n
	a.mu.Unlock()
	return n
}

// campaign makes node id and starts its candidacy, until the test ends.
func (a *arena) campaign(id string) *node {
	a.t.Helper()
	n := a.add(id)
	a.start(n)
	return n
}

// start starts n's candidacy, until the test ends or n.stop.
func (a *arena) start(n *node) {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	go func() {
		defer close(n.done)
		n.el.Campaign(ctx, func(tctx context.Context, tm cluster.Term) { a.won(n.id, tctx, tm) })
	}()
	a.t.Cleanup(func() { n.stop(a.t) })
}

func (a *arena) violation(format string, args ...any) {
	a.violations = append(a.violations, fmt.Sprintf(format, args...))
}

// won is every node's won callback.
func (a *arena) won(id string, ctx context.Context, tm cluster.Term) {
	h := &held{Node: id, Term: tm, Ctx: ctx, Won: time.Now(), release: make(chan struct{}), returned: make(chan struct{})}
	defer close(h.returned)
	a.mu.Lock()
	if e := tm.Epoch(); e <= 0 {
		a.violation("Epochs: %s won with epoch %d, not positive", id, e)
	}
	for _, o := range a.all {
		if o.Epoch() >= tm.Epoch() {
			a.violation("Epochs: %s won with epoch %d, not above the epoch %d of an earlier term (of %s)", id, tm.Epoch(), o.Epoch(), o.Node)
		}
	}
	if a.exclusive {
		for o := range a.holding {
			if exp, err := o.Term.Expiry(); err == nil && exp.After(h.Won) {
				a.violation("Exclusion: %s won (epoch %d) while %s's term (epoch %d) is valid for %v more",
					id, tm.Epoch(), o.Node, o.Epoch(), exp.Sub(h.Won))
			}
		}
	}
	a.holding[h] = true
	a.all = append(a.all, h)
	a.mu.Unlock()
	select {
	case a.wins <- h:
	default:
		a.mu.Lock()
		a.violation("more than %d terms won", cap(a.wins))
		a.mu.Unlock()
	}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	a.letGo(h)
}

// letGo records that h is no longer held (its callback returns, or its
// term is about to be ended by a write of its own).
func (a *arena) letGo(h *held) {
	a.mu.Lock()
	delete(a.holding, h)
	a.mu.Unlock()
}

// next returns the next term won by any node.
func (a *arena) next(t *testing.T) *held {
	t.Helper()
	select {
	case h := <-a.wins:
		return h
	case <-time.After(winTimeout):
		t.Fatalf("no node won within %v", winTimeout)
		return nil
	}
}

// nextBy returns the next term won by node id; terms that other nodes win
// meanwhile are given back at once.
func (a *arena) nextBy(t *testing.T, id string) *held {
	t.Helper()
	deadline := time.After(winTimeout)
	for {
		select {
		case h := <-a.wins:
			if h.Node == id {
				return h
			}
			h.Release()
		case <-deadline:
			t.Fatalf("%s did not win within %v", id, winTimeout)
			return nil
		}
	}
}

// quiet fails t if any node wins within d (0: if a win is waiting to be
// taken by next).
func (a *arena) quiet(t *testing.T, d time.Duration, why string) {
	t.Helper()
	if d <= 0 {
		select {
		case h := <-a.wins:
			t.Fatalf("%s won (epoch %d) %s", h.Node, h.Epoch(), why)
		default:
		}
		return
	}
	select {
	case h := <-a.wins:
		t.Fatalf("%s won (epoch %d) %s", h.Node, h.Epoch(), why)
	case <-time.After(d):
	}
}

// terms lists every term won so far, in order.
func (a *arena) terms() []*held {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.all)
}

// --- records the tests write ---

var since = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// crumb is the breadcrumb node id writes in the term of epoch.
func crumb(id string, epoch int64) breadcrumb.Record {
	return breadcrumb.Record{Version: breadcrumb.Version, NodeID: id, Host: "host-" + id, Epoch: epoch,
		Since: since.Add(time.Duration(epoch) * time.Second), Instance: "inst-" + id}
}

// sameCrumb compares two breadcrumbs field by field (times by instant).
func sameCrumb(a, b breadcrumb.Record) bool {
	return a.Version == b.Version && a.NodeID == b.NodeID && a.Host == b.Host && a.AdminURL == b.AdminURL &&
		a.Epoch == b.Epoch && a.Since.Equal(b.Since) && a.Instance == b.Instance && a.ServiceAddress == b.ServiceAddress
}

// member is node id's member record in state with epoch.
func member(id, state string, epoch int64) cluster.Member {
	role := "standby"
	if state == cluster.StateLeader {
		role = "leader"
	}
	return cluster.Member{Cluster: "conformance", NodeID: id, Host: "host-" + id, State: state, Role: role,
		Health: "healthy", Epoch: epoch, Since: since.Add(time.Duration(epoch) * time.Second),
		Connected: true, ZKConnected: true, Version: "test", Instance: "inst-" + id}
}

// publish writes n's member record.
func publish(t *testing.T, n *node, state string, epoch int64) {
	t.Helper()
	if err := n.rec.PublishMember(ctxT(t), member(n.id, state, epoch)); err != nil {
		t.Fatalf("PublishMember of %s (%s, epoch %d): %v", n.id, state, epoch, err)
	}
}

// request is a failover request to node to.
func request(id, to, by string) cluster.FailoverRequest {
	return cluster.FailoverRequest{To: to, ID: id, By: by, TimeoutMS: int64(cluster.MaxFailoverTimeout / time.Millisecond),
		Deadline: since.Add(time.Hour)}
}

// position is node id's leader position in the term of epoch.
func position(id string, epoch, pos int64) cluster.LeaderPosition {
	return cluster.LeaderPosition{NodeID: id, Epoch: epoch, Position: pos, At: since.Add(time.Duration(pos) * time.Second)}
}

func samePosition(a, b *cluster.LeaderPosition) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.NodeID == b.NodeID && a.Epoch == b.Epoch && a.Position == b.Position && a.At.Equal(b.At)
}

// historyEntry is the history entry of node id's promotion in the term of
// epoch.
func historyEntry(id string, epoch int64) cluster.HistoryEntry {
	return cluster.HistoryEntry{At: since.Add(time.Duration(epoch) * time.Second), NewLeader: id, NewEpoch: epoch,
		NewHost: "host-" + id, Reason: cluster.HistoryStart, FenceMethod: cluster.FenceNone, DurationMS: 1}
}

// readCrumb is one breadcrumb read: the record, its revision and the kind
// of error (absent, corrupt, or another failure).
type readCrumb struct {
	rec breadcrumb.Record
	rev cluster.Revision
	err error
}

func (r readCrumb) String() string {
	switch {
	case errors.Is(r.err, breadcrumb.ErrAbsent):
		return fmt.Sprintf("absent (revision %s)", r.rev)
	case r.err != nil:
		return fmt.Sprintf("error %v (revision %s)", r.err, r.rev)
	}
	return fmt.Sprintf("%s epoch %d at revision %s", r.rec.NodeID, r.rec.Epoch, r.rev)
}

// same reports whether two reads gave the same answer.
func (r readCrumb) same(o readCrumb) bool {
	if (r.err == nil) != (o.err == nil) || errors.Is(r.err, breadcrumb.ErrAbsent) != errors.Is(o.err, breadcrumb.ErrAbsent) {
		return false
	}
	var c1, c2 *breadcrumb.CorruptError
	if errors.As(r.err, &c1) != errors.As(o.err, &c2) {
		return false
	}
	return r.rev == o.rev && (r.err != nil || sameCrumb(r.rec, o.rec))
}

func readRecords(t *testing.T, r cluster.Records) readCrumb {
	t.Helper()
	rec, rev, err := r.ReadBreadcrumb(ctxT(t))
	return readCrumb{rec, rev, err}
}

func readTerm(t *testing.T, tm cluster.Term) readCrumb {
	t.Helper()
	rec, rev, err := tm.ReadBreadcrumb(ctxT(t))
	return readCrumb{rec, rev, err}
}

// wantCrumb fails t unless got holds want at revision rev.
func wantCrumb(t *testing.T, what string, got readCrumb, want breadcrumb.Record, rev cluster.Revision) {
	t.Helper()
	if got.err != nil || !sameCrumb(got.rec, want) || got.rev != rev {
		t.Fatalf("%s: breadcrumb %s, want %s epoch %d at revision %s", what, got, want.NodeID, want.Epoch, rev)
	}
}

// wantAbsent fails t unless got is "absent" with the zero revision.
func wantAbsent(t *testing.T, what string, got readCrumb) {
	t.Helper()
	if !errors.Is(got.err, breadcrumb.ErrAbsent) || got.rev != (cluster.Revision{}) || got.rev.Exists() {
		t.Fatalf("%s: breadcrumb %s, want breadcrumb.ErrAbsent with the zero revision", what, got)
	}
}

// --- watches ---

// recorder collects what a watch delivers, as strings (show turns a value
// into one), with the time of each delivery.
type recorder struct {
	name string
	mu   sync.Mutex
	got  []string
	at   []time.Time
	// states is what the record was, in order, as the test changed it.
	states []string
	ended  chan error
}

// watchWith starts watch (one of Records' Watch methods, bound to fn) until
// the test ends, recording its deliveries.
func watchWith[T any](t *testing.T, name string, watch func(context.Context, func(T)) error, show func(T) string) *recorder {
	r := &recorder{name: name, ended: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		r.ended <- watch(ctx, func(v T) {
			s := show(v)
			r.mu.Lock()
			r.got = append(r.got, s)
			r.at = append(r.at, time.Now())
			r.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		select {
		case err := <-r.ended:
			t.Errorf("%s returned before its context ended: %v", name, err)
			cancel()
			return
		default:
		}
		cancel()
		select {
		case <-r.ended:
		case <-time.After(stopTimeout):
			t.Errorf("%s did not return within %v of its context's end", name, stopTimeout)
		}
	})
	return r
}

// deliveries returns what the watch delivered so far.
func (r *recorder) deliveries() ([]string, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got), slices.Clone(r.at)
}

// became records that the watched record is now s.
func (r *recorder) became(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
}

// waitLast waits until the last delivery is the record's current state.
func (r *recorder) waitLast(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	want := r.states[len(r.states)-1]
	r.mu.Unlock()
	deadline := time.Now().Add(watchTimeout)
	for {
		got, _ := r.deliveries()
		if len(got) > 0 && got[len(got)-1] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %v the deliveries are %q; want the last to be %q", r.name, watchTimeout, got, want)
		}
		time.Sleep(pollInterval)
	}
}

// checkOrder fails t unless the first delivery was the first state and
// every delivery is a state no older than the one delivered before it.
func (r *recorder) checkOrder(t *testing.T) {
	t.Helper()
	got, _ := r.deliveries()
	r.mu.Lock()
	states := slices.Clone(r.states)
	r.mu.Unlock()
	if len(got) == 0 || got[0] != states[0] {
		t.Errorf("%s: deliveries %q; want the first to be the value at the start, %q", r.name, got, states[0])
		return
	}
	i := 0
	for k, g := range got {
		j := slices.Index(states[i:], g)
		if j < 0 {
			t.Errorf("%s: delivery %d is %q, older than %q (delivered before it) or never the value; deliveries %q, values in order %q",
				r.name, k, g, states[i], got, states)
			return
		}
		i += j
	}
}

func showPause(p *cluster.Pause) string {
	if p == nil {
		return "none"
	}
	return p.By + ":" + p.Reason
}

func showFailover(r *cluster.FailoverRequest) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%s to %s done %t epoch %d", r.ID, r.To, r.Done, r.Epoch)
}

func showMembers(ms []cluster.Member) string {
	var s []string
	for _, m := range ms {
		s = append(s, fmt.Sprintf("%s:%s:%d", m.NodeID, m.State, m.Epoch))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// showMembersFully shows every field of every record (the records'
// encoding).
func showMembersFully(ms []cluster.Member) string {
	b, err := json.Marshal(ms)
	if err != nil {
		return "unencodable: " + err.Error()
	}
	return string(b)
}

func showLeader(l *cluster.Leader) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprintf("%s@%d", l.NodeID, l.Epoch)
}

func leaderName(id string, epoch int64) string { return fmt.Sprintf("%s@%d", id, epoch) }
