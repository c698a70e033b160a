package etcdcluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// No herd at N=100: 100 fair candidates (each with a lease of its own, on
// one shared client) queue up; the leader leaves 10 times in a row. Each
// change must wake exactly one waiting candidate, its successor: a
// recipe that watched the whole election would wake all 99. A watch that
// failed (etcd's own leader changed: every watch opened with require-leader
// is cancelled, and every candidate looks again) is no herd; it is counted
// apart, and a change during which one failed must still have woken at most
// one candidate by a deletion. At least one change must run without a
// failed watch, or the test proved nothing.
func TestNoHerdAt100(t *testing.T) {
	if testing.Short() {
		t.Skip("100 candidates")
	}
	const n, changes = 100, 10
	c := etcdtest.Start(t, etcdtest.Options{})
	adm := admin(t, c)
	cli, err := Dial(DialConfig{Endpoints: c.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	var woke, failed atomic.Int64
	hooks := &electorHooks{woke: func() { woke.Add(1) }, watchFailed: func() { failed.Add(1) }}
	l := newLayout()
	wins := make(chan *won, n)
	for i := range n {
		id := fmt.Sprintf("n%03d", i)
		// A long TTL: at load 50 and more, 5 s leases of 100 sessions on
		// one client lapsed, and each lapse woke its successor, which
		// counted as a herd.
		conn, err := NewConn(cli, ConnConfig{LeaseTTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Layout: l, NodeID: id, Instance: "inst-" + id}, Deps{Conn: conn})
		if err != nil {
			t.Fatal(err)
		}
		el, err := s.Elector(ElectorConfig{NodeID: id, Mode: Fair, hooks: hooks})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			el.Campaign(ctx, func(ctx context.Context, tm cluster.Term) {
				w := &won{t: asWon(tm), ctx: ctx, at: time.Now(), node: id, leave: make(chan struct{})}
				wins <- w
				select {
				case <-ctx.Done():
				case <-w.leave:
				}
			})
		}()
		t.Cleanup(func() { cancel(); <-done; conn.Close() })
	}
	waitFor(t, 60*time.Second, "100 candidates queued", func() bool {
		q, err := (&Store{cli: adm, layout: l}).queue(ctxT(t))
		return err == nil && len(q) == n
	})
	w := next(t, wins)
	time.Sleep(500 * time.Millisecond) // every candidate is watching by now
	start := woke.Load()
	var per, perFailed []int64
	clean := 0
	for range changes {
		before, failedBefore := woke.Load(), failed.Load()
		w.t.s.conn.Close() // the leader leaves for good: its lease is revoked
		w = next(t, wins)
		time.Sleep(200 * time.Millisecond) // wake-ups of this change arrive
		f := failed.Load() - failedBefore
		per, perFailed = append(per, woke.Load()-before-f), append(perFailed, f)
	}
	// Only the leaders left: a candidate whose lease lapsed would wake
	// its successor too, which is load, not a herd.
	if q, err := (&Store{cli: adm, layout: l}).queue(ctxT(t)); err != nil || len(q) != n-changes {
		t.Errorf("%d candidates queued after %d changes (%v), want %d: leases lapsed, the wake-ups below are not all the leaders'", len(q), changes, err, n-changes)
	}
	t.Logf("%d candidates, %d leader changes: waiting candidates woken by a deletion per change %v (%d in all); by a failed watch %v",
		n, changes, per, woke.Load()-start, perFailed)
	for i, k := range per {
		switch {
		case perFailed[i] == 0 && k != 1:
			t.Errorf("change %d woke %d waiting candidates; want 1 (no herd)", i, k)
		case perFailed[i] > 0 && k > 1:
			t.Errorf("change %d woke %d waiting candidates by a deletion (and %d by a failed watch); want at most 1 (no herd)", i, k, perFailed[i])
		case perFailed[i] == 0:
			clean++
		}
	}
	if clean == 0 {
		t.Errorf("every change saw a failed watch %v: nothing measured", perFailed)
	}
}
