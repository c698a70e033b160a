package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// The feed hands every subscriber the newest value first and every later
// one in order (a slow one only the newer), a late subscriber the value
// at hand at once, and one watch runs for them all.
func TestLeaderFeedSharesOneWatch(t *testing.T) {
	values := make(chan *cluster.Leader)
	var sources int
	var mu sync.Mutex
	feed := newLeaderFeed(func(ctx context.Context, fn func(*cluster.Leader)) error {
		mu.Lock()
		sources++
		mu.Unlock()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case l := <-values:
				fn(l)
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go feed.run(ctx)

	type sub struct {
		mu  sync.Mutex
		got []int64
	}
	subscribe := func(slow time.Duration) *sub {
		s := &sub{}
		go feed.subscribe(ctx, func(l *cluster.Leader) {
			var e int64 // 0: none
			if l != nil {
				e = l.Epoch
			}
			s.mu.Lock()
			s.got = append(s.got, e)
			s.mu.Unlock()
			time.Sleep(slow)
		})
		return s
	}
	last := func(s *sub) (int64, []int64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.got) == 0 {
			return -1, nil
		}
		return s.got[len(s.got)-1], append([]int64(nil), s.got...)
	}
	waitFor := func(s *sub, want int64) []int64 {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if l, got := last(s); l == want {
				return got
			} else if time.Now().After(end) {
				t.Fatalf("deliveries %v; want the last to be %d", got, want)
			}
		}
	}
	fast, slow := subscribe(0), subscribe(50*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if _, got := last(fast); got != nil {
		t.Fatalf("delivered %v before the watch delivered anything", got)
	}
	values <- nil // no leader yet
	for e := int64(1); e <= 20; e++ {
		values <- &cluster.Leader{NodeID: "a", Epoch: e}
	}
	for _, s := range []*sub{fast, slow} {
		got := waitFor(s, 20)
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("deliveries out of order or repeated: %v", got)
			}
		}
	}
	if _, got := last(slow); len(got) >= 21 {
		t.Logf("the slow subscriber got all %d values", len(got))
	}
	late := subscribe(0)
	if got := waitFor(late, 20); len(got) != 1 {
		t.Fatalf("a late subscriber got %v; want the value at hand, 20, alone", got)
	}
	values <- nil
	for _, s := range []*sub{fast, slow, late} {
		waitFor(s, 0)
	}
	mu.Lock()
	defer mu.Unlock()
	if sources != 1 {
		t.Fatalf("%d watches ran; want one for every subscriber", sources)
	}
}
