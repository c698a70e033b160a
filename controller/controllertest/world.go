// Package controllertest is an in-memory world for the controller's
// state-machine tests: a fair FIFO election whose terms have a fake lease,
// the breadcrumb (versioned, guarded by the term's entry), the failover
// request, member records, and scripted hooks and fencer. It starts no
// goroutines of its own (but for the timer that ends a term whose
// renewals stopped, which fires in its bubble's time), so inside a
// testing/synctest bubble synctest.Wait means "the controller has nothing
// left to do".
package controllertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// ErrGone is the guard's refusal: the term's election entry is gone.
var ErrGone = errors.New("controllertest: election entry gone")

// ErrBadVersion is the breadcrumb's compare-and-set refusal.
var ErrBadVersion = errors.New("controllertest: breadcrumb version changed")

// World is the shared coordination service of the nodes of one test.
type World struct {
	mu       sync.Mutex
	queue    []*entry // the election, in join order: the first one leads
	entries  int      // entries created so far (their names)
	lastZxid int64
	// guarantee is how far ahead of now every valid term's Expiry lies
	// (a lease renewed without fail); session is every term's
	// SessionTimeout; budget is the demote budget of the world's
	// elector: a term whose renewals stopped ends that long before its
	// Expiry (StopRenewals), as the real backends' do.
	guarantee, session, budget time.Duration

	record   *cluster.ClusterRecord // nil: absent (CheckJoin creates it)
	bc       *breadcrumb.Record     // nil: absent
	bcVer    int32
	bcErr    error // ReadBreadcrumb fails with it (corrupt or unreadable)
	failover *cluster.FailoverRequest
	foChange chan struct{} // closed and replaced on every failover change
	members  map[string]cluster.Member
	known    map[string]cluster.KnownMember // persistent: survives DropMember
	nodes    map[string]*Node
	// leaderPos is the LeaderPosition record (nil: absent), posWrites
	// every successful write of it.
	leaderPos *cluster.LeaderPosition
	posWrites []cluster.LeaderPosition
	published map[string]int // member record writes per node
	// lrChange is closed and replaced whenever the breadcrumb or a member
	// record changes: the leader watches look again.
	lrChange chan struct{}
	hideLR   bool // leader changes are not reported to watches
	// termHop > 0: a term's context ends that long after its candidacy's
	// (SetTermHop), as zkcluster's does (one goroutine hop).
	termHop time.Duration

	beforeWrite func(epoch int64) // runs right before a breadcrumb write
	afterWrite  func(epoch int64) // runs right after a successful one
	hideFO      bool              // failover changes are not reported to watches
	lateAnswer  time.Duration     // ProposeFailover answers that late (LateProposeAnswer)
	pause       *cluster.Pause    // nil: not paused
	pauseChange chan struct{}     // closed and replaced on every pause change
	writes      []breadcrumb.Record
	finishes    []int32
	spans       []Span
	history     []cluster.HistoryEntry
	historyErr  error // AppendHistory fails with it (SetHistoryError)
}

// Span is one term as the elector saw it: from the won callback's start to
// its return (To zero: still held).
type Span struct {
	Node     string
	Epoch    int64
	From, To time.Time
}

// Spans lists every term so far, in the order they were won.
func (w *World) Spans() []Span {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Span(nil), w.spans...)
}

// entry is one candidate's election entry (a znode).
type entry struct {
	node  *Node
	turn  chan struct{} // closed when first in line
	first bool
	term  *Term
	// name identifies the entry (Successor.Entry); epoch, once a
	// leader's Successor named this entry, is the epoch it leads with
	// (as a ZooKeeper znode's czxid is fixed when it joins).
	name  string
	epoch int64
}

// New returns an empty world whose terms have a 6s session and expire
// 5.7s ahead of now while valid (as a 4s lease with 1.7s of grace after
// it would); its elector's demote budget is that grace, 1.7s.
func New() *World {
	return &World{
		guarantee:   5700 * time.Millisecond,
		session:     6 * time.Second,
		budget:      1700 * time.Millisecond,
		bcVer:       -1,
		foChange:    make(chan struct{}),
		lrChange:    make(chan struct{}),
		pauseChange: make(chan struct{}),
		members:     map[string]cluster.Member{},
		known:       map[string]cluster.KnownMember{},
		nodes:       map[string]*Node{},
	}
}

