package etcdcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
)

// Known-member records are keys without a lease under Layout.KnownDir,
// one per node: they outlive the session, unlike the member records.

// rememberAttempts bounds RememberMember's rounds on a concurrent change.
const rememberAttempts = 5

// RememberMember writes k's known-member record compared against what was
// read (absent: created); a concurrent change is read again.
func (s *Store) RememberMember(ctx context.Context, k cluster.KnownMember) error {
	if k.NodeID == "" {
		return errors.New("etcdcluster: remembering a member needs its node id")
	}
	data, err := json.Marshal(k)
	if err != nil {
		return err
	}
	key := s.layout.Known(k.NodeID)
	for attempt := 1; ; attempt++ {
		cur, _, err := s.get(ctx, key)
		if err != nil {
			return fmt.Errorf("reading the known-member record %s: %w", key, err)
		}
		resp, err := s.cli.Txn(ctx).If(unchanged(key, cur)).Then(clientv3.OpPut(key, string(data))).Commit()
		if err != nil {
			return fmt.Errorf("writing the known-member record %s: %w", key, err)
		}
		if resp.Succeeded {
			return nil
		}
		if attempt == rememberAttempts {
			return fmt.Errorf("writing the known-member record %s: %w", key, ErrConflict)
		}
	}
}

// KnownMembers lists the known-member records, ordered by node id (etcd
// returns keys in order).
func (s *Store) KnownMembers(ctx context.Context) ([]cluster.KnownMember, error) {
	prefix := dir(s.layout.KnownDir())
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("listing the known members %s: %w", prefix, err)
	}
	out := make([]cluster.KnownMember, 0, len(resp.Kvs))
	for _, k := range resp.Kvs {
		out = append(out, cluster.DecodeKnown(strings.TrimPrefix(string(k.Key), prefix), k.Value))
	}
	return out, nil
}

// ForgetMember deletes id's known-member record, in one transaction that
// requires id's member record to be absent.
func (s *Store) ForgetMember(ctx context.Context, id string) (bool, error) {
	key, member := s.layout.Known(id), s.layout.Member(id)
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(member), "=", 0)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("deleting the known-member record %s: %w", key, err)
	}
	if !resp.Succeeded {
		return false, fmt.Errorf("forgetting %s: %w", id, cluster.ErrMemberLive)
	}
	return resp.Responses[0].GetResponseDeleteRange().Deleted > 0, nil
}
