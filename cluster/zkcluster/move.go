package zkcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/zk"
)

// The records a move of the cluster to another coordination service
// (failoverd migrate) reads and writes; see cluster.Admit.

// ClusterRecord reads the cluster record (nil and the zero revision: none).
func (s *Store) ClusterRecord(ctx context.Context) (*cluster.ClusterRecord, cluster.Revision, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, cluster.Revision{}, err
	}
	path := s.layout.Config()
	b, st, err := sess.Get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, cluster.Revision{}, nil
	}
	if err != nil {
		return nil, cluster.Revision{}, fmt.Errorf("reading the cluster record %s: %w", path, err)
	}
	var rec cluster.ClusterRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, cluster.Revision{}, fmt.Errorf("the cluster record %s is unreadable (%q): %w", path, b, err)
	}
	return &rec, revision(st.Version), nil
}

// WriteClusterRecord writes rec if the record is still at rev (the zero
// revision: creates it, failing if it exists), and returns the record's
// new revision. stamp is the zxid of the write: above the zxid of every
// znode created before it, so above every epoch the backend gave a term of
// any cluster of this ensemble.
func (s *Store) WriteClusterRecord(ctx context.Context, rec cluster.ClusterRecord, rev cluster.Revision) (newRev cluster.Revision, stamp int64, err error) {
	sess, err := s.session(ctx)
	if err != nil {
		return cluster.Revision{}, 0, err
	}
	path := s.layout.Config()
	data, err := json.Marshal(rec)
	if err != nil {
		return cluster.Revision{}, 0, err
	}
	if !rev.Exists() {
		if err := sess.EnsurePath(ctx, s.layout.Dir()); err != nil {
			return cluster.Revision{}, 0, err
		}
		_, st, err := sess.Create(ctx, path, data, zk.Persistent)
		if err != nil {
			return cluster.Revision{}, 0, fmt.Errorf("creating the cluster record %s: %w", path, err)
		}
		return revision(st.Version), st.Czxid, nil
	}
	st, err := sess.Set(ctx, path, data, version(rev))
	if err != nil {
		return cluster.Revision{}, 0, fmt.Errorf("writing the cluster record %s: %w", path, err)
	}
	return revision(st.Version), st.Mzxid, nil
}

// ReadCarried reads the records a move copies, as stored.
func (s *Store) ReadCarried(ctx context.Context) (cluster.Carried, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return cluster.Carried{}, err
	}
	var c cluster.Carried
	for _, r := range []struct {
		path string
		to   *[]byte
	}{{s.layout.Breadcrumb(), &c.Breadcrumb}, {s.layout.History(), &c.History}, {s.layout.Pause(), &c.Pause}} {
		b, _, err := sess.Get(ctx, r.path)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return cluster.Carried{}, fmt.Errorf("reading %s: %w", r.path, err)
		}
		if b == nil {
			b = []byte{}
		}
		*r.to = b
	}
	return c, nil
}

// WriteCarried creates the records c holds; each must be absent.
func (s *Store) WriteCarried(ctx context.Context, c cluster.Carried) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	if err := sess.EnsurePath(ctx, s.layout.Dir()); err != nil {
		return err
	}
	for _, r := range []struct {
		path string
		data []byte
	}{{s.layout.Breadcrumb(), c.Breadcrumb}, {s.layout.History(), c.History}, {s.layout.Pause(), c.Pause}} {
		if r.data == nil {
			continue
		}
		_, _, err := sess.Create(ctx, r.path, r.data, zk.Persistent)
		if errors.Is(err, zk.ErrNodeExists) {
			// A move run again after it stopped half way: what it wrote
			// then may stay, nothing else.
			if b, _, gerr := sess.Get(ctx, r.path); gerr == nil && bytes.Equal(b, r.data) {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("creating %s: %w", r.path, err)
		}
	}
	return nil
}