// SetGuarantee changes how far ahead of now the Expiry of terms won from
// now on lies.
func (w *World) SetGuarantee(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.guarantee = d
}

// SetDemoteBudget changes the demote budget of the world's elector: how
// long before its Expiry a term whose renewals stopped ends.
func (w *World) SetDemoteBudget(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.budget = d
}

// DemoteBudget is the demote budget of the world's elector.
func (w *World) DemoteBudget() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.budget
}

// Node returns the backend of node id (Elector and Records), creating it.
func (w *World) Node(id string) *Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.nodes[id]
	if n == nil {
		n = &Node{w: w, id: id, session: make(chan struct{})}
		w.nodes[id] = n
	}
	return n
}

// leaderChanged wakes the leader watches. Call with w.mu held.
func (w *World) leaderChanged() {
	if !w.hideLR {
		close(w.lrChange)
		w.lrChange = make(chan struct{})
	}
}

// HideLeader stops (true) or resumes (false) reporting leader changes to
// the nodes' leader watches.
func (w *World) HideLeader(hide bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hideLR = hide
	w.leaderChanged()
}

// PromotedLeader is the promoted leader as cluster.LeaderOf picks it from
// the breadcrumb and the member records (nil: none).
func (w *World) PromotedLeader() *cluster.Leader {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.promotedLeader()
}

func (w *World) promotedLeader() *cluster.Leader {
	members := make([]cluster.Member, 0, len(w.members))
	for _, m := range w.members {
		members = append(members, m)
	}
	return cluster.LeaderOf(w.bc, members)
}

// DropMember deletes node id's member record (its session is gone).
func (w *World) DropMember(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.members, id)
	w.leaderChanged()
}

// promoteFirst gives the first entry its turn. Call with w.mu held.
func (w *World) promoteFirst() {
	if len(w.queue) > 0 && !w.queue[0].first {
		w.queue[0].first = true
		close(w.queue[0].turn)
	}
}

// remove deletes e from the election. Call with w.mu held.
func (w *World) remove(e *entry) bool {
	for i, x := range w.queue {
		if x == e {
			w.queue = append(w.queue[:i:i], w.queue[i+1:]...)
			w.promoteFirst()
			return true
		}
	}
	return false
}

// Queue lists the node ids in the election, first (the leader) first.
func (w *World) Queue() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for _, e := range w.queue {
		ids = append(ids, e.node.id)
	}
	return ids
}

// Term returns node id's current term (nil: none).
func (w *World) Term(id string) *Term {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.queue {
		if e.node.id == id && e.term != nil {
			return e.term
		}
	}
	return nil
}

// Leader returns the id of the node holding a term (first in line), or "".
func (w *World) Leader() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) > 0 && w.queue[0].term != nil {
		return w.queue[0].node.id
	}
	return ""
}

// Expire ends node id's term as a lease expiry: Valid fails at once, its
// entry stays until the term is released.
func (w *World) Expire(id string) { w.end(id, cluster.ErrLeaseExpired, false) }

// ExpireSession ends node id's term as a session expiry: its entry is
// deleted at once and Valid fails.
func (w *World) ExpireSession(id string) { w.end(id, cluster.ErrSessionExpired, true) }

// DeleteZnode deletes node id's entry (an operator's delete): the term
// ends, Expiry fails (the contract: once the term is known to be over),
// the guard fails.
func (w *World) DeleteZnode(id string) { w.end(id, cluster.ErrEntryDeleted, true) }

// Lapse makes node id's term invalid (Valid fails with a lease expiry)
// without ending its context yet: the moment between a lease running out
// and the elector noticing, which only the synchronous re-checks see.
func (w *World) Lapse(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.queue {
		if e.node.id == id && e.term != nil {
			e.term.invalid = cluster.ErrLeaseExpired
			return
		}
	}
	panic(fmt.Sprintf("controllertest: %s holds no term", id))
}

