package etcdcluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// The tests that inject no fault into etcd itself share one 3-member
// cluster, each in a layout of its own.
func TestOnSharedCluster(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	adm := admin(t, c)
	for _, tc := range []struct {
		name string
		test func(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client)
	}{
		{"FairElection", testFairElection},
		{"UnfairElection", testUnfairElection},
		{"NoHerd", testNoHerd},
		{"WinWaitsForLease", testWinWaitsForLease},
		{"WinAfterLeaseGone/Fair", func(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
			testWinAfterLeaseGone(t, c, adm, Fair)
		}},
		{"WinAfterLeaseGone/Unfair", func(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
			testWinAfterLeaseGone(t, c, adm, Unfair)
		}},
		{"GuardedWrites/EntryDeleted", func(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
			testGuardedWrites(t, c, adm, faultDeleteKey)
		}},
		{"GuardedWrites/LeaseRevoked", func(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
			testGuardedWrites(t, c, adm, faultRevokeLease)
		}},
		{"CompareAndSet", testCompareAndSet},
		{"Members", testMembers},
		{"FailoverRequests", testFailoverRequests},
		{"CheckJoin", testCheckJoin},
		{"PositionAndHistory", testPositionAndHistory},
		{"Watches", testWatches},
		{"WatchCompacted", testWatchCompacted},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, c, adm) })
	}
}

// Fair: candidates win in the order they joined, each once the one before
// it left, with epochs that strictly increase; a candidate that rejoins
// after its term queues behind the others with a new key and wins again
// at a greater epoch.
func testFairElection(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	all := joinInOrder(t, c, adm, l, Fair, nil, "a", "b", "c")
	var last int64
	want := []string{"a", "b", "c", "a", "b", "c"}
	for i, id := range want {
		w := next(t, all)
		if w.node != id || w.t.Epoch() <= last {
			t.Fatalf("term %d: %s won at epoch %d (last epoch %d); want %s, at a greater epoch", i, w.node, w.t.Epoch(), last, id)
		}
		last = w.t.Epoch()
		if exp, err := w.t.Expiry(); err != nil || time.Until(exp) < testTTL/2 {
			t.Fatalf("Expiry of %s right after its win: %v ahead, %v; want more than half the TTL", w.node, time.Until(exp), err)
		}
		none(t, all, 200*time.Millisecond, "while a term is held")
		w.release()
	}
}

// joinInOrder starts the candidates ids one after the other (each once the
// one before is queued), their electors with hooks (nil: none), and
// returns every term they win.
func joinInOrder(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client, l cluster.Layout, mode Mode, hooks *electorHooks, ids ...string) <-chan *won {
	t.Helper()
	all := make(chan *won, 64)
	for i, id := range ids {
		ch, _ := newNode(t, c.Endpoints(), l, id).campaignWith(t,
			ElectorConfig{NodeID: id, Mode: mode, DemoteBudget: 500 * time.Millisecond, hooks: hooks})
		go func() {
			for w := range ch {
				all <- w
			}
		}()
		if mode == Fair {
			waitFor(t, 20*time.Second, "the queue", func() bool {
				q, err := (&Store{cli: adm, layout: l}).queue(ctxT(t))
				return err == nil && len(q) == i+1
			})
		}
	}
	return all
}

// Unfair: whoever creates the lock leads; epochs strictly increase across
// the terms of every node.
func testUnfairElection(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	all := joinInOrder(t, c, adm, l, Unfair, nil, "a", "b", "c")
	var last int64
	for i := range 6 {
		w := next(t, all)
		if w.t.Epoch() <= last {
			t.Fatalf("term %d: %s won with epoch %d after epoch %d", i, w.node, w.t.Epoch(), last)
		}
		if w.t.key != dir(l.ElectionDir())+lockName {
			t.Fatalf("unfair term's key %s", w.t.key)
		}
		last = w.t.Epoch()
		none(t, all, 200*time.Millisecond, "while a term is held")
		w.release()
	}
}

// No herd: in fair mode each candidate watches only its predecessor, so
// one key's deletion wakes one candidate; with 8 candidates every
// predecessor is watched by exactly one.
func testNoHerd(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	var mu sync.Mutex
	watchers := map[string]map[string]bool{} // predecessor -> keys watching it
	hooks := &electorHooks{waiting: func(key, pred string) {
		mu.Lock()
		defer mu.Unlock()
		if watchers[pred] == nil {
			watchers[pred] = map[string]bool{}
		}
		watchers[pred][key] = true
	}}
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	all := joinInOrder(t, c, adm, l, Fair, hooks, ids...)
	for i, id := range ids {
		w := next(t, all)
		if w.node != id {
			t.Fatalf("term %d won by %s, want %s (join order)", i, w.node, id)
		}
		w.t.s.conn.Close() // leave for good: its lease is revoked
	}
	mu.Lock()
	defer mu.Unlock()
	if len(watchers) != len(ids)-1 {
		t.Errorf("%d keys were watched, want %d (every candidate's but the last's)", len(watchers), len(ids)-1)
	}
	for pred, ws := range watchers {
		if len(ws) != 1 {
			t.Errorf("%s was watched by %d candidates, want 1", pred, len(ws))
		}
	}
}

