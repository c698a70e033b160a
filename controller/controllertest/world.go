// Package controllertest is an in-memory world for the controller's
// state-machine tests: a fair FIFO election whose terms have a fake lease
// (and, with fencing first, heartbeats that move with the clock),
// a record store keyed by the cluster's Layout (revisions, records of a
// node's session, directories) on which the real record rules run
// (cluster.Store, and the Term it makes), and scripted hooks and fencer.
// It starts no goroutines of its own (but for the timer that ends a term
// whose renewals stopped, which fires in its bubble's time), and its
// watches wake through channels closed on change, so inside a
// testing/synctest bubble synctest.Wait means "the controller has nothing
// left to do".
package controllertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// ErrGone is the guard's refusal: the term's election entry is gone.
var ErrGone = errors.New("controllertest: election entry gone")

// ErrBadVersion is the compare-and-set refusal: a record is not at the
// revision a write gave.
var ErrBadVersion = fmt.Errorf("controllertest: record version changed: %w", cluster.ErrConflict)

// ErrFailoverStands is ProposeFailover's refusal.
var ErrFailoverStands = cluster.ErrFailoverStands

// Layout is where the world keeps the records of its one cluster.
var Layout = cluster.Layout{Root: "/failoverd", Cluster: "ct"}

// record is one stored record.
type record struct {
	data    []byte
	rev     int64
	session int64 // the session it goes with (0: persistent)
}