// StopRenewals stops renewing node id's term, as for a leader cut off
// from the coordination service: its Expiry stays where it is now, and the
// term ends (its context, with a lease expiry; Expiry fails) the world's
// demote budget before that, as the contract obliges every backend to; its
// entry stays until the term is released.
func (w *World) StopRenewals(id string) { w.stopRenewals(id, true) }

// StopRenewalsUnnoticed stops renewing node id's term as StopRenewals
// does, but the elector never notices: the term's context does not end
// (a backend that breaks the obligation, or whose elector is late), and
// Expiry fails only once the Expiry it kept has passed.
func (w *World) StopRenewalsUnnoticed(id string) { w.stopRenewals(id, false) }

func (w *World) stopRenewals(id string, noticed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.queue {
		if e.node.id == id && e.term != nil {
			t := e.term
			t.frozen = time.Now().Add(t.guarantee)
			if noticed {
				frozen := t.frozen
				time.AfterFunc(time.Until(frozen.Add(-w.budget)), func() { w.lapse(t, frozen) })
			}
			return
		}
	}
	panic(fmt.Sprintf("controllertest: %s holds no term", id))
}

// lapse ends t, whose renewals stopped at frozen, as its elector would:
// its Expiry less the demote budget has come.
func (w *World) lapse(t *Term, frozen time.Time) {
	cause := fmt.Errorf("%w: not renewed since it was stopped (its Expiry less the demote budget %v passed)", cluster.ErrLeaseExpired, w.DemoteBudget())
	w.mu.Lock()
	if !t.frozen.Equal(frozen) || t.invalid != nil || t.e.term != t {
		w.mu.Unlock()
		return
	}
	t.invalid = cause
	w.mu.Unlock()
	t.cancel(cause)
}

// EndTerm ends node id's term with an arbitrary cause.
func (w *World) EndTerm(id string, cause error) { w.end(id, cause, false) }

func (w *World) end(id string, cause error, deleteEntry bool) {
	w.mu.Lock()
	var t *Term
	for _, e := range w.queue {
		if e.node.id == id && e.term != nil {
			t = e.term
			if deleteEntry {
				w.remove(e)
			}
			break
		}
	}
	if t != nil {
		t.invalid = cause
	}
	if t != nil && cause == cluster.ErrSessionExpired {
		delete(w.members, id) // ephemeral, of the session that ended
		w.leaderChanged()
	}
	w.mu.Unlock()
	if t == nil {
		panic(fmt.Sprintf("controllertest: %s holds no term", id))
	}
	t.cancel(cause)
}

// SetBreadcrumb stores r (nil: deletes it).
func (w *World) SetBreadcrumb(r *breadcrumb.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.leaderChanged()
	if r == nil {
		w.bc, w.bcVer = nil, -1
		return
	}
	rec := *r
	w.bc = &rec
	w.bcVer++
}

// Breadcrumb returns the breadcrumb (nil: absent) and its version.
func (w *World) Breadcrumb() (*breadcrumb.Record, int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bc == nil {
		return nil, -1
	}
	r := *w.bc
	return &r, w.bcVer
}

// SetBreadcrumbError makes every breadcrumb read fail with err (nil: reads work).
func (w *World) SetBreadcrumbError(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bcErr = err
}

// BeforeWrite runs f (with the writer's epoch) right before every
// breadcrumb write, outside the world's lock: the injection point of the
// tests that end a term there.
func (w *World) BeforeWrite(f func(epoch int64)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.beforeWrite = f
}

// AfterWrite runs f right after every successful breadcrumb write, outside
// the world's lock.
func (w *World) AfterWrite(f func(epoch int64)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.afterWrite = f
}

// HideFailover stops (true) or resumes (false) reporting failover changes
// to the nodes' watches; a term's ReadFailover still sees them.
func (w *World) HideFailover(hide bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hideFO = hide
	if !hide {
		close(w.foChange)
		w.foChange = make(chan struct{})
	}
}

// Writes lists the breadcrumbs written, in order.
func (w *World) Writes() []breadcrumb.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]breadcrumb.Record(nil), w.writes...)
}

