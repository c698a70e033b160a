package main

import (
	"context"
	"sync"

	"github.com/failoverd/failoverd/cluster"
)

// leaderFeed runs the daemon's one Store.WatchLeader and hands what it
// delivers to every subscriber: the controller's leader watch and the
// admin API's leader view. Each used to run a watch of its own over the
// same records, so every change of the leader's record was read twice.
//
// A subscriber gets the newest value first (once the watch delivered
// one) and then every later one in order; one that has not taken a value
// yet when a newer one comes gets only the newer, which a watch of its
// own may do as well (a watch reads after an event, not at it). So
// subscribe keeps Records.WatchLeader's contract.
type leaderFeed struct {
	source func(context.Context, func(*cluster.Leader)) error // Store.WatchLeader

	mu      sync.Mutex
	gen     uint64          // deliveries so far (0: none yet)
	cur     *cluster.Leader // the newest delivery
	changed chan struct{}   // closed and replaced at every delivery
}

func newLeaderFeed(source func(context.Context, func(*cluster.Leader)) error) *leaderFeed {
	return &leaderFeed{source: source, changed: make(chan struct{})}
}

// run runs the watch until ctx ends.
func (f *leaderFeed) run(ctx context.Context) error {
	_ = f.source(ctx, func(l *cluster.Leader) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.gen++
		f.cur = l
		close(f.changed)
		f.changed = make(chan struct{})
	})
	return nil
}

// subscribe is WatchLeader on the feed: it calls fn with the newest value
// and every later one, until ctx ends.
func (f *leaderFeed) subscribe(ctx context.Context, fn func(*cluster.Leader)) error {
	var seen uint64
	for {
		f.mu.Lock()
		gen, cur, ch := f.gen, f.cur, f.changed
		f.mu.Unlock()
		if gen != seen {
			seen = gen
			fn(cur)
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// feedRecords is the controller's cluster.Records with WatchLeader served
// by the daemon's leader feed.
type feedRecords struct {
	cluster.Records
	feed *leaderFeed
}

func (r feedRecords) WatchLeader(ctx context.Context, fn func(*cluster.Leader)) error {
	return r.feed.subscribe(ctx, fn)
}
