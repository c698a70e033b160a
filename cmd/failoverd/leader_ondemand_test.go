package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// fakeFresh is Store.Fresh: each sync takes took and answers err (nil: in
// touch with the quorum), or with hang never answers (it ends with its
// context). It counts the syncs and keeps their contexts.
type fakeFresh struct {
	mu   sync.Mutex
	took time.Duration
	err  error
	hang bool
	ctxs []context.Context
}

func (f *fakeFresh) fresh(ctx context.Context) error {
	f.mu.Lock()
	f.ctxs = append(f.ctxs, ctx)
	took, err, hang := f.took, f.err, f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	select {
	case <-time.After(took):
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeFresh) set(took time.Duration, err error, hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.took, f.err, f.hang = took, err, hang
}

func (f *fakeFresh) syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ctxs)
}

// startView runs, in a synctest bubble, a view of service with the
// daemon's timing at a 5 s session timeout (poll 1 s, wait 1 s), whose
// watch delivers l once; stop ends it (it may be called again).
func startView(t *testing.T, f *fakeFresh, service string, l *cluster.Leader) (v *leaderView, stop func()) {
	t.Helper()
	v = &leaderView{
		watch: func(ctx context.Context, fn func(*cluster.Leader)) error {
			fn(l)
			<-ctx.Done()
			return ctx.Err()
		},
		fresh: f.fresh, stale: 5 * time.Second, poll: time.Second, wait: defaultLeaderWait, now: time.Now, service: service,
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- v.run(ctx) }()
	synctest.Wait() // l delivered
	var once sync.Once
	return v, func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run() = %v, want nil", err)
			}
		})
	}
}

// ask calls v.Leader and checks its answer and how many syncs were sent in
// all by then.
func ask(t *testing.T, v *leaderView, f *fakeFresh, want *cluster.Leader, wantSyncs int) {
	t.Helper()
	if l, err := v.Leader(); err != nil || l != want {
		t.Fatalf("Leader() = %+v, %v, want %+v", l, err, want)
	}
	if n := f.syncs(); n != wantSyncs {
		t.Fatalf("%d syncs sent, want %d", n, wantSyncs)
	}
}

// A view nobody asks sends no sync, however long (the daemon's idle load);
// the first ask after that sends exactly one and waits for its answer; an
// ask within a poll of the last answered sync sends none, the first one a
// poll later sends one.
func TestLeaderViewSyncsOnlyWhenAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFresh{took: 30 * time.Millisecond}
		a := &cluster.Leader{NodeID: "a", Epoch: 3}
		v, stop := startView(t, f, "", a)
		defer stop()

		time.Sleep(10 * v.poll)
		if n := f.syncs(); n != 0 {
			t.Fatalf("%d syncs over 10 polls nobody asked in, want none", n)
		}
		time.Sleep(time.Hour)
		if n := f.syncs(); n != 0 {
			t.Fatalf("%d syncs over an hour nobody asked in, want none", n)
		}
		start := time.Now()
		ask(t, v, f, a, 1)
		if took := time.Since(start); took != 30*time.Millisecond {
			t.Fatalf("the first ask after an hour took %v, want the sync's 30ms", took)
		}
		for range 9 {
			time.Sleep(100 * time.Millisecond) // up to 930 ms after the sync was sent
			ask(t, v, f, a, 1)
		}
		time.Sleep(70 * time.Millisecond) // a poll after it was sent
		ask(t, v, f, a, 2)
		time.Sleep(10 * v.poll)
		if n := f.syncs(); n != 2 {
			t.Fatalf("%d syncs in all after 10 more polls nobody asked in, want 2", n)
		}
	})
}

// Callers that ask while a sync is in flight share it: one sync, and each
// of them answers once it is answered. The view's mutex is free meanwhile
// (the watch can deliver).
func TestLeaderViewSharesOneSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFresh{took: 100 * time.Millisecond}
		a, b := &cluster.Leader{NodeID: "a", Epoch: 3}, &cluster.Leader{NodeID: "b", Epoch: 4}
		v, stop := startView(t, f, "", a)
		defer stop()

		const askers = 20
		type answer struct {
			l    *cluster.Leader
			err  error
			took time.Duration
		}
		answers := make(chan answer, askers)
		start := time.Now()
		for i := range askers {
			go func() {
				time.Sleep(time.Duration(i) * time.Millisecond) // some join the sync late
				l, err := v.Leader()
				answers <- answer{l, err, time.Since(start)}
			}()
		}
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		v.set(b) // blocks if the sync held v.mu
		if n := f.syncs(); n != 1 {
			t.Fatalf("%d syncs for %d askers, want 1", n, askers)
		}
		if len(answers) != 0 {
			t.Fatal("an asker answered before the sync did")
		}
		for range askers {
			if got := <-answers; got.err != nil || got.l != b || got.took != 100*time.Millisecond {
				t.Fatalf("an asker got %+v, %v after %v, want b after the sync's 100ms", got.l, got.err, got.took)
			}
		}
		if n := f.syncs(); n != 1 {
			t.Fatalf("%d syncs in all, want 1", n)
		}
	})
}

