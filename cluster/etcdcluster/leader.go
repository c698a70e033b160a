package etcdcluster

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// Leader reads the promoted leader once (see cluster.LeaderOf; nil: none).
func (s *Store) Leader(ctx context.Context) (*cluster.Leader, error) {
	l, _, err := s.leader(ctx)
	return l, err
}

// WatchLeader calls fn with the promoted leader (nil: none) now and after
// every change of it (another leadership, or any field of the same one),
// until ctx ends (see watchReads). It watches the member records and the
// breadcrumb and reads both again at every change of either: it never
// assumes it saw every change, so a change it missed while etcd was out
// of reach shows at the next read.
func (s *Store) WatchLeader(ctx context.Context, fn func(*cluster.Leader)) error {
	keys := []watchKey{{dir(s.layout.MembersDir()), true}, {key: s.layout.Breadcrumb()}}
	return watchReads(ctx, s, keys, s.leader, (*cluster.Leader).Equal, fn)
}

// leader reads the member records and the breadcrumb in one transaction,
// so both come from one revision of the store, and picks the promoted
// leader. An unreadable breadcrumb names nobody: no node promotes past it
// until an operator clears it, so there is no promoted leader either.
func (s *Store) leader(ctx context.Context) (*cluster.Leader, int64, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(dir(s.layout.MembersDir()), clientv3.WithPrefix()),
		clientv3.OpGet(s.layout.Breadcrumb()),
	).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("reading the member records and the breadcrumb: %w", err)
	}
	ms := s.decodeMembers(resp.Responses[0].GetResponseRange().Kvs)
	var bc *breadcrumb.Record
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		r, err := breadcrumb.Decode(kvs[0].Value)
		if err != nil {
			s.log.Debug("unreadable breadcrumb: no promoted leader", "key", s.layout.Breadcrumb(), "err", err)
		} else {
			bc = &r
		}
	}
	return cluster.LeaderOf(bc, ms), resp.Header.Revision, nil
}

// Fresh returns once etcd answered a linearizable read, proof that the
// member this client talks to is in touch with etcd's leader (a member cut
// off from its quorum cannot answer one; serializable reads, which it
// could, are not used). Unlike a ZooKeeper sync it says nothing about
// the watches' delivery, which runs on its own streams: WatchLeader's
// watches require a leader too, and read again after any interruption.
func (s *Store) Fresh(ctx context.Context) error {
	if _, err := s.cli.Get(ctx, s.layout.Dir(), clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("linearizable read from etcd: %w", err)
	}
	return nil
}
