package etcdcluster

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// A win while the renewals are late is not handed over before a renewal
// gives the term enough lease. b (a 5s lease, a demote budget of 2.5s)
// waits behind a; b's renewals stop (its Conn is held right after an
// answered one) until its lease leaves less than the budget; a leaves,
// and b's renewals resume half a second later. The term b is handed must
// hold the budget (the controller refuses one that cannot, and the term
// ends its budget before the deadline: a term handed over at once ends at
// once, and its key and place in the queue go with it), and must be the
// term of b's key of the wait: no epoch spent on a term that could not be
// used.
func testWinWaitsForLease(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	const ttl, budget = 5 * time.Second, 2500 * time.Millisecond
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	cha, _ := a.campaign(t, Fair)
	wa := next(t, cha)

	var stall atomic.Bool
	stalled, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cli, err := Dial(DialConfig{Endpoints: c.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := NewConn(cli, ConnConfig{LeaseTTL: ttl, Logger: testLogger("b"), onRenewed: func() {
		if stall.Load() {
			once.Do(func() { close(stalled) })
			select {
			case <-resume:
			case <-t.Context().Done():
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cli.Close() })
	s, err := New(Config{Layout: l, NodeID: "b", Instance: "inst-b"}, Deps{Conn: conn, Logger: testLogger("b")})
	if err != nil {
		t.Fatal(err)
	}
	b := &node{id: "b", cli: cli, conn: conn, s: s}
	sess := b.session(t)
	if err := LeaseFits(sess.TTL(), sess.RenewInterval(), budget); err != nil {
		t.Fatalf("etcd granted a lease that cannot hold the test's budget: %v", err)
	}

	// b's terms, with the lease each had when it was handed over.
	type handed struct {
		epoch int64
		left  time.Duration
		err   error
		ended func() bool
	}
	terms := make(chan handed, 16)
	el, err := s.Elector(ElectorConfig{NodeID: "b", Mode: Fair, DemoteBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		el.Campaign(ctx, func(tctx context.Context, tm cluster.Term) {
			h := handed{epoch: tm.Epoch(), ended: func() bool { return tctx.Err() != nil }}
			if exp, err := tm.Expiry(); err != nil {
				h.err = err
			} else {
				h.left = time.Until(exp)
			}
			terms <- h
			<-tctx.Done()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })

	key := dir(l.ElectionDir()) + fairPrefix + leaseHex(sess.ID)
	var rev int64
	waitFor(t, 20*time.Second, "b's key", func() bool {
		r, err := adm.Get(ctxT(t), key)
		if err == nil && len(r.Kvs) == 1 {
			rev = r.Kvs[0].CreateRevision
		}
		return rev > 0
	})
	stall.Store(true)
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("b's lease was not renewed within 10s")
	}
	waitFor(t, 10*time.Second, "b's lease to leave less than the budget", func() bool {
		return time.Until(sess.Deadline()) < budget
	})
	wa.release() // a leaves: b wins
	waitFor(t, 10*time.Second, "b's lease to leave less than the budget less 500ms", func() bool {
		return time.Until(sess.Deadline()) < budget-500*time.Millisecond
	})
	close(resume)

	var h handed
	select {
	case h = <-terms:
	case <-time.After(20 * time.Second):
		t.Fatal("b did not lead within 20s")
	}
	t.Logf("b's first term: epoch %d (its key of the wait %d), lease left when handed over %v (%v); demote budget %v",
		h.epoch, rev, h.left.Round(time.Millisecond), h.err, budget)
	if h.err != nil || h.left <= budget {
		t.Errorf("b's term was handed over with %v of lease left (%v); want more than the demote budget %v", h.left, h.err, budget)
	}
	if h.epoch != rev {
		t.Errorf("b's first term has epoch %d, want %d (the key it waited with)", h.epoch, rev)
	}
	time.Sleep(200 * time.Millisecond)
	if h.ended() {
		t.Errorf("b's term ended within 200ms")
	}
}
