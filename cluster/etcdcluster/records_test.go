package etcdcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

func crumb(id string, epoch int64) breadcrumb.Record {
	return breadcrumb.Record{NodeID: id, Host: "host-" + id, Epoch: epoch, AdminURL: "http://" + id, Since: time.Now().UTC().Truncate(time.Second)}
}

// Guarded writes: once the term's key is gone (an operator deleted it, or
// revoked the lease), every write of the term fails wrapping
// cluster.ErrEntryDeleted and changes nothing; the term's context ends with
// the fault's cause and Expiry fails.
func testGuardedWrites(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client, f fault) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	o := newNode(t, c.Endpoints(), l, "o")
	ch, _ := a.campaign(t, Fair)
	w := next(t, ch)
	tm := w.t
	e := tm.Epoch()
	ctx := ctxT(t)
	rev, err := tm.WriteBreadcrumb(ctx, crumb("a", e), cluster.Revision{})
	if err != nil {
		t.Fatalf("WriteBreadcrumb: %v", err)
	}
	if err := tm.WriteLeaderPosition(ctx, cluster.LeaderPosition{NodeID: "a", Epoch: e, Position: 10}); err != nil {
		t.Fatalf("WriteLeaderPosition: %v", err)
	}
	if err := o.s.ProposeFailover(ctx, cluster.FailoverRequest{To: "a", ID: "req", By: "o", TimeoutMS: 60000}); err != nil {
		t.Fatalf("ProposeFailover: %v", err)
	}
	before, _ := adm.Get(ctx, l.Dir()+"/", clientv3.WithPrefix())

	f.apply(t, adm, w)
	checkEnded(t, w, f)
	if _, err := tm.Expiry(); !isAny(err, cluster.ErrEntryDeleted, cluster.ErrSessionExpired) {
		t.Errorf("Expiry after %s: %v; want it to fail", f, err)
	}
	writes := map[string]error{}
	_, writes["WriteBreadcrumb"] = tm.WriteBreadcrumb(ctx, crumb("a", e+1), rev)
	writes["CompleteFailover"] = tm.CompleteFailover(ctx, tm.Epoch())
	writes["WriteLeaderPosition"] = tm.WriteLeaderPosition(ctx, cluster.LeaderPosition{NodeID: "a", Epoch: e, Position: 20})
	_, writes["AppendHistory"] = tm.AppendHistory(ctx, cluster.HistoryEntry{NewLeader: "a", NewEpoch: e, Reason: cluster.HistoryStart})
	writes["Finish"] = tm.Finish(ctx, rev)
	for name, err := range writes {
		if !errors.Is(err, cluster.ErrEntryDeleted) {
			t.Errorf("%s after %s: %v; want an error wrapping ErrEntryDeleted", name, f, err)
		}
	}
	after, _ := adm.Get(ctx, l.Dir()+"/", clientv3.WithPrefix(), clientv3.WithRev(0))
	if diff := changedRecords(before.Kvs, after.Kvs, l); diff != "" {
		t.Errorf("records changed after %s: %s", f, diff)
	}
	// The elector goes on: a new term, at a greater epoch.
	w2 := next(t, ch)
	if w2.t.Epoch() <= e {
		t.Errorf("the next term's epoch %d is not above %d", w2.t.Epoch(), e)
	}
}

// changedRecords lists the records (other than the election and the
// member records) that differ between two reads of the layout.
func changedRecords(before, after []*mvccpb.KeyValue, l cluster.Layout) string {
	skip := func(k string) bool {
		return len(k) >= len(dir(l.ElectionDir())) && k[:len(dir(l.ElectionDir()))] == dir(l.ElectionDir()) ||
			len(k) >= len(dir(l.MembersDir())) && k[:len(dir(l.MembersDir()))] == dir(l.MembersDir())
	}
	m := map[string]int64{}
	for _, k := range before {
		if !skip(string(k.Key)) {
			m[string(k.Key)] = k.ModRevision
		}
	}
	var out string
	for _, k := range after {
		if skip(string(k.Key)) {
			continue
		}
		if r, ok := m[string(k.Key)]; !ok || r != k.ModRevision {
			out += fmt.Sprintf(" %s written", k.Key)
		}
		delete(m, string(k.Key))
	}
	for k := range m {
		out += fmt.Sprintf(" %s deleted", k)
	}
	return out
}

