package zkcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

var testLayout = cluster.Layout{Root: "/failoverd", Cluster: "zc"}

// newStore connects a client of its own to zkc and wraps it in a Store of
// node id (and instance); the client is closed when the test ends.
func newStore(t *testing.T, zkc *zktest.Cluster, id, instance string) (*Store, *zk.Client) {
	t.Helper()
	client, err := zk.NewClient(zk.Config{Servers: zkc.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s, err := New(Config{Layout: testLayout, NodeID: id, Instance: instance}, Deps{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	return s, client
}

// session waits for the client's session.
func session(t *testing.T, c *zk.Client) *zk.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sess, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// connected waits until c's session is connected to a server.
func connected(t *testing.T, c *zk.Client) {
	t.Helper()
	sess := session(t, c)
	deadline := time.After(30 * time.Second)
	for {
		st, changed := sess.State()
		if st == zk.StateConnected {
			return
		}
		select {
		case <-changed:
		case <-sess.Done():
			t.Fatalf("the session ended while waiting for its reconnect: %v", sess.Err())
		case <-deadline:
			t.Fatalf("the client did not reconnect within 30s (state %v)", st)
		}
	}
}

// expire makes the server expire c's current session and waits until the
// client noticed.
func expire(t *testing.T, zkc *zktest.Cluster, c *zk.Client) {
	t.Helper()
	sess := session(t, c)
	if err := zktest.Expire(zkc.Servers[0].Addr(), sess.ID(), sess.Password()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not notice its session expired")
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func member(id, instance, state string) cluster.Member {
	return cluster.Member{Cluster: "zc", NodeID: id, Host: "host-" + id, State: state, Role: "standby",
		Health: "healthy", Since: time.Now().UTC(), Version: "test", Instance: instance}
}

// Member records: an ephemeral of the current session, rewritten in place,
// replaced after our own session expired or when an earlier session of this
// very process still holds it, refused while another live process of the
// same node id holds it.
func TestPublishMember(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	a, ac := newStore(t, zkc, "a", "inst-a")
	if err := a.PublishMember(ctx, member("a", "inst-a", "standby")); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishMember(ctx, member("a", "inst-a", "leader")); err != nil {
		t.Fatal(err)
	}
	ms, err := a.Members(ctx)
	if err != nil || len(ms) != 1 || ms[0].State != "leader" {
		t.Fatalf("Members = %+v, %v; want a as leader", ms, err)
	}
	owner := func() int64 {
		_, st, err := session(t, ac).Get(ctx, testLayout.Member("a"))
		if err != nil {
			t.Fatal(err)
		}
		return st.EphemeralOwner
	}
	if got, want := owner(), session(t, ac).ID(); got != want {
		t.Fatalf("member record owned by session %x, want ours %x", got, want)
	}

	// Another process with our node id: a duplicate, nothing written.
	dup, _ := newStore(t, zkc, "a", "inst-other")
	err = dup.PublishMember(ctx, member("a", "inst-other", "standby"))
	var de *cluster.DuplicateIDError
	if !errors.As(err, &de) || de.Instance != "inst-a" || de.Host != "host-a" {
		t.Fatalf("PublishMember by a second process = %v, want a DuplicateIDError naming inst-a", err)
	}

	// Our own session expired: the record goes with it, and the next
	// publish (on the new session) writes it again.
	expire(t, zkc, ac)
	if err := a.PublishMember(ctx, member("a", "inst-a", "standby")); err != nil {
		t.Fatal(err)
	}
	if got, want := owner(), session(t, ac).ID(); got != want {
		t.Fatalf("after our session expired: record owned by %x, want our new session %x", got, want)
	}

	// An earlier session of this very process still holds it (same
	// instance id, another live session): ours replaces it.
	earlier, ec := newStore(t, zkc, "b", "inst-b")
	if err := earlier.PublishMember(ctx, member("b", "inst-b", "standby")); err != nil {
		t.Fatal(err)
	}
	later, lc := newStore(t, zkc, "b", "inst-b")
	if err := later.PublishMember(ctx, member("b", "inst-b", "out")); err != nil {
		t.Fatalf("replacing our own earlier session's record: %v", err)
	}
	_, st, err := session(t, lc).Get(ctx, testLayout.Member("b"))
	if err != nil || st.EphemeralOwner != session(t, lc).ID() || st.EphemeralOwner == session(t, ec).ID() {
		t.Fatalf("record of b: owner %x, %v; want the later session %x", st.EphemeralOwner, err, session(t, lc).ID())
	}

	// A persistent record (no live owner, written by hand) is replaced.
	if _, _, err := session(t, ac).Create(ctx, testLayout.Member("c"), []byte(`{"node_id":"c","instance":"someone"}`), zk.Persistent); err != nil {
		t.Fatal(err)
	}
	c, cc := newStore(t, zkc, "c", "inst-c")
	if err := c.PublishMember(ctx, member("c", "inst-c", "standby")); err != nil {
		t.Fatalf("replacing a persistent record: %v", err)
	}
	if _, st, _ := session(t, cc).Get(ctx, testLayout.Member("c")); st.EphemeralOwner != session(t, cc).ID() {
		t.Fatalf("record of c owned by %x, want ephemeral of %x", st.EphemeralOwner, session(t, cc).ID())
	}

	// An unreadable record is listed as such, ordered by node id.
	if _, _, err := session(t, ac).Create(ctx, testLayout.Member("0bad"), []byte("{"), zk.Persistent); err != nil {
		t.Fatal(err)
	}
	ms, err = a.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids, states []string
	for _, m := range ms {
		ids, states = append(ids, m.NodeID), append(states, m.State)
	}
	if want := []string{"0bad", "a", "b", "c"}; len(ids) != 4 || ids[0] != want[0] || ids[1] != want[1] || ids[3] != want[3] || states[0] != "unreadable" {
		t.Fatalf("Members ids %v states %v, want %v with 0bad unreadable", ids, states, want)
	}
}

// WatchMembers delivers the list at once and after every change of the
// list or of a record, across an expiry of the watcher's own session.
func TestWatchMembers(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, wc := newStore(t, zkc, "", "")
	got := make(chan []cluster.Member, 100)
	done := make(chan error, 1)
	go func() { done <- w.WatchMembers(ctx, func(ms []cluster.Member) { got <- ms }) }()
	next := func(what string, ok func([]cluster.Member) bool) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case ms := <-got:
				if ok(ms) {
					return
				}
			case <-timeout:
				t.Fatalf("WatchMembers did not deliver %s", what)
			}
		}
	}
	next("the empty list", func(ms []cluster.Member) bool { return len(ms) == 0 })
	a, ac := newStore(t, zkc, "a", "inst-a")
	if err := a.PublishMember(ctx, member("a", "inst-a", "standby")); err != nil {
		t.Fatal(err)
	}
	next("a standby", func(ms []cluster.Member) bool { return len(ms) == 1 && ms[0].State == "standby" })
	if err := a.PublishMember(ctx, member("a", "inst-a", "leader")); err != nil {
		t.Fatal(err)
	}
	next("a leader", func(ms []cluster.Member) bool { return len(ms) == 1 && ms[0].State == "leader" })

	expire(t, zkc, wc)
	b, _ := newStore(t, zkc, "b", "inst-b")
	if err := b.PublishMember(ctx, member("b", "inst-b", "standby")); err != nil {
		t.Fatal(err)
	}
	next("b, after the watcher's session expired", func(ms []cluster.Member) bool { return len(ms) == 2 })
	// a's session ends: its record goes, and so does it from the list.
	expire(t, zkc, ac)
	next("a gone with its session", func(ms []cluster.Member) bool { return len(ms) == 1 && ms[0].NodeID == "b" })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WatchMembers returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchMembers did not return when its context ended")
	}
}

// The join checks: the first node records its mode, a node of the other
// mode is refused, as is one that finds the other mode's znodes in the
// election directory or an unreadable record.
func TestCheckJoin(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	fair, fc := newStore(t, zkc, "a", "inst-a")
	if _, err := fair.CheckJoin(ctx, "", ""); err != nil {
		t.Fatalf("CheckJoin without a mode: %v", err)
	}
	if _, err := fair.CheckJoin(ctx, "fair", ""); err != nil {
		t.Fatalf("first node: %v", err)
	}
	b, _, err := session(t, fc).Get(ctx, testLayout.Config())
	var rec cluster.ClusterRecord
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.ElectionMode != "fair" || len(rec.ID) != 32 {
		t.Fatalf("cluster record %q, %v; want election_mode fair and a 32-digit id", b, err)
	}
	if _, err := fair.CheckJoin(ctx, "fair", ""); err != nil {
		t.Fatalf("same mode again: %v", err)
	}
	unfair, _ := newStore(t, zkc, "b", "inst-b")
	var me *cluster.ModeMismatchError
	if _, err := unfair.CheckJoin(ctx, "unfair", ""); !errors.As(err, &me) || me.Mode != "unfair" || me.Cluster != testLayout.Config() {
		t.Fatalf("other mode: %v, want a ModeMismatchError", err)
	}

	// A candidate of the other mode in the election directory.
	sess := session(t, fc)
	if err := sess.EnsurePath(ctx, testLayout.ElectionDir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(ctx, testLayout.ElectionDir()+"/lock", nil, zk.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if _, err := fair.CheckJoin(ctx, "fair", ""); !errors.As(err, &me) {
		t.Fatalf("fair node beside an unfair lock: %v, want a ModeMismatchError", err)
	}
	if err := sess.Delete(ctx, testLayout.ElectionDir()+"/lock", -1); err != nil {
		t.Fatal(err)
	}

	// An unreadable record refuses everybody.
	if _, err := sess.Set(ctx, testLayout.Config(), []byte("nonsense"), -1); err != nil {
		t.Fatal(err)
	}
	fresh, _ := newStore(t, zkc, "c", "inst-c")
	if _, err := fresh.CheckJoin(ctx, "fair", ""); !errors.As(err, &me) {
		t.Fatalf("unreadable record: %v, want a ModeMismatchError", err)
	}
}

// The failover request: an ephemeral of the requester's session, seen by a
// watcher, withdrawn only by its own requester and id, gone with the
// requester's session; the watch survives the watcher's session expiry.
func TestFailoverRequestLifecycle(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, wc := newStore(t, zkc, "w", "inst-w")
	if err := session(t, wc).EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	seen := make(chan *cluster.FailoverRequest, 100)
	go w.WatchFailover(ctx, func(r *cluster.FailoverRequest) { seen <- r })
	next := func(what string, ok func(*cluster.FailoverRequest) bool) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case r := <-seen:
				if ok(r) {
					return
				}
			case <-timeout:
				t.Fatalf("WatchFailover did not deliver %s", what)
			}
		}
	}
	none := func(r *cluster.FailoverRequest) bool { return r == nil }
	next("no request", none)

	req, rc := newStore(t, zkc, "", "")
	r1 := cluster.FailoverRequest{To: "b", TimeoutMS: 30000, ID: "r1", Deadline: time.Now().Add(30 * time.Second), By: "test"}
	if err := req.RequestFailover(ctx, r1); err != nil {
		t.Fatal(err)
	}
	next("r1", func(r *cluster.FailoverRequest) bool { return r != nil && r.ID == "r1" && r.To == "b" })
	_, st, err := session(t, rc).Get(ctx, testLayout.Failover())
	if err != nil || st.EphemeralOwner != session(t, rc).ID() {
		t.Fatalf("request owned by %x, %v; want an ephemeral of the requester", st.EphemeralOwner, err)
	}

	// Withdraw: not by someone else, not for another id.
	if err := w.WithdrawFailover(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := req.WithdrawFailover(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := session(t, rc).Exists(ctx, testLayout.Failover()); !ok {
		t.Fatal("the request was withdrawn by another session or for another id")
	}
	if err := req.WithdrawFailover(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	next("the withdrawal", none)

	// A new request replaces the one there; the watcher's session expires
	// and its watch carries on.
	if err := req.RequestFailover(ctx, r1); err != nil {
		t.Fatal(err)
	}
	next("r1 again", func(r *cluster.FailoverRequest) bool { return r != nil && r.ID == "r1" })
	r2 := r1
	r2.ID, r2.To = "r2", "c"
	if err := req.RequestFailover(ctx, r2); err != nil {
		t.Fatal(err)
	}
	next("r2 replacing r1", func(r *cluster.FailoverRequest) bool { return r != nil && r.ID == "r2" && r.To == "c" })
	expire(t, zkc, wc)
	// The requester's session expires: its request goes with it, and the
	// watcher (on its new session) sees that.
	expire(t, zkc, rc)
	next("the request gone with its requester's session", none)
}

// ExpireFailover deletes a (persistent, earlier-CLI) request only when it
// is the one timed out and not done.
func TestExpireFailover(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	s, c := newStore(t, zkc, "a", "inst-a")
	sess := session(t, c)
	if err := sess.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	put := func(r cluster.FailoverRequest) {
		t.Helper()
		b, _ := json.Marshal(r)
		_ = sess.Delete(ctx, testLayout.Failover(), -1)
		if _, _, err := sess.Create(ctx, testLayout.Failover(), b, zk.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	exists := func() bool {
		ok, _, err := sess.Exists(ctx, testLayout.Failover())
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if err := s.ExpireFailover(ctx, "r1"); err != nil {
		t.Fatalf("nothing there: %v", err)
	}
	put(cluster.FailoverRequest{To: "b", TimeoutMS: 1000, ID: "r2"})
	if err := s.ExpireFailover(ctx, "r1"); err != nil || !exists() {
		t.Fatalf("another request was deleted (%v)", err)
	}
	put(cluster.FailoverRequest{To: "b", TimeoutMS: 1000, ID: "r1", Done: true, Epoch: 3})
	if err := s.ExpireFailover(ctx, "r1"); err != nil || !exists() {
		t.Fatalf("a done request was deleted (%v)", err)
	}
	put(cluster.FailoverRequest{To: "b", TimeoutMS: 1000, ID: "r1"})
	if err := s.ExpireFailover(ctx, "r1"); err != nil || exists() {
		t.Fatalf("the timed-out request is still there (%v)", err)
	}
	// Earlier CLIs wrote no ID: the key is target and deadline.
	old := cluster.FailoverRequest{To: "b", Deadline: time.Now().Add(time.Minute)}
	put(old)
	if err := s.ExpireFailover(ctx, old.Key()); err != nil || exists() {
		t.Fatalf("the timed-out request of an earlier version is still there (%v)", err)
	}
}

// The breadcrumb outside a term (CLI, startup adoption), and the queue.
func TestBreadcrumbReadClearAndQueue(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	s, c := newStore(t, zkc, "", "")
	if _, v, err := s.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) || v.Exists() {
		t.Fatalf("ReadBreadcrumb with none = %s, %v; want ErrAbsent", v, err)
	}
	if _, _, err := s.ReadBreadcrumbData(ctx); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("ReadBreadcrumbData with none: %v", err)
	}
	sess := session(t, c)
	if err := sess.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(ctx, testLayout.Breadcrumb(), []byte("garbage"), zk.Persistent); err != nil {
		t.Fatal(err)
	}
	var ce *breadcrumb.CorruptError
	if _, _, err := s.ReadBreadcrumb(ctx); !errors.As(err, &ce) {
		t.Fatalf("ReadBreadcrumb of garbage: %v, want a CorruptError", err)
	}
	b, rev, err := s.ReadBreadcrumbData(ctx)
	if err != nil || string(b) != "garbage" || !rev.Exists() {
		t.Fatalf("ReadBreadcrumbData = %q at %v, %v", b, rev, err)
	}
	if err := s.ClearBreadcrumb(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearBreadcrumb(ctx, rev); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("clearing nothing: %v, want ErrAbsent", err)
	}
	if _, _, err := s.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after clear: %v", err)
	}
	if q, err := s.Queue(ctx); err != nil || len(q) != 0 {
		t.Fatalf("Queue without candidates = %v, %v", q, err)
	}
	if !s.Connected() {
		t.Fatal("Connected is false with a live session")
	}
}

// SessionChanged fires at a new session.
func TestSessionChanged(t *testing.T) {
	zkc := zktest.Start(t, 1)
	s, c := newStore(t, zkc, "", "")
	ch := s.SessionChanged()
	session(t, c)
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("SessionChanged did not fire for the first session")
	}
	ch = s.SessionChanged()
	select {
	case <-ch:
		t.Fatal("SessionChanged fired without a new session")
	case <-time.After(200 * time.Millisecond):
	}
	expire(t, zkc, c)
	session(t, c)
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("SessionChanged did not fire after the session expired and a new one began")
	}
}

// elect campaigns for node id in the store's election and returns the
// first term won; the campaign ends with the test.
func elect(t *testing.T, s *Store, c *zk.Client, id string) *wonTerm {
	t.Helper()
	return electIn(t, s, c, id, election.Fair)
}

// electIn is elect in the given election mode.
func electIn(t *testing.T, s *Store, c *zk.Client, id string, mode election.Mode) *wonTerm {
	t.Helper()
	el, err := election.New(election.Config{Dir: s.Layout().ElectionDir(), NodeID: id, Mode: mode}, election.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	won := make(chan cluster.Term, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Elector(el).Campaign(ctx, func(ctx context.Context, tm cluster.Term) {
			select {
			case won <- tm:
			default:
			}
			<-ctx.Done()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case tm := <-won:
		return asWon(tm)
	case <-time.After(30 * time.Second):
		t.Fatal("not elected")
	}
	return nil
}

// A term's records: breadcrumb written under the term's guard, the
// failover request read and completed, and Finish deleting breadcrumb and
// election znode in one multi — or neither.
func TestTermRecordsAndFinish(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	admin, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	exists := func(p string) bool {
		ok, _, err := adm.Exists(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	_ = admin
	rec := func(tm *wonTerm) breadcrumb.Record {
		return breadcrumb.Record{NodeID: "a", Host: "host-a", Epoch: tm.Epoch(), Since: time.Now().UTC()}
	}
	put := func(t *testing.T, r cluster.FailoverRequest) {
		b, _ := json.Marshal(r)
		_ = adm.Delete(ctx, testLayout.Failover(), -1)
		if _, _, err := adm.Create(ctx, testLayout.Failover(), b, zk.Persistent); err != nil {
			t.Fatal(err)
		}
	}
	get := func(t *testing.T) (cluster.FailoverRequest, int32) {
		b, st, err := adm.Get(ctx, testLayout.Failover())
		if err != nil {
			t.Fatal(err)
		}
		var r cluster.FailoverRequest
		json.Unmarshal(b, &r)
		return r, st.Version
	}

	t.Run("both deleted", func(t *testing.T) {
		s, c := newStore(t, zkc, "a", "inst-a")
		tm := elect(t, s, c, "a")
		if exp, err := tm.Expiry(); err != nil || time.Until(exp) <= 0 || tm.SessionTimeout() <= 0 {
			t.Fatalf("fresh term: expiry in %v (%v), session timeout %v", time.Until(exp), err, tm.SessionTimeout())
		}
		if _, v, err := tm.ReadBreadcrumb(ctx); !errors.Is(err, breadcrumb.ErrAbsent) || v.Exists() {
			t.Fatalf("ReadBreadcrumb = %s, %v", v, err)
		}
		v, err := tm.WriteBreadcrumb(ctx, rec(tm), cluster.Revision{})
		if err != nil {
			t.Fatal(err)
		}
		v, err = tm.WriteBreadcrumb(ctx, rec(tm), v)
		if err != nil || v != cluster.RevisionOf(1) {
			t.Fatalf("rewrite = %s, %v; want version 1", v, err)
		}
		if got, gv, err := tm.ReadBreadcrumb(ctx); err != nil || gv != v || got.Epoch != tm.Epoch() {
			t.Fatalf("ReadBreadcrumb = %+v@%s, %v", got, gv, err)
		}
		if err := tm.Finish(ctx, v); err != nil {
			t.Fatal(err)
		}
		if exists(testLayout.Breadcrumb()) || exists(tm.l.Path) {
			t.Fatal("Finish left the breadcrumb or the election znode")
		}
	})

	t.Run("znode gone keeps the breadcrumb", func(t *testing.T) {
		s, c := newStore(t, zkc, "a", "inst-a")
		tm := elect(t, s, c, "a")
		v, err := tm.WriteBreadcrumb(ctx, rec(tm), cluster.Revision{})
		if err != nil {
			t.Fatal(err)
		}
		if err := adm.Delete(ctx, tm.l.Path, -1); err != nil { // an operator, say
			t.Fatal(err)
		}
		if err := tm.Finish(ctx, v); !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("Finish without our znode = %v, want ErrNoNode", err)
		}
		if !exists(testLayout.Breadcrumb()) {
			t.Fatal("the breadcrumb was deleted although the term's znode was gone: the successor would not fence")
		}
		// A breadcrumb write of a term whose znode is gone fails too.
		if _, err := tm.WriteBreadcrumb(ctx, rec(tm), v); err == nil {
			t.Fatal("breadcrumb written without our election znode")
		}
		if err := adm.Delete(ctx, testLayout.Breadcrumb(), -1); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("wrong version keeps both", func(t *testing.T) {
		s, c := newStore(t, zkc, "a", "inst-a")
		tm := elect(t, s, c, "a")
		v, err := tm.WriteBreadcrumb(ctx, rec(tm), cluster.Revision{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tm.Finish(ctx, revision(version(v)+1)); !errors.Is(err, zk.ErrBadVersion) {
			t.Fatalf("Finish at a wrong version = %v, want ErrBadVersion", err)
		}
		if err := tm.Finish(ctx, cluster.Revision{}); err == nil {
			t.Fatal("Finish without a breadcrumb version deleted something")
		}
		if !exists(testLayout.Breadcrumb()) || !exists(tm.l.Path) {
			t.Fatal("a failed Finish deleted the breadcrumb or the election znode")
		}
		if err := tm.Finish(ctx, v); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("unfair: both deleted", func(t *testing.T) {
		s, c := newStore(t, zkc, "a", "inst-a")
		tm := electIn(t, s, c, "a", election.Unfair)
		v, err := tm.WriteBreadcrumb(ctx, rec(tm), cluster.Revision{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tm.Finish(ctx, v); err != nil {
			t.Fatal(err)
		}
		if exists(testLayout.Breadcrumb()) || exists(tm.l.Path) {
			t.Fatal("Finish left the breadcrumb or the lock")
		}
	})

	// An operator deletes our lock and another node takes it (here in the
	// same multi, so that our own elector cannot take it back first)
	// before we notice: the lock has our name and our version, but it is
	// theirs, and Finish must leave it, and so the breadcrumb too.
	t.Run("unfair: another's lock under our name is kept", func(t *testing.T) {
		s, c := newStore(t, zkc, "a", "inst-a")
		tm := electIn(t, s, c, "a", election.Unfair)
		v, err := tm.WriteBreadcrumb(ctx, rec(tm), cluster.Revision{})
		if err != nil {
			t.Fatal(err)
		}
		_, other := newStore(t, zkc, "b", "inst-b")
		osess := session(t, other)
		_, ours, err := adm.Get(ctx, tm.l.Path)
		if err != nil {
			t.Fatal(err)
		}
		if err := osess.Multi(ctx,
			zk.DeleteOp{Path: tm.l.Path, Version: -1},
			zk.CreateOp{Path: tm.l.Path, Data: []byte(`{"node_id":"b"}`), Mode: zk.Ephemeral}); err != nil {
			t.Fatal(err)
		}
		_, theirs, err := adm.Get(ctx, tm.l.Path)
		if err != nil {
			t.Fatal(err)
		}
		if theirs.Version != ours.Version {
			t.Fatalf("the other lock is at version %d, ours was at %d: the test would not catch a delete at our version", theirs.Version, ours.Version)
		}
		if err := tm.Finish(ctx, v); !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("Finish with another session's lock under our name = %v, want ErrNoNode", err)
		}
		_, now, err := adm.Get(ctx, tm.l.Path)
		if err != nil || now.Czxid != theirs.Czxid || now.EphemeralOwner != osess.ID() {
			t.Fatalf("the other session's lock: %+v, %v; want it kept (czxid %d, owner 0x%x)", now, err, theirs.Czxid, osess.ID())
		}
		if !exists(testLayout.Breadcrumb()) {
			t.Fatal("the breadcrumb was deleted although our lock was gone: the successor would not fence")
		}
		if err := adm.Delete(ctx, testLayout.Breadcrumb(), -1); err != nil {
			t.Fatal(err)
		}
		other.Close() // its lock goes with its session
	})

	t.Run("failover request", func(t *testing.T) {
		s, c := newStore(t, zkc, "a", "inst-a")
		tm := elect(t, s, c, "a")
		if r, err := tm.ReadFailover(ctx); r != nil || err != nil {
			t.Fatalf("ReadFailover with none = %+v, %v", r, err)
		}
		if err := tm.CompleteFailover(ctx, tm.Epoch()); err != nil {
			t.Fatalf("CompleteFailover with none: %v", err)
		}
		put(t, cluster.FailoverRequest{To: "b", TimeoutMS: 30000, ID: "r1"})
		if r, err := tm.ReadFailover(ctx); err != nil || r == nil || r.To != "b" {
			t.Fatalf("ReadFailover = %+v, %v; want the request to b", r, err)
		}
		if err := tm.CompleteFailover(ctx, tm.Epoch()); err != nil {
			t.Fatal(err)
		}
		if r, _ := get(t); r.Done {
			t.Fatal("a request to another node was marked done")
		}
		put(t, cluster.FailoverRequest{To: "a", TimeoutMS: 30000, ID: "r2"})
		if err := tm.CompleteFailover(ctx, tm.Epoch()); err != nil {
			t.Fatal(err)
		}
		if r, _ := get(t); !r.Done || r.Epoch != tm.Epoch() || r.ID != "r2" {
			t.Fatalf("after CompleteFailover: %+v, want done with epoch %d", r, tm.Epoch())
		}
		put(t, cluster.FailoverRequest{To: "a"})
		if _, err := adm.Set(ctx, testLayout.Failover(), []byte("{"), -1); err != nil {
			t.Fatal(err)
		}
		if r, err := tm.ReadFailover(ctx); r != nil || err != nil {
			t.Fatalf("an unreadable request = %+v, %v; want none", r, err)
		}
	})

	t.Run("failover request of a term that is over", func(t *testing.T) {
		s, c := newStore(t, zkc, "a", "inst-a")
		tm := elect(t, s, c, "a")
		put(t, cluster.FailoverRequest{To: "a", TimeoutMS: 30000, ID: "r3"})
		_, before := get(t)
		if err := adm.Delete(ctx, tm.l.Path, -1); err != nil { // an operator, say: the term is over
			t.Fatal(err)
		}
		if err := tm.CompleteFailover(ctx, tm.Epoch()); !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("CompleteFailover without our znode = %v, want ErrNoNode", err)
		}
		if r, v := get(t); r.Done || r.Epoch != 0 || v != before {
			t.Fatalf("a term that is over marked the failover request done: %+v at version %d (was %d)", r, v, before)
		}
		if err := adm.Delete(ctx, testLayout.Failover(), -1); err != nil {
			t.Fatal(err)
		}
	})
}

// The Store and the Elector implement the contract.
var (
	_ cluster.Records = (*Store)(nil)
	_ cluster.Elector = (*Elector)(nil)
	_ cluster.Warmer  = (*Elector)(nil)
)

// The reason a term ends travels as its context's cause: cancelling the
// campaign with a cause ends the term with that cause (the controller's
// leadership-loss reason), through the adapter as through election.
func TestCampaignTermCauseIsCampaignCause(t *testing.T) {
	zkc := zktest.Start(t, 1)
	s, c := newStore(t, zkc, "a", "inst-a")
	el, err := election.New(election.Config{Dir: s.Layout().ElectionDir(), NodeID: "a", Mode: election.Fair}, election.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	won := make(chan struct{})
	cause := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.Elector(el).Campaign(ctx, func(tctx context.Context, tm cluster.Term) {
			if tm.Epoch() <= 0 {
				t.Errorf("term epoch %d", tm.Epoch())
			}
			close(won)
			<-tctx.Done()
			cause <- context.Cause(tctx)
		})
	}()
	select {
	case <-won:
	case <-time.After(30 * time.Second):
		t.Fatal("not elected")
	}
	errHandoff := errors.New("test: failover handoff")
	cancel(errHandoff)
	select {
	case got := <-cause:
		if !errors.Is(got, errHandoff) {
			t.Fatalf("term ended with cause %v, want the campaign's %v", got, errHandoff)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the term did not end with the campaign")
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Campaign did not return")
	}
	if q, err := s.Queue(t.Context()); err != nil || len(q) != 0 {
		t.Fatalf("election queue after the campaign = %v, %v; want empty", q, err)
	}
}

// election's reasons for the end of a leadership are cluster's, in
// ZooKeeper's words: the controller names the FAILOVERD_REASON from them,
// also when wrapped, and the message stays election's.
func TestElectionCausesAreClusters(t *testing.T) {
	for _, tc := range []struct {
		cause, want error
	}{
		{election.ErrLeaseExpired, cluster.ErrLeaseExpired},
		{fmt.Errorf("%w: %w", election.ErrLeaseExpired, election.ErrTimeoutShrunk), cluster.ErrLeaseExpired},
		{election.ErrSessionExpired, cluster.ErrSessionExpired},
		{fmt.Errorf("x: %w", election.ErrNodeDeleted), cluster.ErrEntryDeleted},
		{election.ErrStopped, cluster.ErrStopped},
		{election.ErrReleased, cluster.ErrReleased},
		{election.ErrLeaseTooShort, cluster.ErrLeaseTooShort},
	} {
		if !errors.Is(tc.cause, tc.want) || strings.HasPrefix(tc.cause.Error(), "cluster:") {
			t.Errorf("%v: want it to be %v, in election's words", tc.cause, tc.want)
		}
	}
}

// On a real election: a term whose znode is deleted ends with
// cluster.ErrEntryDeleted, and a term whose callback returns ends with
// cluster.ErrReleased; Valid speaks cluster's terms too.
func TestTermCauseInClusterTerms(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	_, ac := newStore(t, zkc, "", "")
	adm := session(t, ac)
	s, c := newStore(t, zkc, "a", "inst-a")
	el, err := election.New(election.Config{Dir: s.Layout().ElectionDir(), NodeID: "a", Mode: election.Fair}, election.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	type won struct {
		ctx context.Context
		t   *wonTerm
	}
	wins := make(chan won, 4)
	ret := make(chan struct{}, 4) // a value makes the callback return
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Elector(el).Campaign(cctx, func(tctx context.Context, tm cluster.Term) {
			wins <- won{tctx, asWon(tm)}
			select {
			case <-tctx.Done():
			case <-ret:
			}
		})
	}()
	defer func() { cancel(); <-done }()
	next := func() won {
		t.Helper()
		select {
		case w := <-wins:
			return w
		case <-time.After(30 * time.Second):
			t.Fatal("not elected")
		}
		return won{}
	}
	ended := func(w won) error {
		t.Helper()
		select {
		case <-w.ctx.Done():
			return context.Cause(w.ctx)
		case <-time.After(30 * time.Second):
			t.Fatal("the term did not end")
		}
		return nil
	}

	w := next()
	if _, err := w.t.Expiry(); err != nil {
		t.Fatalf("Expiry = %v", err)
	}
	if err := adm.Delete(ctx, w.t.l.Path, -1); err != nil {
		t.Fatal(err)
	}
	if got := ended(w); !errors.Is(got, cluster.ErrEntryDeleted) {
		t.Fatalf("a term whose znode was deleted ended with %v, want cluster.ErrEntryDeleted", got)
	}

	w = next()
	ret <- struct{}{}
	if got := ended(w); !errors.Is(got, cluster.ErrReleased) {
		t.Fatalf("a term whose callback returned ended with %v, want cluster.ErrReleased", got)
	}

	w = next()
	expire(t, zkc, c)
	if got := ended(w); !errors.Is(got, cluster.ErrSessionExpired) {
		t.Fatalf("a term whose session expired ended with %v, want cluster.ErrSessionExpired", got)
	}
	if err := validErr(w.t); !errors.Is(err, cluster.ErrSessionExpired) {
		t.Fatalf("Valid after the session expired = %v, want cluster.ErrSessionExpired", err)
	}
}

// Members reads every record at once (a winner reads them on its
// takeover's critical path): sorted by node id, an undecodable one listed
// as unreadable, with as many records as nodes.
func TestMembersReadAtOnce(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx := t.Context()
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("n%02d", 11-i)
		s, _ := newStore(t, zkc, id, "inst-"+id)
		if err := s.PublishMember(ctx, member(id, "inst-"+id, "standby")); err != nil {
			t.Fatal(err)
		}
		ids = append([]string{id}, ids...)
	}
	a, ac := newStore(t, zkc, "zz", "inst-zz")
	if _, _, err := session(t, ac).Create(ctx, testLayout.Member("zz"), []byte("{not json"), zk.Ephemeral); err != nil {
		t.Fatal(err)
	}
	ms, err := a.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.NodeID+":"+m.State)
	}
	var want []string
	for _, id := range ids {
		want = append(want, id+":standby")
	}
	want = append(want, "zz:unreadable")
	if !slices.Equal(got, want) {
		t.Fatalf("Members = %v, want %v", got, want)
	}
}