// World is the shared coordination service of the nodes of one test.
type World struct {
	mu       sync.Mutex
	queue    []*entry // the election, in join order: the first one leads
	entries  int      // entries created so far (their names)
	lastZxid int64    // the last epoch handed out
	// guarantee is how far ahead of now every valid term's Expiry lies
	// (a lease renewed without fail); session is every term's
	// SessionTimeout; budget is the demote budget of the world's
	// elector: a term whose renewals stopped ends that long before its
	// Expiry (StopRenewals), as the real backends' do.
	guarantee, session, budget time.Duration
	// beatEvery is how often a renewing entry's heartbeat moves (see
	// heartbeat).
	beatEvery time.Duration

	records  map[string]*record
	rev      int64 // the revision of the last commit
	sessions int64 // sessions begun so far
	nodes    map[string]*Node
	// changed is closed and replaced on every change; seq counts the
	// changes, notified says at which one each key (and its directory)
	// last changed visibly to watches.
	changed  chan struct{}
	seq      int64
	notified map[string]int64

	// termHop > 0: a term's context ends that long after its candidacy's
	// (SetTermHop), as a backend that ends it from a goroutine of its own does.
	termHop time.Duration

	hideLR      bool              // breadcrumb and member changes are not reported to watches
	hideFO      bool              // failover changes are not reported to watches
	bcErr       error             // breadcrumb reads fail with it (SetBreadcrumbError)
	historyErr  error             // history reads fail with it (SetHistoryError)
	beforeWrite func(epoch int64) // runs right before a breadcrumb write
	afterWrite  func(epoch int64) // runs right after a successful one
	lateAnswer  time.Duration     // a proposed failover request is answered that late
	published   map[string]int    // member record writes per node
	writes      []breadcrumb.Record
	finishes    []int32
	posWrites   []cluster.LeaderPosition
	spans       []Span
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

// entry is one candidate's election entry, a record of its node's session
// under the election directory.
type entry struct {
	node    *Node
	key     string
	session int64         // the node's session that created it
	turn    chan struct{} // closed when first in line
	first   bool
	term    *Term
	// With fencing first (SetFenceFirst) every renewal of the entry is a
	// heartbeat (see heartbeat); beats false: it publishes none.
	beats  bool
	beat   int64     // the heartbeat's version at beatAt
	beatAt time.Time // when it took that version
	stood  bool      // the heartbeat stands still (StopRenewals)
}

// New returns an empty world whose terms have a 6s session and expire
// 5.7s ahead of now while valid (as a 4s lease with 1.7s of grace after
// it would); its elector's demote budget is that grace, 1.7s.
func New() *World {
	return &World{
		guarantee: 5700 * time.Millisecond,
		session:   6 * time.Second,
		budget:    1700 * time.Millisecond,
		beatEvery: BeatInterval,
		records:   map[string]*record{},
		nodes:     map[string]*Node{},
		changed:   make(chan struct{}),
		notified:  map[string]int64{},
		published: map[string]int{},
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

// --- the record store ---

// bump wakes every watch and every waiter. Call with w.mu held.
func (w *World) bump() {
	w.seq++
	close(w.changed)
	w.changed = make(chan struct{})
}

// hidden reports whether a change of key is kept from the watches now.
// Call with w.mu held.
func (w *World) hidden(key string) bool {
	return (w.hideLR && (key == Layout.Breadcrumb() || path.Dir(key) == Layout.MembersDir())) ||
		(w.hideFO && key == Layout.Failover())
}

// touched notes a change of key. Call with w.mu held, then bump.
func (w *World) touched(key string) {
	if w.hidden(key) {
		return
	}
	w.notified[key] = w.seq + 1
	w.notified[path.Dir(key)] = w.seq + 1
}

// set writes (data non-nil) or deletes key outside any guard or
// compare-and-set, as a persistent record, and wakes the watches. Call
// with w.mu held.
func (w *World) set(key string, data []byte) {
	w.rev++
	if data == nil {
		delete(w.records, key)
	} else {
		w.records[key] = &record{data: data, rev: w.rev}
	}
	w.touched(key)
	w.bump()
}

// setJSON stores v's JSON at key (nil: deletes it).
func (w *World) setJSON(key string, v any) {
	var data []byte
	if v != nil {
		data, _ = json.Marshal(v)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set(key, data)
}

// getJSON decodes the record at key into v, reporting whether there is one.
func (w *World) getJSON(key string, v any) (rev int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.records[key]
	if r == nil {
		return -1, false
	}
	_ = json.Unmarshal(r.data, v)
	return r.rev, true
}

// below lists the records directly below dir, ordered by name. Call with
// w.mu held.
func (w *World) below(dir string) []string {
	var keys []string
	for k := range w.records {
		if path.Dir(k) == dir {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// read reads qs as node n sees them (term: in a term of n). Call with
// w.mu held.
func (w *World) read(n *Node, term bool, qs []cluster.Query) ([]cluster.Result, error) {
	out := make([]cluster.Result, len(qs))
	for i, q := range qs {
		switch {
		case q.Key == Layout.Breadcrumb() && w.bcErr != nil:
			return nil, w.bcErr
		case q.Key == Layout.History() && w.historyErr != nil:
			return nil, w.historyErr
		case q.Key == Layout.Config() && !term && n.joinErr != nil:
			return nil, n.joinErr
		}
		keys := []string{q.Key}
		if q.Dir {
			keys = w.below(q.Key)
		}
		for _, k := range keys {
			if r := w.records[k]; r != nil && q.NamesOnly {
				out[i].Items = append(out[i].Items, cluster.Item{Name: path.Base(k)})
			} else if r != nil {
				out[i].Items = append(out[i].Items, cluster.Item{Name: path.Base(k), Data: bytes.Clone(r.data),
					Rev: cluster.RevisionOf(r.rev), Owner: n.owner(r)})
			}
		}
	}
	return out, nil
}

// commit applies ops for node n atomically, guarded by t's entry when t
// is set, with the hooks of the keys written. It returns the breadcrumb
// records it wrote.
func (w *World) commit(ctx context.Context, n *Node, t *Term, ops []cluster.Op, finish bool) (cluster.Committed, error) {
	bcPut := false
	for _, op := range ops {
		bcPut = bcPut || (op.Key == Layout.Breadcrumb() && op.Kind != cluster.OpDelete)
	}
	w.mu.Lock()
	before := w.beforeWrite
	w.mu.Unlock()
	if t != nil && bcPut && before != nil {
		before(t.epoch)
	}
	if err := ctx.Err(); err != nil {
		return cluster.Committed{}, err
	}
	w.mu.Lock()
	if t != nil && !t.present() {
		w.mu.Unlock()
		return cluster.Committed{}, ErrGone
	}
	for _, op := range ops {
		if op.Key == Layout.Member(n.id) && op.Kind != cluster.OpDelete && t == nil && n.pubErr != nil {
			w.mu.Unlock()
			return cluster.Committed{}, n.pubErr
		}
		r := w.records[op.Key]
		switch {
		case op.Kind == cluster.OpAbsent:
			if r != nil {
				w.mu.Unlock()
				return cluster.Committed{}, fmt.Errorf("%s exists: %w", op.Key, ErrBadVersion)
			}
		case op.Kind == cluster.OpDelete && !op.Rev.Exists() && !op.Rev.IsAny():
			w.mu.Unlock()
			return cluster.Committed{}, fmt.Errorf("controllertest: deleting %s needs a revision read", op.Key)
		case op.Rev.IsAny():
		case !op.Rev.Exists() && r != nil, op.Rev.Exists() && (r == nil || cluster.RevisionOf(r.rev) != op.Rev):
			w.mu.Unlock()
			return cluster.Committed{}, fmt.Errorf("%s at revision %v: %w", op.Key, op.Rev, ErrBadVersion)
		}
	}
	w.rev++
	c := cluster.Committed{Revs: make([]cluster.Revision, len(ops)), Stamp: w.lastZxid + w.rev}
	var wrote []breadcrumb.Record
	late := false
	for i, op := range ops {
		if op.Kind == cluster.OpAbsent {
			continue
		}
		w.touched(op.Key)
		if op.Kind == cluster.OpDelete {
			if op.Key == Layout.Breadcrumb() && finish {
				if r := w.records[op.Key]; r != nil {
					w.finishes = append(w.finishes, int32(r.rev))
				}
			}
			delete(w.records, op.Key)
			continue
		}
		data := bytes.Clone(op.Data)
		var session int64
		if old := w.records[op.Key]; old != nil {
			session = old.session // a put keeps the record's owner
		}
		if op.Kind == cluster.OpPutSession {
			session = n.session
		}
		switch {
		case op.Key == Layout.Member(n.id) && t == nil:
			data = n.withPosition(data)
			w.published[n.id]++
		case op.Key == Layout.Breadcrumb() && t != nil:
			var rec breadcrumb.Record
			_ = json.Unmarshal(data, &rec)
			wrote = append(wrote, rec)
		case op.Key == Layout.LeaderPosition() && t != nil:
			var p cluster.LeaderPosition
			_ = json.Unmarshal(data, &p)
			w.posWrites = append(w.posWrites, p)
		case op.Key == Layout.Failover() && t == nil && op.Kind == cluster.OpPutSession:
			late = true
		}
		w.records[op.Key] = &record{data: data, rev: w.rev, session: session}
		c.Revs[i] = cluster.RevisionOf(w.rev)
	}
	if finish {
		w.remove(t.e)
	}
	w.writes = append(w.writes, wrote...)
	w.bump()
	after, lateBy := w.afterWrite, w.lateAnswer
	w.mu.Unlock()
	if len(wrote) > 0 && after != nil {
		after(t.epoch)
	}
	if late && lateBy > 0 {
		// The answer travels late: the watches report the request (and
		// the writer's loop acts on it) before the writer hears back.
		time.Sleep(lateBy)
		if err := ctx.Err(); err != nil {
			return cluster.Committed{}, err
		}
	}
	return c, nil
}

// --- the election ---

// Node returns the backend of node id (Elector and Records), creating it.
func (w *World) Node(id string) *Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.node(id)
}

// node returns node id, creating it. Call with w.mu held.
func (w *World) node(id string) *Node {
	n := w.nodes[id]
	if n == nil {
		w.sessions++
		n = &Node{w: w, id: id, session: w.sessions, sessionCh: make(chan struct{})}
		n.Store = cluster.NewStore(n, cluster.StoreConfig{Layout: Layout, NodeID: id, Instance: "instance-" + id})
		w.nodes[id] = n
	}
	return n
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
			w.set(e.key, nil)
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

// ExpireSession ends node id's term as a session expiry: its session's
// records (its entry, its member record) are deleted at once, Valid
// fails, and the node goes on with a new session.
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
	w.held(id).invalid = cluster.ErrLeaseExpired
}

// held returns node id's term, panicking when it holds none. Call with
// w.mu held.
func (w *World) held(id string) *Term {
	for _, e := range w.queue {
		if e.node.id == id && e.term != nil {
			return e.term
		}
	}
	panic(fmt.Sprintf("controllertest: %s holds no term", id))
}

// StopRenewals stops renewing node id's term, as for a leader cut off
// from the coordination service: its Expiry stays where it is now, and the
// term ends (its context, with a lease expiry; Expiry fails) the world's
// demote budget before that, as the contract obliges every backend to; its
// entry stays until the term is released. Its heartbeat (fencing first)
// stands still until ResumeRenewals.
func (w *World) StopRenewals(id string) { w.stopRenewals(id, true) }

// StopRenewalsUnnoticed stops renewing node id's term as StopRenewals
// does, but the elector never notices: the term's context does not end
// (a backend that breaks the obligation, or whose elector is late), and
// Expiry fails only once the Expiry it kept has passed.
func (w *World) StopRenewalsUnnoticed(id string) { w.stopRenewals(id, false) }

func (w *World) stopRenewals(id string, noticed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.held(id)
	now := time.Now()
	t.frozen = now.Add(t.guarantee)
	t.e.stand(now, w.beatEvery)
	if noticed {
		frozen := t.frozen
		time.AfterFunc(time.Until(frozen.Add(-w.budget)), func() { w.lapse(t, frozen) })
	}
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
	t := w.held(id)
	if deleteEntry {
		w.remove(t.e)
	}
	t.invalid = cause
	if cause == cluster.ErrSessionExpired {
		t.e.node.newSession()
	}
	w.mu.Unlock()
	t.cancel(cause)
}

// --- the records, as tests set and inspect them ---

// SetBreadcrumb stores r (nil: deletes it).
func (w *World) SetBreadcrumb(r *breadcrumb.Record) {
	var data []byte
	if r != nil {
		var err error
		if data, err = breadcrumb.Encode(*r); err != nil {
			data, _ = json.Marshal(r) // stored as given: readers find it corrupt
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set(Layout.Breadcrumb(), data)
}

// Breadcrumb returns the breadcrumb (nil: absent) and its version.
func (w *World) Breadcrumb() (*breadcrumb.Record, int32) {
	var r breadcrumb.Record
	rev, ok := w.getJSON(Layout.Breadcrumb(), &r)
	if !ok {
		return nil, -1
	}
	return &r, int32(rev)
}

// SetBreadcrumbError makes every breadcrumb read fail with err (nil: reads work).
func (w *World) SetBreadcrumbError(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bcErr = err
}

// BeforeWrite runs f (with the writer's epoch) right before every
// breadcrumb write of a term, outside the world's lock: the injection
// point of the tests that end a term there.
func (w *World) BeforeWrite(f func(epoch int64)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.beforeWrite = f
}

// AfterWrite runs f right after every successful breadcrumb write of a
// term, outside the world's lock.
func (w *World) AfterWrite(f func(epoch int64)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.afterWrite = f
}

// Writes lists the breadcrumbs terms wrote, in order.
func (w *World) Writes() []breadcrumb.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]breadcrumb.Record(nil), w.writes...)
}

// Finishes lists the breadcrumb version every successful Finish deleted.
func (w *World) Finishes() []int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int32(nil), w.finishes...)
}

// HideLeader stops (true) or resumes (false) reporting changes of the
// breadcrumb and the member records to the nodes' watches.
func (w *World) HideLeader(hide bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hideLR = hide
	if !hide {
		w.touched(Layout.Breadcrumb())
		w.touched(Layout.Member("any"))
		w.bump()
	}
}

// HideFailover stops (true) or resumes (false) reporting failover changes
// to the nodes' watches; a term's ReadFailover still sees them.
func (w *World) HideFailover(hide bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hideFO = hide
	if !hide {
		w.touched(Layout.Failover())
		w.bump()
	}
}

// SetFailover stores the failover request, persistent (nil: withdraws it).
func (w *World) SetFailover(r *cluster.FailoverRequest) {
	if r == nil {
		w.setJSON(Layout.Failover(), nil)
		return
	}
	w.setJSON(Layout.Failover(), r)
}

// Failover returns the failover request (nil: none or unreadable).
func (w *World) Failover() *cluster.FailoverRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.records[Layout.Failover()]; r != nil {
		return cluster.DecodeFailover(r.data)
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

// SetClusterRecord replaces the cluster record (nil: none), as a move of
// the cluster (failoverd migrate) or an operator would.
func (w *World) SetClusterRecord(r *cluster.ClusterRecord) {
	if r == nil {
		w.setJSON(Layout.Config(), nil)
		return
	}
	w.setJSON(Layout.Config(), r)
}

// Member returns node id's published record.
func (w *World) Member(id string) (cluster.Member, bool) {
	var m cluster.Member
	_, ok := w.getJSON(Layout.Member(id), &m)
	return m, ok
}

// Members returns every member record, sorted by node id.
func (w *World) Members() []cluster.Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.members()
}

// members decodes the member records. Call with w.mu held.
func (w *World) members() []cluster.Member {
	out := []cluster.Member{}
	for _, k := range w.below(Layout.MembersDir()) {
		var m cluster.Member
		if json.Unmarshal(w.records[k].data, &m) != nil {
			m = cluster.Member{NodeID: path.Base(k), State: "unreadable"}
		}
		out = append(out, m)
	}
	return out
}

// DropMember deletes node id's member record (its session is gone).
func (w *World) DropMember(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set(Layout.Member(id), nil)
}

// Publishes counts node id's member record writes so far.
func (w *World) Publishes(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.published[id]
}

// PromotedLeader is the promoted leader as cluster.LeaderOf picks it from
// the breadcrumb and the member records (nil: none).
func (w *World) PromotedLeader() *cluster.Leader {
	w.mu.Lock()
	defer w.mu.Unlock()
	var bc *breadcrumb.Record
	if r := w.records[Layout.Breadcrumb()]; r != nil {
		if rec, err := breadcrumb.Decode(r.data); err == nil {
			bc = &rec
		}
	}
	return cluster.LeaderOf(bc, w.members())
}

// Known lists the known-member records, sorted by node id.
func (w *World) Known() []cluster.KnownMember {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := []cluster.KnownMember{}
	for _, k := range w.below(Layout.KnownDir()) {
		out = append(out, cluster.DecodeKnown(path.Base(k), w.records[k].data))
	}
	return out
}

// LeaderPosition returns the LeaderPosition record (nil: none).
func (w *World) LeaderPosition() *cluster.LeaderPosition {
	var p cluster.LeaderPosition
	if _, ok := w.getJSON(Layout.LeaderPosition(), &p); !ok {
		return nil
	}
	return &p
}

// SetLeaderPosition stores the LeaderPosition record (nil: deletes it),
// as a dead leader of an earlier term left it.
func (w *World) SetLeaderPosition(p *cluster.LeaderPosition) {
	if p == nil {
		w.setJSON(Layout.LeaderPosition(), nil)
		return
	}
	w.setJSON(Layout.LeaderPosition(), p)
}

// PositionWrites lists every leader position a term wrote, in order.
func (w *World) PositionWrites() []cluster.LeaderPosition {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]cluster.LeaderPosition(nil), w.posWrites...)
}

// History lists the history entries, oldest first.
func (w *World) History() []cluster.HistoryEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.records[Layout.History()]; r != nil {
		h, _ := cluster.DecodeHistory(r.data)
		return h
	}
	return nil
}