// Finishes lists the bcVersion of every successful Finish.
func (w *World) Finishes() []int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int32(nil), w.finishes...)
}

// SetFailover stores the failover request (nil: withdraws it).
func (w *World) SetFailover(r *cluster.FailoverRequest) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setFailoverLocked(r)
}

func (w *World) setFailoverLocked(r *cluster.FailoverRequest) {
	if r != nil {
		c := *r
		r = &c
	}
	w.failover = r
	if !w.hideFO {
		close(w.foChange)
		w.foChange = make(chan struct{})
	}
}

// Failover returns the failover request (nil: none).
func (w *World) Failover() *cluster.FailoverRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failover == nil {
		return nil
	}
	r := *w.failover
	return &r
}

// Member returns node id's published record.
func (w *World) Member(id string) (cluster.Member, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.members[id]
	return m, ok
}

// Node is one node's view of the world: it implements controller.Elector
// and controller.Records.
type Node struct {
	w         *World
	id        string
	joinErr   error // CheckJoin's answer
	pubErr    error // PublishMember's answer
	session   chan struct{}
	warm      bool
	hidePause bool   // the pause watch reports nothing
	pos       *int64 // SetPosition: published in every member record
	refusal   error  // SetRefusal: the elector stays out
	foBlind   bool   // SetFailoverBlind: the failover watch reports only its first value
	offline   bool   // SetConnected(false): Connected reports false
}

// SetFailoverBlind makes the node's failover watch report nothing after
// its first value, as a watch whose notification is late: the node learns
// of a request only from a term's first read.
func (n *Node) SetFailoverBlind(on bool) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.foBlind = on
}

// SetRefusal makes the node's elector stay out of the election (Campaign
// waits without joining the queue, Refusal says err), as zkcluster's does
// when the lease cannot fit the granted session timeout; nil lets it in.
func (n *Node) SetRefusal(err error) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.refusal = err
	if err == nil {
		n.w.leaderChanged() // wakes a Campaign waiting for it
	}
}

// SetPosition makes every member record this node publishes from now on
// carry position p (nil: what the controller publishes), as if its
// position command printed it; the current record changes at once.
func (n *Node) SetPosition(p *int64) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.pos = p
	if m, ok := n.w.members[n.id]; ok && p != nil {
		v := *p
		m.Position = &v
		n.w.members[n.id] = m
		n.w.leaderChanged()
	}
}

// SetJoinError makes CheckJoin answer err (a *cluster.ModeMismatchError is
// a refusal, anything else a failure to check).
func (n *Node) SetJoinError(err error) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.joinErr = err
}

// SetPublishError makes PublishMember answer err (a
// *cluster.DuplicateIDError is a refusal).
func (n *Node) SetPublishError(err error) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.pubErr = err
}

// Warmed reports the last Warm hint.
func (n *Node) Warmed() bool {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	return n.warm
}

// Campaign joins the election until ctx ends: fair and FIFO, one entry per
// term, a new entry after each term (as the ZooKeeper elector does).
func (n *Node) Campaign(ctx context.Context, won func(context.Context, cluster.Term)) error {
	w := n.w
	for ctx.Err() == nil {
		w.mu.Lock()
		if n.refusal != nil {
			ch := w.lrChange
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-ch:
			}
			continue
		}
		w.entries++
		e := &entry{node: n, turn: make(chan struct{}), name: fmt.Sprintf("entry-%d", w.entries)}
		w.queue = append(w.queue, e)
		w.promoteFirst()
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.remove(e)
			w.mu.Unlock()
			return nil
		case <-e.turn:
		}
		w.mu.Lock()
		epoch := e.epoch
		if epoch == 0 {
			w.lastZxid++
			epoch = w.lastZxid
		}
		tctx, cancel := context.WithCancelCause(ctx)
		if d := w.termHop; d > 0 {
			tctx, cancel = context.WithCancelCause(context.WithoutCancel(ctx))
			end := cancel
			context.AfterFunc(ctx, func() { time.Sleep(d); end(context.Cause(ctx)) })
		}
		t := &Term{w: w, e: e, epoch: epoch, guarantee: w.guarantee, session: w.session, ctx: tctx, cancel: cancel}
		e.term = t
		span := len(w.spans)
		w.spans = append(w.spans, Span{Node: n.id, Epoch: t.epoch, From: time.Now()})
		w.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			won(tctx, t)
		}()
		select {
		case <-done:
			cancel(cluster.ErrReleased)
		case <-tctx.Done():
			<-done
		}
		w.mu.Lock()
		w.spans[span].To = time.Now()
		e.term = nil
		w.remove(e)
		w.mu.Unlock()
	}
	return nil
}