// Compare-and-set on the breadcrumb: the zero revision creates and fails
// when it exists; a stale revision fails; Finish at a stale revision
// changes nothing and the term goes on; at the current one it deletes the
// breadcrumb and the key in one step, and the next candidate wins.
func testCompareAndSet(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	cha, _ := a.campaign(t, Fair)
	w := next(t, cha)
	b := newNode(t, c.Endpoints(), l, "b")
	chb, _ := b.campaign(t, Fair)
	tm, e, ctx := w.t, w.t.Epoch(), ctxT(t)

	if _, rev, err := tm.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) || rev.Exists() {
		t.Fatalf("ReadBreadcrumb of none: %v, %v", rev, err)
	}
	r1, err := tm.WriteBreadcrumb(ctx, crumb("a", e), cluster.Revision{})
	if err != nil || !r1.Exists() {
		t.Fatalf("WriteBreadcrumb at zero: %v, %v", r1, err)
	}
	if got, rev, err := a.s.ReadBreadcrumb(ctx); err != nil || rev != r1 || got.Epoch != e {
		t.Fatalf("ReadBreadcrumb = %+v at %v, %v; want epoch %d at %v", got, rev, err, e, r1)
	}
	if _, err := tm.WriteBreadcrumb(ctx, crumb("a", e+1), cluster.Revision{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("WriteBreadcrumb at zero over an existing one: %v; want ErrConflict", err)
	}
	r2, err := tm.WriteBreadcrumb(ctx, crumb("a", e), r1)
	if err != nil || r2 == r1 {
		t.Fatalf("WriteBreadcrumb at the current revision: %v, %v", r2, err)
	}
	if _, err := tm.WriteBreadcrumb(ctx, crumb("a", e+2), r1); !errors.Is(err, ErrConflict) {
		t.Fatalf("WriteBreadcrumb at a stale revision: %v; want ErrConflict", err)
	}
	if err := tm.Finish(ctx, r1); !errors.Is(err, ErrConflict) {
		t.Fatalf("Finish at a stale revision: %v; want ErrConflict", err)
	}
	if _, err := tm.Expiry(); err != nil || w.ctx.Err() != nil {
		t.Fatalf("after a stale Finish the term is over: %v, %v", err, w.ctx.Err())
	}
	none(t, chb, 300*time.Millisecond, "after a stale Finish")
	if err := tm.Finish(ctx, r2); err != nil {
		t.Fatalf("Finish at the current revision: %v", err)
	}
	if _, err := tm.Expiry(); !errors.Is(err, cluster.ErrEntryDeleted) {
		t.Errorf("Expiry after Finish: %v; want ErrEntryDeleted", err)
	}
	wb := next(t, chb)
	if _, _, err := wb.t.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Errorf("the successor reads a breadcrumb after Finish: %v", err)
	}
	// Its own Finish deleted the key: the term ends as released, not as
	// deleted by someone else.
	if cause := waitEnded(t, w); !errors.Is(cause, cluster.ErrReleased) {
		t.Errorf("the finished term ended with %v; want ErrReleased", cause)
	}
	// A revision of another backend (or a made-up one) is refused.
	if _, err := wb.t.WriteBreadcrumb(ctx, crumb("b", wb.t.Epoch()), cluster.RevisionOf(1)); !errors.Is(err, ErrConflict) {
		t.Errorf("WriteBreadcrumb at a foreign revision: %v; want ErrConflict", err)
	}
}