// When the sync fails or is not answered within the wait, the view answers
// its cached leader while the last answered sync is at most one session
// timeout old, and the errors of a polling view after that, worded as
// before.
func TestLeaderViewSyncFails(t *testing.T) {
	for _, service := range []string{"", "etcd"} {
		t.Run(fmt.Sprintf("service=%q", service), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeFresh{}
				a := &cluster.Leader{NodeID: "a", Epoch: 3}
				v, stop := startView(t, f, service, a)
				defer stop()
				stale := func(d string) string {
					if service == "etcd" {
						return "no linearizable read answered by etcd for " + d + ", longer than the lease TTL (5s): the last leader seen may be stale"
					}
					return "no sync answered by the ZooKeeper quorum for " + d + ", longer than the session timeout (5s): the last leader seen may be stale"
				}
				wantErr := func(want string, wantSyncs int) {
					t.Helper()
					if l, err := v.Leader(); err == nil || err.Error() != want {
						t.Fatalf("Leader() = %+v, %v, want the error %q", l, err, want)
					}
					if n := f.syncs(); n != wantSyncs {
						t.Fatalf("%d syncs sent, want %d", n, wantSyncs)
					}
				}

				// No sync answered yet.
				f.set(0, errors.New("connection refused"), false)
				if service == "etcd" {
					wantErr("etcd has not answered a linearizable read yet", 1)
				} else {
					wantErr("no ZooKeeper server has answered a sync yet", 1)
				}
				f.set(0, nil, false)
				ask(t, v, f, a, 2) // answered at 0

				// The syncs fail: the cached leader up to the session timeout.
				f.set(0, errors.New("connection lost"), false)
				for i := 1; i <= 5; i++ {
					time.Sleep(time.Second)
					ask(t, v, f, a, 2+i)
				}
				time.Sleep(10 * time.Millisecond)
				wantErr(stale("5.01s"), 8)

				// Answered again at 6.01 s; then a sync that hangs, asked
				// at 9.01 s: the cached leader after the wait (1 s).
				time.Sleep(time.Second)
				f.set(0, nil, false)
				ask(t, v, f, a, 9)
				time.Sleep(3 * time.Second)
				f.set(0, nil, true)
				start := time.Now()
				ask(t, v, f, a, 10)
				if took := time.Since(start); took != time.Second {
					t.Fatalf("waited %v for a sync that hangs, want the wait, 1s", took)
				}
				// Asked while it still hangs, past its wait: an answer at
				// once, and no second sync.
				time.Sleep(time.Second) // 5 s after the last answered sync
				start = time.Now()
				ask(t, v, f, a, 10)
				time.Sleep(time.Second)
				wantErr(stale("6s"), 10)
				if took := time.Since(start); took != time.Second {
					t.Fatalf("answers with a sync in flight took %v, want none", took-time.Second)
				}
				// It ends at its deadline (the session timeout); the next
				// ask sends a sync again.
				time.Sleep(3 * time.Second)
				f.set(0, nil, false)
				ask(t, v, f, a, 11)
			})
		})
	}
}

// A node that lost the service for longer than the session timeout while
// nobody asked answers the error at the first ask (its last answered sync
// is that old). The sync it sends lasts at most the session timeout and
// ends with the view.
func TestLeaderViewLostWhileIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeFresh{}
		a := &cluster.Leader{NodeID: "a", Epoch: 3}
		v, stop := startView(t, f, "", a)
		defer stop()
		ask(t, v, f, a, 1)

		time.Sleep(10 * time.Minute) // lost the service meanwhile
		f.set(0, nil, true)
		if l, err := v.Leader(); err == nil || !strings.Contains(err.Error(), "for 10m1s, longer than the session timeout (5s)") {
			t.Fatalf("lost for 10 minutes: Leader() = %+v, %v, want the session-timeout error", l, err)
		}
		f.mu.Lock()
		sctx := f.ctxs[len(f.ctxs)-1]
		f.mu.Unlock()
		if dl, ok := sctx.Deadline(); !ok || time.Until(dl) != 4*time.Second {
			t.Fatalf("the sync's deadline is %v away (%v) a second after it was sent, want 4s", time.Until(dl), ok)
		}
		stop() // returns only once the sync ended
		if sctx.Err() == nil {
			t.Fatal("the sync in flight outlived the view")
		}
		if _, err := v.Leader(); err == nil || err.Error() != "the daemon is stopping" {
			t.Fatalf("stopped: Leader() = %v, want %q", err, "the daemon is stopping")
		}
	})
}
