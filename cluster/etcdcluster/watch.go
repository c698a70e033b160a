package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchKey is one key (or, with prefix, every key under it) a watch loop
// follows.
type watchKey struct {
	key    string
	prefix bool
}

// errWatchClosed: a watch channel closed without an error (its context
// ended, or the client closed it).
var errWatchClosed = errors.New("etcd watch closed")

// watchReads calls fn with read's value now and every time it differs
// from the last one delivered (equal), until ctx ends; it returns ctx's
// error. read returns its value with the store revision it was read at;
// the loop then watches keys from the next revision, so no change made
// after the read is missed, and reads again at the first event. The
// watch requires a leader: a member cut off from its quorum cancels it
// (after a few election timeouts) instead of staying silent, and a watch
// whose revision was compacted meanwhile is cancelled too; either way the
// loop reads again and watches from the fresh revision. A failed read is
// retried every half second and never reaches fn: while etcd is out of
// reach the last value delivered stands. One goroutine, the caller's,
// owns the value; the watches only wake it.
func watchReads[T any](ctx context.Context, s *Store, keys []watchKey, read func(context.Context) (T, int64, error),
	equal func(a, b T) bool, fn func(T)) error {
	var last T
	first := true
	for ctx.Err() == nil {
		v, rev, err := read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("watch read failed; retrying", "key", keys[0].key, "err", err)
			}
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		if first || !equal(v, last) {
			first, last = false, v
			fn(v)
		}
		if h := s.afterWatchRead; h != nil {
			h()
		}
		if err := s.waitChange(ctx, keys, rev+1); err != nil && ctx.Err() == nil {
			s.log.Debug("watch interrupted; reading again", "key", keys[0].key, "err", err)
			if h := s.watchInterrupted; h != nil {
				h(err)
			}
			sleep(ctx, 100*time.Millisecond) // no tight loop if it persists
		}
	}
	return ctx.Err()
}

// waitChange watches keys from revision rev and returns at the first
// event on any of them (nil), or when a watch ends with an error (its
// cause: compaction, no leader, closed) or ctx ends.
func (s *Store) waitChange(ctx context.Context, keys []watchKey, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	out := make(chan error, len(keys))
	for _, k := range keys {
		opts := []clientv3.OpOption{clientv3.WithRev(rev)}
		if k.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		ch := s.cli.Watch(wctx, k.key, opts...)
		go func() {
			out <- firstEvent(ch)
		}()
	}
	select {
	case err := <-out:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// firstEvent waits for ch's first response with events (nil) or an error,
// or for ch to close.
func firstEvent(ch clientv3.WatchChan) error {
	for resp := range ch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("watch from a compacted revision (compacted at %d): %w", resp.CompactRevision, resp.Err())
		}
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Canceled {
			return fmt.Errorf("%w: cancelled by the server", errWatchClosed)
		}
		if len(resp.Events) > 0 {
			return nil
		}
		// A progress notification or the creation answer: keep waiting.
	}
	return errWatchClosed
}