// Refusal says what SetRefusal set.
func (n *Node) Refusal() error {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	return n.refusal
}

// Warm records the hint.
func (n *Node) Warm(on bool) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.warm = on
}

// PublishMember stores m unless SetPublishError says otherwise.
func (n *Node) PublishMember(ctx context.Context, m cluster.Member) error {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	if n.pubErr != nil {
		return n.pubErr
	}
	if n.pos != nil {
		v := *n.pos
		m.Position = &v
	}
	n.w.members[n.id] = m
	if n.w.published == nil {
		n.w.published = map[string]int{}
	}
	n.w.published[n.id]++
	n.w.leaderChanged()
	return nil
}

// Publishes counts node id's member record writes so far.
func (w *World) Publishes(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.published[id]
}

// CheckJoin answers what SetJoinError said when it said something; else
// it checks the cluster record as a backend does (cluster.Admit), creating
// it for a node with no home.
func (n *Node) CheckJoin(ctx context.Context, mode, home string) (cluster.ClusterRecord, error) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	if n.joinErr != nil || mode == "" {
		return cluster.ClusterRecord{}, n.joinErr
	}
	if n.w.record == nil && home == "" {
		n.w.record = &cluster.ClusterRecord{ElectionMode: mode, ID: cluster.NewRecordID()}
	}
	if err := cluster.Admit(n.w.record, cluster.Layout{Root: "/failoverd", Cluster: "ct"}.Config(), mode, home); err != nil {
		return cluster.ClusterRecord{}, err
	}
	return *n.w.record, nil
}

// SetClusterRecord replaces the cluster record (nil: none), as a move of
// the cluster (failoverd migrate) or an operator would.
func (w *World) SetClusterRecord(r *cluster.ClusterRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r != nil {
		c := *r
		r = &c
	}
	w.record = r
}