// Member records: bound to the session's lease, rewritten in place,
// replaced after our own earlier session (same instance), refused while
// another live process of the same node id holds one.
func testMembers(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	ctx := ctxT(t)
	if err := a.s.PublishMember(ctx, member("a", "standby", 0)); err != nil {
		t.Fatal(err)
	}
	if err := a.s.PublishMember(ctx, member("a", "leader", 3)); err != nil {
		t.Fatal(err)
	}
	r, _ := adm.Get(ctx, l.Member("a"))
	if len(r.Kvs) != 1 || clientv3.LeaseID(r.Kvs[0].Lease) != a.session(t).ID {
		t.Fatalf("member record %v; want one bound to a's lease", r.Kvs)
	}
	// Another process with node id a.
	dup := newNode(t, c.Endpoints(), l, "a")
	dupStore, err := New(Config{Layout: l, NodeID: "a", Instance: "other-instance"}, Deps{Conn: dup.conn})
	if err != nil {
		t.Fatal(err)
	}
	dup.s = dupStore
	var de *cluster.DuplicateIDError
	if err := dup.s.PublishMember(ctx, member("a", "standby", 0)); !errors.As(err, &de) {
		t.Fatalf("PublishMember of a duplicate node id: %v; want a DuplicateIDError", err)
	}
	// Our own earlier session: replaced.
	old := a.session(t)
	if _, err := adm.Revoke(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a new session", func() bool { s := a.conn.Current(); return s != nil && s != old })
	other := newNode(t, c.Endpoints(), l, "a") // same instance as a: an earlier session of the same process
	if err := other.s.PublishMember(ctx, member("a", "standby", 0)); err != nil {
		t.Fatalf("a new session of the same instance: %v", err)
	}
	ms, err := a.s.Members(ctx)
	if err != nil || len(ms) != 1 || ms[0].NodeID != "a" {
		t.Fatalf("Members = %+v, %v", ms, err)
	}
	// A record without a lease (not failoverd's) is replaced.
	if _, err := adm.Put(ctx, l.Member("z"), "not json"); err != nil {
		t.Fatal(err)
	}
	ms, _ = a.s.Members(ctx)
	if len(ms) != 2 || ms[1].NodeID != "z" || ms[1].State != "unreadable" {
		t.Fatalf("Members with an unreadable record = %+v", ms)
	}
	z := newNode(t, c.Endpoints(), l, "z")
	if err := z.s.PublishMember(ctx, member("z", "standby", 0)); err != nil {
		t.Fatalf("PublishMember over a record without a lease: %v", err)
	}
	// A member record goes with its session.
	z.conn.Close()
	ms, _ = a.s.Members(ctx)
	if len(ms) != 1 {
		t.Fatalf("after z closed: Members = %+v", ms)
	}
}

// Failover requests: ProposeFailover fails while a request that is not
// done stands; WithdrawFailover deletes only our own; CompleteFailover
// marks a request to the term's node done with its epoch and keeps the
// requester's lease; ExpireFailover deletes one that is not done.
func testFailoverRequests(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	o := newNode(t, c.Endpoints(), l, "o")
	ctx := ctxT(t)
	r1 := cluster.FailoverRequest{To: "a", ID: "r1", By: "o", TimeoutMS: 60000}
	if err := o.s.ProposeFailover(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if err := a.s.ProposeFailover(ctx, cluster.FailoverRequest{To: "o", ID: "r2"}); !errors.Is(err, cluster.ErrFailoverStands) {
		t.Fatalf("ProposeFailover over a standing request: %v; want cluster.ErrFailoverStands", err)
	}
	if err := a.s.WithdrawFailover(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.s.ReadFailover(ctx); got == nil || got.ID != "r1" {
		t.Fatalf("a withdrew o's request: %+v", got)
	}
	ch, _ := a.campaign(t, Fair)
	w := next(t, ch)
	if err := w.t.CompleteFailover(ctx, w.t.Epoch()); err != nil {
		t.Fatal(err)
	}
	got, _ := a.s.ReadFailover(ctx)
	if got == nil || !got.Done || got.Epoch != w.t.Epoch() {
		t.Fatalf("after CompleteFailover: %+v; want done at epoch %d", got, w.t.Epoch())
	}
	r, _ := adm.Get(ctx, l.Failover())
	if clientv3.LeaseID(r.Kvs[0].Lease) != o.session(t).ID {
		t.Errorf("CompleteFailover changed the request's lease")
	}
	// Done: a new one may be proposed over it, and expiring it is a no-op
	// once done.
	if err := a.s.ExpireFailover(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.s.ReadFailover(ctx); got == nil {
		t.Fatal("ExpireFailover deleted a done request")
	}
	r3 := cluster.FailoverRequest{To: "o", ID: "r3", By: "a"}
	if err := a.s.ProposeFailover(ctx, r3); err != nil {
		t.Fatalf("ProposeFailover over a done request: %v", err)
	}
	if err := a.s.ExpireFailover(ctx, "r3"); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.s.ReadFailover(ctx); got != nil {
		t.Fatalf("ExpireFailover left %+v", got)
	}
	if err := a.s.ProposeFailover(ctx, r3); err != nil {
		t.Fatal(err)
	}
	if err := a.s.WithdrawFailover(ctx, "r3"); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.s.ReadFailover(ctx); got != nil {
		t.Fatalf("WithdrawFailover of our own left %+v", got)
	}
}

// CheckJoin: the first node records the mode; a node of the other mode is
// refused, also when a key of the other mode is in the election.
func testCheckJoin(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	b := newNode(t, c.Endpoints(), l, "b")
	ctx := ctxT(t)
	if _, err := a.s.CheckJoin(ctx, "fair", ""); err != nil {
		t.Fatal(err)
	}
	var me *cluster.ModeMismatchError
	if _, err := b.s.CheckJoin(ctx, "unfair", ""); !errors.As(err, &me) {
		t.Fatalf("CheckJoin of the other mode: %v; want a ModeMismatchError", err)
	}
	l2 := newLayout()
	d := newNode(t, c.Endpoints(), l2, "d")
	if _, err := adm.Put(ctx, dir(l2.ElectionDir())+lockName, "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.s.CheckJoin(ctx, "fair", ""); !errors.As(err, &me) {
		t.Fatalf("CheckJoin with an unfair lock in the election: %v; want a ModeMismatchError", err)
	}
	r, _ := adm.Get(ctx, l2.Config())
	if len(r.Kvs) != 0 {
		t.Error("a refused node wrote the cluster record")
	}
}

// The leader position never goes back to an earlier epoch; the history
// grows by one entry per term, retrying over a concurrent change.
func testPositionAndHistory(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	ch, _ := a.campaign(t, Fair)
	w := next(t, ch)
	ctx, e := ctxT(t), w.t.Epoch()
	if err := w.t.WriteLeaderPosition(ctx, cluster.LeaderPosition{NodeID: "a", Epoch: e, Position: 5}); err != nil {
		t.Fatal(err)
	}
	if err := w.t.WriteLeaderPosition(ctx, cluster.LeaderPosition{NodeID: "a", Epoch: e - 1, Position: 6}); !errors.Is(err, cluster.ErrStalePosition) {
		t.Fatalf("WriteLeaderPosition of an earlier epoch: %v; want ErrStalePosition", err)
	}
	if p, err := w.t.ReadLeaderPosition(ctx); err != nil || p == nil || p.Position != 5 {
		t.Fatalf("ReadLeaderPosition = %+v, %v", p, err)
	}
	// A concurrent change lands between the read and the write: the
	// append reads again and keeps it.
	other := cluster.HistoryEntry{NewLeader: "x", NewEpoch: 1, Reason: cluster.HistoryStart}
	b, _ := json.Marshal([]cluster.HistoryEntry{other})
	var once sync.Once
	a.s.BeforeHistoryWrite = func() {
		once.Do(func() {
			if _, err := adm.Put(ctx, l.History(), string(b)); err != nil {
				t.Error(err)
			}
		})
	}
	mine := cluster.HistoryEntry{NewLeader: "a", NewEpoch: e, Reason: cluster.HistoryHandoff}
	if _, err := w.t.AppendHistory(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if _, err := w.t.AppendHistory(ctx, mine); err != nil { // a retried append adds nothing
		t.Fatal(err)
	}
	h, err := a.s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].NewLeader != "x" || h[1].NewLeader != "a" || h[1].NewEpoch != e || h[1].OldLeader != "x" {
		t.Fatalf("history %+v; want x's entry, then a's once (with x as the old leader)", h)
	}
}