// A candidate whose lease is gone while it waits never wins with that
// lease (etcd's concurrency.Campaign can: it waits only for the deletion
// of the keys before it). b waits behind a; an operator revokes b's lease;
// a leaves: b wins only with a new session, at a greater epoch than
// anything of its old lease, and its term's key exists, bound to the new
// lease. In fair mode b's old key was in the queue; in unfair mode b had
// none, and its put with the revoked lease fails.
func testWinAfterLeaseGone(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client, mode Mode) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	cha, stopA := a.campaign(t, mode)
	next(t, cha)
	b := newNode(t, c.Endpoints(), l, "b")
	old := b.session(t)
	chb, _ := b.campaign(t, mode)
	var oldRev int64
	if mode == Fair {
		oldKey := dir(l.ElectionDir()) + fairPrefix + leaseHex(old.ID)
		waitFor(t, 20*time.Second, "b's key", func() bool {
			r, err := adm.Get(ctxT(t), oldKey)
			if err == nil && len(r.Kvs) == 1 {
				oldRev = r.Kvs[0].CreateRevision
			}
			return oldRev > 0
		})
	} else {
		time.Sleep(300 * time.Millisecond) // b watches the lock
	}
	r, err := adm.Revoke(ctxT(t), old.ID)
	if err != nil {
		t.Fatal(err)
	}
	revoked := r.Header.Revision
	stopA() // a leaves for good
	wb := next(t, chb)
	if wb.t.sess == old || wb.t.Epoch() <= max(oldRev, revoked) {
		t.Fatalf("b won on its revoked lease (epoch %d; its old key's create revision %d, the revoke's %d)", wb.t.Epoch(), oldRev, revoked)
	}
	k, err := adm.Get(ctxT(t), wb.t.key)
	if err != nil || len(k.Kvs) != 1 || k.Kvs[0].CreateRevision != wb.t.Epoch() || k.Kvs[0].Lease != int64(wb.t.sess.ID) {
		t.Fatalf("b's term key %s: %v, %v; want it at create revision %d, on lease %x", wb.t.key, k, err, wb.t.Epoch(), int64(wb.t.sess.ID))
	}
}

type fault int

const (
	faultDeleteKey fault = iota
	faultRevokeLease
)

func (f fault) String() string {
	return [...]string{"an operator's delete of the key", "a revoke of the lease"}[f]
}

// apply makes w's term end from outside: its key deleted, or its lease
// revoked.
func (f fault) apply(t *testing.T, adm *clientv3.Client, w *won) {
	t.Helper()
	var err error
	if f == faultDeleteKey {
		_, err = adm.Delete(ctxT(t), w.t.key)
	} else {
		_, err = adm.Revoke(ctxT(t), w.t.sess.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// checkEnded waits for w's term to end after f and checks its cause: the
// key's deletion for a delete; for a revoke, which deletes the key with the
// lease, whichever its elector sees first, the deletion (at once) or a
// renewal refused. After a revoke the session must end too (a renewal tells it the lease is
// gone), so that the next candidacy takes a new lease.
func checkEnded(t *testing.T, w *won, f fault) {
	t.Helper()
	cause := waitEnded(t, w)
	if f == faultDeleteKey {
		if !errors.Is(cause, cluster.ErrEntryDeleted) {
			t.Errorf("after %s the term ended with %v; want %v", f, cause, cluster.ErrEntryDeleted)
		}
		return
	}
	if !errors.Is(cause, cluster.ErrEntryDeleted) && !errors.Is(cause, cluster.ErrSessionExpired) {
		t.Errorf("after %s the term ended with %v; want %v or %v", f, cause, cluster.ErrEntryDeleted, cluster.ErrSessionExpired)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !errors.Is(w.t.sess.Err(), cluster.ErrSessionExpired) {
		if time.Now().After(deadline) {
			t.Fatalf("after %s the session still has no error (%v) 10s later; want %v", f, w.t.sess.Err(), cluster.ErrSessionExpired)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitEnded waits for w's context to end and returns its cause.
func waitEnded(t *testing.T, w *won) error {
	t.Helper()
	select {
	case <-w.ctx.Done():
		return context.Cause(w.ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("the term's context did not end within 30s")
	}
	return nil
}

// errors.Is for a list.
func isAny(err error, targets ...error) bool {
	for _, e := range targets {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
