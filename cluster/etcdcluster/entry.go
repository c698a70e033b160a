package etcdcluster

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
)

// Entry names the term's election key: its key, its lease and its create
// revision, the epoch.
func (t *term) Entry() cluster.Entry {
	return cluster.Entry{Key: t.key, Owner: int64(t.sess.ID), Created: t.epoch}
}

// RemoveEntry deletes the election key e names in one transaction that
// compares its create revision (e.Created) and its lease (e.Owner), and
// then revokes that lease, so that the earlier process's member record
// goes too. Only when the key was still the one named is the lease
// revoked: a key that changed or went leaves everything as it is
// (ErrEntryChanged). etcd's lease ids come from the member's id generator
// and are not handed out twice.
func (k kv) RemoveEntry(ctx context.Context, e cluster.Entry) error {
	resp, err := k.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Created),
			clientv3.Compare(clientv3.LeaseValue(e.Key), "=", clientv3.LeaseID(e.Owner))).
		Then(clientv3.OpDelete(e.Key)).Commit()
	if err != nil {
		return fmt.Errorf("deleting %s: %w", e.Key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s is gone or another key now", cluster.ErrEntryChanged, e)
	}
	if _, err := k.s.cli.Revoke(ctx, clientv3.LeaseID(e.Owner)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The key is gone already: the term is over. The lease (and the
		// member record on it) runs out by itself.
		k.s.log.Warn("revoking the earlier process's lease failed; its member record stays until the lease expires",
			"lease_id", fmt.Sprintf("%x", e.Owner), "err", err)
	}
	return nil
}