// WatchFailover calls fn with the request now and after every change.
func (n *Node) WatchFailover(ctx context.Context, fn func(*cluster.FailoverRequest)) error {
	w := n.w
	for {
		w.mu.Lock()
		ch := w.foChange
		var r *cluster.FailoverRequest
		if w.failover != nil {
			c := *w.failover
			r = &c
		}
		blind := n.foBlind
		w.mu.Unlock()
		fn(r)
		if blind {
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// WatchLeader calls fn with the promoted leader now and after every change
// (by Same or by any field).
func (n *Node) WatchLeader(ctx context.Context, fn func(*cluster.Leader)) error {
	w := n.w
	var last *cluster.Leader
	for first := true; ; first = false {
		w.mu.Lock()
		ch := w.lrChange
		ld := w.promotedLeader()
		w.mu.Unlock()
		if first || !ld.Equal(last) {
			fn(ld)
			last = ld
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// ExpireFailover deletes the request with key id unless it is done.
// ReadFailover returns the standing request (nil: none).
func (n *Node) ReadFailover(ctx context.Context) (*cluster.FailoverRequest, error) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	if n.w.failover == nil {
		return nil, nil
	}
	r := *n.w.failover
	return &r, nil
}

func (n *Node) ExpireFailover(ctx context.Context, id string) error {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failover == nil || w.failover.Key() != id || w.failover.Done {
		return nil
	}
	w.setFailoverLocked(nil)
	return nil
}

// RequestFailover stores r, replacing any request (as the CLI's does).
func (n *Node) RequestFailover(ctx context.Context, r cluster.FailoverRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.w.SetFailover(&r)
	return nil
}

// ProposeFailover stores r unless a request that is not done stands
// (ErrFailoverStands), as zkcluster's does.
func (n *Node) ProposeFailover(ctx context.Context, r cluster.FailoverRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := n.w
	w.mu.Lock()
	if w.failover != nil && !w.failover.Done {
		w.mu.Unlock()
		return ErrFailoverStands
	}
	w.setFailoverLocked(&r)
	late := w.lateAnswer
	w.mu.Unlock()
	if late > 0 {
		// The answer travels late: the watches report the request (and
		// the writer's loop acts on it) before the writer hears back.
		time.Sleep(late)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// LateProposeAnswer makes every ProposeFailover answer d after the
// request is stored (and reported to the watches).
func (w *World) LateProposeAnswer(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lateAnswer = d
}

// ErrFailoverStands is ProposeFailover's refusal.
var ErrFailoverStands = errors.New("controllertest: a failover request stands already")

// WithdrawFailover deletes the request with key id (whoever wrote it:
// the world has no sessions).
func (n *Node) WithdrawFailover(ctx context.Context, id string) error {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failover != nil && w.failover.Key() == id {
		w.setFailoverLocked(nil)
	}
	return nil
}

// WatchMembers calls fn with every member record (Members) now and after
// every change of any of its fields (cluster.SameMembers).
func (n *Node) WatchMembers(ctx context.Context, fn func([]cluster.Member)) error {
	w := n.w
	var last []cluster.Member
	for first := true; ; first = false {
		w.mu.Lock()
		ch := w.lrChange
		w.mu.Unlock()
		ms := w.Members()
		if first || !cluster.SameMembers(ms, last) {
			fn(ms)
			last = ms
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// ReadBreadcrumb reads the breadcrumb outside a term.
func (n *Node) ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, cluster.Revision, error) {
	return n.w.readBreadcrumb()
}

func (w *World) readBreadcrumb() (breadcrumb.Record, cluster.Revision, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.bcErr != nil:
		return breadcrumb.Record{}, rev(w.bcVer), w.bcErr
	case w.bc == nil:
		return breadcrumb.Record{}, cluster.Revision{}, breadcrumb.ErrAbsent
	}
	return *w.bc, rev(w.bcVer), nil
}

// rev is the world's breadcrumb version v as a revision (-1: absent).
func rev(v int32) cluster.Revision {
	if v < 0 {
		return cluster.Revision{}
	}
	return cluster.RevisionOf(int64(v))
}

// ver is the version r stands for (-1: absent).
func ver(r cluster.Revision) int32 {
	n, ok := r.Backend()
	if !ok {
		return -1
	}
	return int32(n)
}

// SessionChanged is never closed here.
func (n *Node) SessionChanged() <-chan struct{} { return n.session }

// Connected is true unless SetConnected said otherwise.
func (n *Node) Connected() bool {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	return !n.offline
}

// SetConnected sets what Connected reports (nothing else changes: the
// node's session and records stay).
func (n *Node) SetConnected(on bool) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.offline = !on
}

// Term is one leadership in the world; it implements cluster.Term.
type Term struct {
	w         *World
	e         *entry
	epoch     int64
	guarantee time.Duration
	session   time.Duration
	ctx       context.Context // the term's context, handed to won
	cancel    context.CancelCauseFunc
	invalid   error     // set under w.mu
	frozen    time.Time // StopRenewals: the Expiry the term keeps (zero: renewed)
}

// Epoch is the term's fencing token.
func (t *Term) Epoch() int64 { return t.epoch }

// Expiry lies the world's guarantee ahead of now while the term is valid
// and renewed; it fails once Expire or ExpireSession ended the term, once
// the term's context ended (as zkcluster's: the elector no longer renews
// a term whose candidacy ended), and once a term that StopRenewals
// stopped is past the Expiry it kept.
func (t *Term) Expiry() (time.Time, error) {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	switch {
	case t.invalid != nil:
		return time.Time{}, t.invalid
	case t.ctx != nil && t.ctx.Err() != nil:
		return time.Time{}, context.Cause(t.ctx)
	case !t.frozen.IsZero() && !time.Now().Before(t.frozen):
		return time.Time{}, fmt.Errorf("%w: not renewed since it was stopped", cluster.ErrLeaseExpired)
	case !t.frozen.IsZero():
		return t.frozen, nil
	}
	return time.Now().Add(t.guarantee), nil
}

// SessionTimeout is the world's session timeout when the term was won.
func (t *Term) SessionTimeout() time.Duration { return t.session }

// ReadBreadcrumb reads the breadcrumb.
func (t *Term) ReadBreadcrumb(ctx context.Context) (breadcrumb.Record, cluster.Revision, error) {
	if err := ctx.Err(); err != nil {
		return breadcrumb.Record{}, cluster.Revision{}, err
	}
	return t.w.readBreadcrumb()
}

// present reports whether the term's entry still exists. Call with w.mu held.
func (t *Term) present() bool {
	for _, e := range t.w.queue {
		if e == t.e {
			return true
		}
	}
	return false
}

// WriteBreadcrumb writes r guarded by the term's entry, compare-and-set on version.
func (t *Term) WriteBreadcrumb(ctx context.Context, r breadcrumb.Record, r0 cluster.Revision) (cluster.Revision, error) {
	version := ver(r0)
	t.w.mu.Lock()
	f := t.w.beforeWrite
	t.w.mu.Unlock()
	if f != nil {
		f(t.epoch)
	}
	if err := ctx.Err(); err != nil {
		return cluster.Revision{}, err
	}
	w := t.w
	w.mu.Lock()
	switch {
	case !t.present():
		w.mu.Unlock()
		return cluster.Revision{}, ErrGone
	case version != w.bcVer:
		w.mu.Unlock()
		return cluster.Revision{}, ErrBadVersion
	}
	w.bc = &r
	w.bcVer++
	w.writes = append(w.writes, r)
	w.leaderChanged()
	v, after := w.bcVer, w.afterWrite
	w.mu.Unlock()
	if after != nil {
		after(t.epoch)
	}
	return rev(v), nil
}

// ReadFailover returns the request.
func (t *Term) ReadFailover(ctx context.Context) (*cluster.FailoverRequest, error) {
	return t.w.Failover(), nil
}

// CompleteFailover marks a request to this node done, guarded by the
// term's entry as zkcluster's is.
func (t *Term) CompleteFailover(ctx context.Context, epoch int64) error {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.failover
	if r == nil || r.To != t.e.node.id || r.Done {
		return nil
	}
	if !t.present() {
		return ErrGone
	}
	d := *r
	d.Done, d.Epoch = true, epoch
	w.setFailoverLocked(&d)
	return nil
}

// Finish deletes the breadcrumb (at bcVersion) and the entry in one step.
func (t *Term) Finish(ctx context.Context, r cluster.Revision) error {
	bcVersion := ver(r)
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !t.present():
		return ErrGone
	case w.bc == nil || w.bcVer != bcVersion:
		return ErrBadVersion
	}
	w.finishes = append(w.finishes, bcVersion)
	w.bc, w.bcVer = nil, -1
	w.leaderChanged()
	w.remove(t.e)
	return nil
}

// ReadMembers returns every member record, sorted by node id as
// zkcluster lists them.
func (t *Term) ReadMembers(ctx context.Context) ([]cluster.Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.w.Members(), nil
}

// RememberMember writes k's known-member record (the world has no
// revisions to race on: its lock is the compare-and-set).
func (n *Node) RememberMember(ctx context.Context, k cluster.KnownMember) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.w.known[k.NodeID] = k
	return nil
}

// KnownMembers lists the known-member records, sorted by node id.
func (n *Node) KnownMembers(ctx context.Context) ([]cluster.KnownMember, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.w.Known(), nil
}

// Known lists the known-member records, sorted by node id.
func (w *World) Known() []cluster.KnownMember {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]cluster.KnownMember, 0, len(w.known))
	for _, k := range w.known {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b cluster.KnownMember) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// ForgetMember deletes id's known-member record unless its member record
// exists.
func (n *Node) ForgetMember(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	if _, live := n.w.members[id]; live {
		return false, fmt.Errorf("forgetting %s: %w", id, cluster.ErrMemberLive)
	}
	_, ok := n.w.known[id]
	delete(n.w.known, id)
	return ok, nil
}

// Members returns every member record, sorted by node id.
func (w *World) Members() []cluster.Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]cluster.Member, 0, len(w.members))
	for _, m := range w.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b cluster.Member) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// ReadLeaderPosition returns the LeaderPosition record (nil: none).
func (t *Term) ReadLeaderPosition(ctx context.Context) (*cluster.LeaderPosition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.w.LeaderPosition(), nil
}

// WriteLeaderPosition stores p guarded by the term's entry, and refuses
// one of an earlier epoch than the record's, as zkcluster's does.
func (t *Term) WriteLeaderPosition(ctx context.Context, p cluster.LeaderPosition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !t.present():
		return ErrGone
	case w.leaderPos != nil && w.leaderPos.Epoch > p.Epoch:
		return cluster.ErrStalePosition
	}
	w.leaderPos = &p
	w.posWrites = append(w.posWrites, p)
	return nil
}

