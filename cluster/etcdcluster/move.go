package etcdcluster

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
)

// The records a move of the cluster to another coordination service
// (failoverd migrate) reads and writes; see cluster.Admit.

// ClusterRecord reads the cluster record (nil and the zero revision: none).
func (s *Store) ClusterRecord(ctx context.Context) (*cluster.ClusterRecord, cluster.Revision, error) {
	key := s.layout.Config()
	cur, _, err := s.get(ctx, key)
	if err != nil {
		return nil, cluster.Revision{}, fmt.Errorf("reading the cluster record %s: %w", key, err)
	}
	if cur == nil {
		return nil, cluster.Revision{}, nil
	}
	var rec cluster.ClusterRecord
	if err := json.Unmarshal(cur.value, &rec); err != nil {
		return nil, cluster.Revision{}, fmt.Errorf("the cluster record %s is unreadable (%q): %w", key, cur.value, err)
	}
	return &rec, cluster.RevisionOf(cur.mod), nil
}

// WriteClusterRecord writes rec if the record is still at rev (its mod
// revision; the zero revision: creates it, failing if it exists), and
// returns the record's new revision. stamp is the revision of the write:
// above the create revision of every key written before it, so above
// every epoch the backend gave a term of any cluster of this etcd cluster.
func (s *Store) WriteClusterRecord(ctx context.Context, rec cluster.ClusterRecord, rev cluster.Revision) (newRev cluster.Revision, stamp int64, err error) {
	key := s.layout.Config()
	data, err := json.Marshal(rec)
	if err != nil {
		return cluster.Revision{}, 0, err
	}
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	if mod, ok := rev.Backend(); ok {
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", mod)
	}
	resp, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(data))).Commit()
	if err != nil {
		return cluster.Revision{}, 0, fmt.Errorf("writing the cluster record %s: %w", key, err)
	}
	if !resp.Succeeded {
		return cluster.Revision{}, 0, fmt.Errorf("writing the cluster record %s: it changed since it was read (%v)", key, rev)
	}
	// The put's mod revision is the transaction's revision.
	return cluster.RevisionOf(resp.Header.Revision), resp.Header.Revision, nil
}

// ReadCarried reads the records a move copies, as stored.
func (s *Store) ReadCarried(ctx context.Context) (cluster.Carried, error) {
	var c cluster.Carried
	for _, r := range []struct {
		key string
		to  *[]byte
	}{{s.layout.Breadcrumb(), &c.Breadcrumb}, {s.layout.History(), &c.History}, {s.layout.Pause(), &c.Pause}} {
		cur, _, err := s.get(ctx, r.key)
		if err != nil {
			return cluster.Carried{}, fmt.Errorf("reading %s: %w", r.key, err)
		}
		if cur != nil {
			*r.to = append([]byte{}, cur.value...)
		}
	}
	return c, nil
}

// WriteCarried creates the records c holds, in one transaction that fails
// if any of them exists.
func (s *Store) WriteCarried(ctx context.Context, c cluster.Carried) error {
	var cmps []clientv3.Cmp
	var puts []clientv3.Op
	for _, r := range []struct {
		key  string
		data []byte
	}{{s.layout.Breadcrumb(), c.Breadcrumb}, {s.layout.History(), c.History}, {s.layout.Pause(), c.Pause}} {
		if r.data == nil {
			continue
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0))
		puts = append(puts, clientv3.OpPut(r.key, string(r.data)))
	}
	if len(puts) == 0 {
		return nil
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		return fmt.Errorf("writing the carried records: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("writing the carried records (%v): one of them exists already", c.Names())
	}
	return nil
}
