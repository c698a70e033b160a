package etcdcluster

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
)

// The pause record is a key without a lease: a pause outlives every
// session and every daemon restart, and only an operator's resume ends it.

// SetPause pauses the cluster with p unless it is paused already (one
// transaction: create if absent, else read). It returns the pause in force
// afterwards (p, or the earlier one: pausing twice keeps who paused first,
// and since when) and whether this call created it.
func (s *Store) SetPause(ctx context.Context, p cluster.Pause) (cluster.Pause, bool, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return cluster.Pause{}, false, err
	}
	key := s.layout.Pause()
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(data))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return cluster.Pause{}, false, fmt.Errorf("writing the pause record %s: %w", key, err)
	}
	if resp.Succeeded {
		return p, true, nil
	}
	var cur *kv
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		cur = &kv{value: kvs[0].Value}
	}
	return *decodePause(cur), false, nil
}

// ClearPause ends the pause. It reports whether the cluster was paused;
// resuming a cluster that is not paused is not an error.
func (s *Store) ClearPause(ctx context.Context) (bool, error) {
	key := s.layout.Pause()
	resp, err := s.cli.Delete(ctx, key)
	if err != nil {
		return false, fmt.Errorf("deleting the pause record %s: %w", key, err)
	}
	return resp.Deleted > 0, nil
}

// ReadPause returns the pause in force (nil: the cluster is not paused).
func (s *Store) ReadPause(ctx context.Context) (*cluster.Pause, error) {
	p, _, err := s.readPause(ctx)
	return p, err
}

func (s *Store) readPause(ctx context.Context) (*cluster.Pause, int64, error) {
	key := s.layout.Pause()
	cur, rev, err := s.get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the pause record %s: %w", key, err)
	}
	if cur == nil {
		return nil, rev, nil
	}
	return decodePause(cur), rev, nil
}

// WatchPause calls fn with the pause in force (nil: none) now and after
// every change, until ctx ends (see watchReads).
func (s *Store) WatchPause(ctx context.Context, fn func(*cluster.Pause)) error {
	return watchReads(ctx, s, []watchKey{{key: s.layout.Pause()}}, s.readPause, cluster.SamePause, fn)
}

// decodePause parses a pause record (present). One that cannot be read
// still pauses the cluster: someone meant to stop automatic failover, and
// a resume (which deletes whatever is there) ends it.
func decodePause(k *kv) *cluster.Pause {
	if k == nil {
		return &cluster.Pause{By: "unknown", Reason: "the pause record went while it was read"}
	}
	return cluster.DecodePause(k.value)
}