// SetHistoryError makes every read of the history, and so every
// AppendHistory, fail with err (nil: they work).
func (w *World) SetHistoryError(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.historyErr = err
}

// SetTermHop makes every later term's context end d after its candidacy's
// context, not with it: a backend may end a term's context from a
// goroutine of its own (etcd's elector does), and the controller must not
// rely on the context alone to see that it ended a candidacy itself.
func (w *World) SetTermHop(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.termHop = d
}

// SetPause pauses the cluster with p (nil: resumes it); the nodes' pause
// watches see it at once.
func (w *World) SetPause(p *cluster.Pause) {
	if p == nil {
		w.setJSON(Layout.Pause(), nil)
		return
	}
	w.setJSON(Layout.Pause(), p)
}

// HidePause makes node id's pause watch report nothing at all (its first
// report included) until ShowPause: its reads of the pause record do not
// answer, as a backend that cannot read it.
func (w *World) HidePause(id string, hide bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.node(id).hidePause = hide
	w.touched(Layout.Pause())
	w.bump()
}

// --- a node: its backend (cluster.Backend), its Records (a cluster.Store
// on it) and its elector ---

// Node is one node's view of the world: it implements cluster.Backend,
// cluster.Elector, and cluster.Records through the cluster.Store it
// embeds.
type Node struct {
	*cluster.Store
	w         *World
	id        string
	session   int64         // the current session
	sessionCh chan struct{} // SessionChanged: never closed
	joinErr   error         // SetJoinError: reads of the cluster record fail with it
	pubErr    error         // SetPublishError: writes of the member record fail with it
	warm      bool
	hidePause bool               // the pause watch reports nothing
	pos       *int64             // SetPosition: published in every member record
	refusal   error              // SetRefusal: the elector stays out
	foBlind   bool               // SetFailoverBlind: the failover watch reports only its first value
	offline   bool               // SetConnected(false): Connected reports false
	ff        cluster.FenceFirst // SetFenceFirst: the elector fences first
}