// LeaderPosition returns the LeaderPosition record (nil: none).
func (w *World) LeaderPosition() *cluster.LeaderPosition {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.leaderPos == nil {
		return nil
	}
	p := *w.leaderPos
	return &p
}

// SetLeaderPosition stores the LeaderPosition record (nil: deletes it),
// as a dead leader of an earlier term left it.
func (w *World) SetLeaderPosition(p *cluster.LeaderPosition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p != nil {
		c := *p
		p = &c
	}
	w.leaderPos = p
}

// PositionWrites lists every successful WriteLeaderPosition, in order.
func (w *World) PositionWrites() []cluster.LeaderPosition {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]cluster.LeaderPosition(nil), w.posWrites...)
}

// AppendHistory appends e (cluster.AppendHistory) guarded by the term's
// entry, as zkcluster's does, unless SetHistoryError says otherwise.
func (t *Term) AppendHistory(ctx context.Context, e cluster.HistoryEntry) (cluster.HistoryEntry, error) {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.historyErr != nil:
		return e, w.historyErr
	case !t.present():
		return e, ErrGone
	}
	var stored cluster.HistoryEntry
	w.history, stored, _ = cluster.AppendHistory(w.history, e)
	return stored, nil
}

// History lists the history entries, oldest first.
func (w *World) History() []cluster.HistoryEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]cluster.HistoryEntry(nil), w.history...)
}

