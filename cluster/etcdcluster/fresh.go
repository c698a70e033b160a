package etcdcluster

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// fresh returns once etcd answered a linearizable read, proof that the
// member this client talks to is in touch with etcd's leader (a member cut
// off from its quorum cannot answer one; serializable reads, which it
// could, are not used). Unlike a ZooKeeper sync it says nothing about
// the watches' delivery, which runs on its own streams: WatchLeader's
// watches require a leader too, and read again after any interruption.
func (s *Store) fresh(ctx context.Context) error {
	if _, err := s.cli.Get(ctx, s.layout.Dir(), clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("linearizable read from etcd: %w", err)
	}
	return nil
}