var (
	_ cluster.Backend = (*Node)(nil)
	_ cluster.Elector = (*Node)(nil)
	_ cluster.Records = (*Node)(nil)
)

// owner says whose record r is, as n sees it.
func (n *Node) owner(r *record) cluster.Owner {
	switch r.session {
	case 0:
		return cluster.Persistent
	case n.session:
		return cluster.OwnSession
	}
	return cluster.OtherSession
}

// newSession ends n's session: its records go, a new one begins. As
// before the world had sessions, SessionChanged does not report it: the
// node writes its member record again on its next change, not at once
// (which would race its successor's election). Call with w.mu held.
func (n *Node) newSession() {
	w := n.w
	for k, r := range w.records {
		// The election entry goes with the term (end removes it).
		if r.session == n.session && path.Dir(k) != Layout.ElectionDir() {
			w.set(k, nil)
		}
	}
	w.sessions++
	n.session = w.sessions
}

// withPosition returns member record data with the position SetPosition
// set. Call with w.mu held.
func (n *Node) withPosition(data []byte) []byte {
	if n.pos == nil {
		return data
	}
	var m cluster.Member
	if json.Unmarshal(data, &m) != nil {
		return data
	}
	v := *n.pos
	m.Position = &v
	out, _ := json.Marshal(m)
	return out
}

