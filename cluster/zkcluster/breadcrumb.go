package zkcluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// The breadcrumb in ZooKeeper: a persistent znode, written and deleted only
// in a multi with a check that the writer's election znode exists, and
// compare-and-set on the znode version.

// ReadBreadcrumbAt returns the breadcrumb and its znode version. It returns breadcrumb.ErrAbsent
// when there is none and a *breadcrumb.CorruptError when it cannot be trusted.
func ReadBreadcrumbAt(ctx context.Context, sess *zk.Session, path string) (breadcrumb.Record, int32, error) {
	b, st, err := sess.Get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		return breadcrumb.Record{}, -1, breadcrumb.ErrAbsent
	}
	if err != nil {
		return breadcrumb.Record{}, 0, fmt.Errorf("reading breadcrumb %s: %w", path, err)
	}
	r, err := breadcrumb.Decode(b)
	return r, st.Version, err
}

// Guard is a leadership's proof of life: the session that won and the
// election znode it owns. Writes run only while that znode exists.
type Guard struct {
	Session  *zk.Session
	Election string
}

// WriteBreadcrumbAt stores r if the znode is still at version (-1: it must not exist),
// in one multi-op with a check that the guard's election znode exists. A
// conflict returns an error wrapping zk.ErrBadVersion or zk.ErrNodeExists; a
// lost leadership returns one wrapping zk.ErrNoNode or zk.ErrSessionExpired.
func WriteBreadcrumbAt(ctx context.Context, g Guard, path string, r breadcrumb.Record, version int32) (int32, error) {
	b, err := breadcrumb.Encode(r)
	if err != nil {
		return 0, err
	}
	var op zk.Op = zk.SetOp{Path: path, Data: b, Version: version}
	if version < 0 {
		op = zk.CreateOp{Path: path, Data: b, Mode: zk.Persistent}
	}
	if err := g.Session.Multi(ctx, zk.CheckOp{Path: g.Election, Version: -1}, op); err != nil {
		return 0, fmt.Errorf("writing breadcrumb %s: %w", path, err)
	}
	if version < 0 {
		return 0, nil
	}
	return version + 1, nil
}

// DeleteBreadcrumbAt removes the breadcrumb if it is still at version,
// guarded like WriteBreadcrumbAt.
func DeleteBreadcrumbAt(ctx context.Context, g Guard, path string, version int32) error {
	err := g.Session.Multi(ctx, zk.CheckOp{Path: g.Election, Version: -1}, zk.DeleteOp{Path: path, Version: version})
	if err != nil {
		return fmt.Errorf("deleting breadcrumb %s: %w", path, err)
	}
	return nil
}

// ClearBreadcrumbAt removes the breadcrumb if it is still at version, the
// znode version it was read at. It is the operator's tool, once the old
// leader is known to be down: a versioned delete, so that a breadcrumb a
// new leader wrote after the operator's read survives. A breadcrumb at
// another version returns an error wrapping breadcrumb.ErrChanged, one
// that is gone an error wrapping breadcrumb.ErrAbsent. (A znode's version
// starts again at 0 when it is deleted and created anew, so a breadcrumb
// deleted and written from scratch in between, a leader's Finish and the
// next leader's first write within the command's few milliseconds, would
// go unseen; etcd's mod revisions never repeat.)
func ClearBreadcrumbAt(ctx context.Context, sess *zk.Session, path string, version int32) error {
	if version < 0 {
		// -1 would delete any version: never unconditional.
		return fmt.Errorf("clearing breadcrumb %s: no version read (%d)", path, version)
	}
	err := sess.Delete(ctx, path, version)
	switch {
	case errors.Is(err, zk.ErrBadVersion):
		return fmt.Errorf("clearing breadcrumb %s at version %d: %w", path, version, breadcrumb.ErrChanged)
	case errors.Is(err, zk.ErrNoNode):
		return fmt.Errorf("clearing breadcrumb %s: %w", path, breadcrumb.ErrAbsent)
	case err != nil:
		return fmt.Errorf("clearing breadcrumb %s: %w", path, err)
	}
	return nil
}