// SetHistoryError makes every AppendHistory fail with err (nil: appends work).
func (w *World) SetHistoryError(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.historyErr = err
}

// SetTermHop makes every later term's context end d after its candidacy's
// context, not with it: zkcluster translates the cause on its way down
// (termContext), one goroutine hop later, and the controller must not
// rely on the context alone to see that it ended a candidacy itself.
func (w *World) SetTermHop(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.termHop = d
}

// SetPause pauses the cluster with p (nil: resumes it); the nodes' pause
// watches see it at once.
func (w *World) SetPause(p *cluster.Pause) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p != nil {
		c := *p
		p = &c
	}
	w.pause = p
	close(w.pauseChange)
	w.pauseChange = make(chan struct{})
}

// HidePause makes node id's pause watch report nothing at all (its first
// report included) until ShowPause: a backend that cannot read the pause
// record.
func (w *World) HidePause(id string, hide bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.nodes[id]
	if n == nil {
		n = &Node{w: w, id: id, session: make(chan struct{})}
		w.nodes[id] = n
	}
	n.hidePause = hide
	close(w.pauseChange)
	w.pauseChange = make(chan struct{})
}

// WatchPause calls fn with the pause now and after every change (nothing
// while HidePause hides it from this node).
func (n *Node) WatchPause(ctx context.Context, fn func(*cluster.Pause)) error {
	w := n.w
	for {
		w.mu.Lock()
		ch, hidden := w.pauseChange, n.hidePause
		var p *cluster.Pause
		if w.pause != nil {
			c := *w.pause
			p = &c
		}
		w.mu.Unlock()
		if !hidden {
			fn(p)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}