// Read reads qs (see cluster.Reader).
func (n *Node) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	return n.w.read(n, false, qs)
}

// Commit applies ops atomically (see cluster.KV).
func (n *Node) Commit(ctx context.Context, ops ...cluster.Op) (cluster.Committed, error) {
	return n.w.commit(ctx, n, nil, ops, false)
}

// Fresh returns at once: the world is always in touch.
func (n *Node) Fresh(ctx context.Context) error { return ctx.Err() }

// SessionChanged is never closed (see newSession).
func (n *Node) SessionChanged() <-chan struct{} { return n.sessionCh }

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

// Queue lists the node ids in the election, first (the leader) first.
func (n *Node) Queue(ctx context.Context) ([]string, error) { return n.w.Queue(), ctx.Err() }

// Watch starts a watch loop's reader (see cluster.Watcher).
func (n *Node) Watch(ctx context.Context) cluster.Watcher {
	return &watcher{n: n, keys: map[string]bool{}}
}

// watcher is a Watcher of the world: Wait returns once a key read since
// the last Wait changed visibly (HideLeader, HideFailover and
// SetFailoverBlind keep changes from it).
type watcher struct {
	n     *Node
	keys  map[string]bool
	since int64 // the change the first read of the round saw (-1: none yet)
	read  bool
}

