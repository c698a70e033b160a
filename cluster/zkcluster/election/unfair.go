package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// lockName is the single znode of unfair mode.
const lockName = "lock"

// IsUnfairLock reports whether p is an election directory's unfair-mode
// lock (a fair-mode candidate's name carries its elector's GUID and a
// sequence number, never this name).
func IsUnfairLock(p string) bool { return path.Base(p) == lockName }

// acquireLock blocks until we hold the unfair-mode lock; it returns the lock
// path and its czxid, or "" when cancelled. A create, once sent,
// runs on r.keep until its outcome is known: it returns the lock when it
// got it, even if ctx ended meanwhile (the caller then leaves).
//
// With Config.WarmStandby (or Warm(true)) it keeps a credit chain while it
// waits, renewing on the election directory (it has no znode of its own).
func (e *Elector) acquireLock(ctx context.Context, r *run) (string, int64, error) {
	lock := e.cfg.Dir + "/" + lockName
	w := e.newWarmer(r, e.cfg.Dir)
	defer func() { r.warmDone = w.stop() }()
	join := nonce()
	lostCreate := false
	unresolved := false // a create's response was lost and no read has told its outcome yet
	for {
		if err := ctx.Err(); err != nil && !unresolved {
			return "", 0, err
		}
		if !unresolved {
			_, st, err := e.create(r.keep, r.sess, lock, zk.Ephemeral, join)
			switch {
			case err == nil && st.EphemeralOwner == r.sess.ID():
				return lock, st.Czxid, nil
			case err == nil:
				// Create reads the stat by name after the create: our lock
				// went (deleted by path) and another session holds the
				// name now. Not ours: wait for it like any other.
				e.log.Warn("the lock we created was deleted and taken by another session", "owner", fmt.Sprintf("0x%x", st.EphemeralOwner))
			case errors.Is(err, zk.ErrConnectionLoss):
				lostCreate, unresolved = true, true
				e.log.Warn("create response lost; checking the lock owner", "err", err)
			case !errors.Is(err, zk.ErrNodeExists):
				return "", 0, err
			}
		}
		rctx := ctx
		if unresolved {
			rctx = r.keep
			if err := waitConnected(r.keep, r.sess); err != nil {
				return "", 0, err
			}
		}
		b, st, ch, err := r.sess.GetW(rctx, lock)
		if errors.Is(err, zk.ErrNoNode) {
			unresolved = false
			continue
		}
		if err != nil {
			if errors.Is(err, zk.ErrConnectionLoss) && unresolved {
				continue // still unknown: look again once connected
			}
			return "", 0, err
		}
		unresolved = false
		var c candidate
		_ = json.Unmarshal(b, &c)
		if lostCreate && st.EphemeralOwner == r.sess.ID() && c.Join == join {
			return lock, st.Czxid, nil // our create went through after all
		}
		if c.GUID == e.guid || st.EphemeralOwner == r.sess.ID() {
			// Ours from an earlier session or term (a leave whose delete was
			// lost): adopting it would reuse an old epoch.
			if err := e.deleteOldLock(r.keep, r.sess, lock, st); err != nil {
				return "", 0, err
			}
			continue
		}
	wait:
		for {
			warm, warmChanged := e.warmState()
			w.run(warm || e.cfg.WarmStandby)
			select {
			case <-ch:
				r.woke = time.Now()
				break wait
			case <-warmChanged:
			case <-w.lost: // the directory is gone: the create says why
				w.stop()
				break wait
			case <-r.sess.Done():
				return "", 0, r.sess.Err()
			case <-ctx.Done():
				return "", 0, ctx.Err()
			}
		}
	}
}

// deleteOldLock deletes the lock seen as st if, read again after a sync,
// it is still that znode: the first read may come from a server behind a
// delete whose reply was lost, while the leader already holds a
// successor's lock at the same version (unfair locks are never rewritten).
func (e *Elector) deleteOldLock(ctx context.Context, sess *zk.Session, lock string, st zk.Stat) error {
	now, ok, err := StillOwned(ctx, sess, lock, st.Czxid, st.EphemeralOwner)
	if err != nil || !ok {
		return err // gone, or no longer the one we saw: look again
	}
	e.log.Info("deleting an old lock of ours", "owner", fmt.Sprintf("0x%x", now.EphemeralOwner))
	if err := sess.Delete(ctx, lock, now.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

// StillOwned reports whether path is still the znode created at czxid
// by session owner, read after a sync, and returns its stat (delete it at
// that version, so that nothing else can go in its place). The sync
// matters for the unfair lock, whose name every session shares: after a
// reconnect the server may lag behind a delete of ours whose reply was
// lost and show our lock while the ZooKeeper leader already holds a
// successor's at the same version. After the sync, a lock of ours can
// only have passed to another session through an operator's delete,
// which the czxid and owner comparison sees.
func StillOwned(ctx context.Context, sess *zk.Session, path string, czxid, owner int64) (zk.Stat, bool, error) {
	if err := sess.Sync(ctx, path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return zk.Stat{}, false, err
	}
	ok, st, err := sess.Exists(ctx, path)
	if err != nil || !ok || st.Czxid != czxid || st.EphemeralOwner != owner {
		return st, false, err
	}
	return st, true, nil
}
