package etcdcluster

import (
	"context"
	"errors"
	"fmt"

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