func (x *watcher) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	w, n := x.n.w, x.n
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hung := false
		for _, q := range qs {
			hung = hung || (n.hidePause && q.Key == Layout.Pause())
		}
		if !hung {
			break
		}
		ch := w.changed // a read that does not answer until HidePause ends
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-ch:
		}
		w.mu.Lock()
	}
	if !x.read {
		x.read, x.since = true, w.seq
	}
	for _, q := range qs {
		x.keys[q.Key] = true
	}
	return w.read(n, false, qs)
}

func (x *watcher) Wait(ctx context.Context) error {
	w := x.n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if x.read {
			for k := range x.keys {
				if w.notified[k] > x.since && !(k == Layout.Failover() && x.n.foBlind) {
					x.read = false
					clear(x.keys)
					return nil
				}
			}
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			w.mu.Lock()
			return ctx.Err()
		case <-ch:
		}
		w.mu.Lock()
	}
}

func (x *watcher) Close() {}

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
		n.w.bump() // wakes a Campaign waiting for it
	}
}

// SetPosition makes every member record this node publishes from now on
// carry position p (nil: what the controller publishes), as if its
// position command printed it; the current record changes at once.
func (n *Node) SetPosition(p *int64) {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	n.pos = p
	key := Layout.Member(n.id)
	if r := w.records[key]; r != nil && p != nil {
		w.rev++
		w.records[key] = &record{data: n.withPosition(r.data), rev: w.rev, session: r.session}
		w.touched(key)
		w.bump()
	}
}

