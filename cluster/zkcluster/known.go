package zkcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/zk"
)

// Known-member records are persistent znodes under Layout.KnownDir, one
// per node: they outlive the session, unlike the member records.

// rememberAttempts bounds RememberMember's rounds on a concurrent change.
const rememberAttempts = 5

// RememberMember writes k's known-member record at the version read
// (created when absent); a concurrent change is read again.
func (s *Store) RememberMember(ctx context.Context, k cluster.KnownMember) error {
	if k.NodeID == "" {
		return errors.New("zkcluster: remembering a member needs its node id")
	}
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(k)
	if err != nil {
		return err
	}
	path := s.layout.Known(k.NodeID)
	for attempt := 1; ; attempt++ {
		_, st, err := sess.Get(ctx, path)
		switch {
		case err == nil:
			_, err = sess.Set(ctx, path, data, st.Version)
		case errors.Is(err, zk.ErrNoNode):
			if err = sess.EnsurePath(ctx, s.layout.KnownDir()); err == nil {
				_, _, err = sess.Create(ctx, path, data, zk.Persistent)
			}
		}
		if (errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode)) && attempt < rememberAttempts {
			continue // changed (or forgotten) meanwhile
		}
		if err != nil {
			return fmt.Errorf("writing the known-member record %s: %w", path, err)
		}
		return nil
	}
}

// KnownMembers lists the known-member records, ordered by node id.
func (s *Store) KnownMembers(ctx context.Context) ([]cluster.KnownMember, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	dir := s.layout.KnownDir()
	ids, err := sess.Children(ctx, dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the known members %s: %w", dir, err)
	}
	slices.Sort(ids)
	out := make([]cluster.KnownMember, 0, len(ids))
	for _, id := range ids {
		data, _, err := sess.Get(ctx, s.layout.Known(id))
		if errors.Is(err, zk.ErrNoNode) {
			continue // forgotten meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("reading the known member %s: %w", id, err)
		}
		out = append(out, cluster.DecodeKnown(id, data))
	}
	return out, nil
}

// ForgetMember deletes id's known-member record unless id's member record
// exists. ZooKeeper cannot make a write depend on a znode's absence, so
// this checks, then deletes: a node that comes back in between writes its
// record again within cluster.RememberEvery.
func (s *Store) ForgetMember(ctx context.Context, id string) (bool, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return false, err
	}
	live, _, err := sess.Exists(ctx, s.layout.Member(id))
	if err != nil {
		return false, fmt.Errorf("checking the member record of %s: %w", id, err)
	}
	if live {
		return false, fmt.Errorf("forgetting %s: %w", id, cluster.ErrMemberLive)
	}
	path := s.layout.Known(id)
	err = sess.Delete(ctx, path, -1)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting the known-member record %s: %w", path, err)
	}
	return true, nil
}