// SetJoinError makes CheckJoin answer err (a *cluster.ModeMismatchError is
// a refusal, anything else a failure to check): the node's reads of the
// cluster record fail with it.
func (n *Node) SetJoinError(err error) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.joinErr = err
}

// SetPublishError makes PublishMember answer err (a
// *cluster.DuplicateIDError is a refusal): the node's writes of its
// member record fail with it.
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

// Warm records the hint.
func (n *Node) Warm(on bool) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.warm = on
}

// Refusal says what SetRefusal set.
func (n *Node) Refusal() error {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	return n.refusal
}

// Campaign joins the election until ctx ends: fair and FIFO, one entry per
// term, a new entry after each term (as the ZooKeeper elector does). Each
// entry is a record of the node's session under the election directory;
// won gets the cluster.Term the node's Store makes of the world's Term.
func (n *Node) Campaign(ctx context.Context, won func(context.Context, cluster.Term)) error {
	w := n.w
	for ctx.Err() == nil {
		w.mu.Lock()
		if n.refusal != nil {
			ch := w.changed
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-ch:
			}
			continue
		}
		w.entries++
		e := &entry{node: n, session: n.session, turn: make(chan struct{}), key: path.Join(Layout.ElectionDir(), fmt.Sprintf("%s%010d", cluster.FairPrefix, w.entries)),
			beats: n.ff.On(), beatAt: time.Now()}
		w.queue = append(w.queue, e)
		w.rev++
		w.records[e.key] = &record{data: []byte(n.id), rev: w.rev, session: n.session}
		w.touched(e.key)
		w.bump()
		w.promoteFirst()
		w.mu.Unlock()
		if !n.awaitTurn(ctx, e) {
			w.mu.Lock()
			w.remove(e)
			w.mu.Unlock()
			return nil
		}
		w.mu.Lock()
		w.lastZxid++
		tctx, cancel := context.WithCancelCause(ctx)
		if d := w.termHop; d > 0 {
			tctx, cancel = context.WithCancelCause(context.WithoutCancel(ctx))
			end := cancel
			context.AfterFunc(ctx, func() { time.Sleep(d); end(context.Cause(ctx)) })
		}
		t := &Term{w: w, e: e, epoch: w.lastZxid, guarantee: w.guarantee, session: w.session, ctx: tctx, cancel: cancel}
		e.term = t
		span := len(w.spans)
		w.spans = append(w.spans, Span{Node: n.id, Epoch: t.epoch, From: time.Now()})
		w.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			won(tctx, n.NewTerm(t))
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

// Term is one leadership in the world: it implements cluster.TermKV, and
// its node's Store makes the controller's cluster.Term of it.
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

var _ cluster.TermKV = (*Term)(nil)

// Epoch is the term's fencing token.
func (t *Term) Epoch() int64 { return t.epoch }

// NodeID is the node that holds the term.
func (t *Term) NodeID() string { return t.e.node.id }

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

// present reports whether the term's entry still exists. Call with w.mu held.
func (t *Term) present() bool {
	_, ok := t.w.records[t.e.key]
	return ok
}

// Read reads qs in the term's view (the world's).
func (t *Term) Read(ctx context.Context, qs ...cluster.Query) ([]cluster.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	return t.w.read(t.e.node, true, qs)
}

// Commit applies ops guarded by the term's entry; a breadcrumb write runs
// the BeforeWrite and AfterWrite hooks around it.
func (t *Term) Commit(ctx context.Context, ops ...cluster.Op) (cluster.Committed, error) {
	return t.w.commit(ctx, t.e.node, t, ops, false)
}

// Finish applies ops and deletes the term's entry in one step, guarded by
// the entry.
func (t *Term) Finish(ctx context.Context, ops ...cluster.Op) error {
	_, err := t.w.commit(ctx, t.e.node, t, ops, true)
	return err
}
