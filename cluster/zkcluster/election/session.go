package election

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// candidate is the JSON stored in an election znode.
type candidate struct {
	NodeID string `json:"node_id"`
	GUID   string `json:"guid"`
	// Join is a nonce of the join that created the znode: after a lost
	// create response only a znode of the current join may be adopted.
	Join string `json:"join,omitempty"`
	// DeadlineMS (Config.TakeOverAtDeadline, written by heartbeats only)
	// is how long after sending a heartbeat the owner may still act,
	// demote included, by its clock: lease + demote budget + margin,
	// rounded up to the millisecond.
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
	// Leading (heartbeats only): written by a leader's renewal, not by a
	// waiting candidate's; it tells the candidate behind that it moved up.
	Leading bool `json:"leading,omitempty"`
	// RenewMS (Config.FenceFirst, heartbeats only) is the owner's renew
	// interval in milliseconds: how long its heartbeat stands still when
	// all is well. A successor suspects the owner only once a heartbeat
	// stood for RenewMS plus its suspect_after, and never an owner that
	// publishes none.
	RenewMS int64 `json:"renew_ms,omitempty"`
}

// sessionCtx returns a context that the cancellation of ctx does not end
// but the end of sess does (every call on a dead session fails at once
// anyway); release frees it.
func sessionCtx(ctx context.Context, sess *zk.Session) (context.Context, context.CancelFunc) {
	keep, release := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-sess.Done():
			release()
		case <-keep.Done():
		}
	}()
	return keep, release
}

// waitConnected waits until the session is connected again (or is over).
func waitConnected(ctx context.Context, sess *zk.Session) error {
	for {
		st, changed := sess.State()
		switch st {
		case zk.StateConnected:
			return nil
		case zk.StateExpired, zk.StateClosed:
			return sess.Err()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (e *Elector) data(join string) []byte {
	b, _ := json.Marshal(candidate{NodeID: e.cfg.NodeID, GUID: e.guid, Join: join})
	return b
}

func nonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// testHooks are one elector's failpoints for tests (Config.testHooks),
// fixed before the elector exists and only read after, so that no test's
// hook is seen by, or races with, another test's elector. afterCreate sees
// every create's outcome and may replace it (a lost response: the create
// happened, or failed, but we hear ErrConnectionLoss); leave may lose a
// leave's delete (it returns true: the request never reached the server).
// leading runs when a leadership has begun, right before the elector
// starts watching it; renewed right after a leader's renewal was answered.
type testHooks struct {
	afterCreate func(sess *zk.Session, path string, err error) error
	leave       func(sess *zk.Session, path string) bool
	leading     func(l Leadership)
	renewed     func()
	// staleView, when it returns true, keeps the version awaitDeadline
	// read first instead of a newer one, as a lagging server would show.
	staleView func() bool
	// skipRenewal, when it returns true, has a leader's renew loop send
	// nothing this time (its heartbeats stop; its other writes go on).
	skipRenewal func() bool
}

func (e *Elector) create(ctx context.Context, sess *zk.Session, p string, mode zk.CreateMode, join string) (string, zk.Stat, error) {
	got, st, err := sess.Create(ctx, p, e.data(join), mode)
	if f := e.cfg.testHooks.afterCreate; f != nil {
		if herr := f(sess, got, err); herr != nil {
			return "", zk.Stat{}, herr
		}
	}
	return got, st, err
}

// leave deletes our znode while the session is alive; bounded in time.
// The unfair-mode lock (czxid > 0) is deleted only while it is still the
// one we created: the term may have deleted it already (Term.Finish), and
// a successor's lock under the same name must never go with our leave.
func (e *Elector) leave(sess *zk.Session, node string, czxid int64) {
	select {
	case <-sess.Done():
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if f := e.cfg.testHooks.leave; f != nil && f(sess, node) {
		e.log.Warn("leaving the election failed; the znode goes with the session", "node", node, "err", "injected")
		return
	}
	version := int32(-1)
	if czxid > 0 {
		// The term may have deleted our lock already (Term.Finish) and a
		// successor created its own under the same name.
		st, ok, err := StillOwned(ctx, sess, node, czxid, sess.ID())
		if err != nil {
			e.log.Warn("leaving the election failed; the znode goes with the session", "node", node, "err", err)
			return
		}
		if !ok {
			return // gone already, or another's
		}
		version = st.Version
	}
	if err := sess.Delete(ctx, node, version); err != nil && !errors.Is(err, zk.ErrNoNode) {
		e.log.Warn("leaving the election failed; the znode goes with the session", "node", node, "err", err)
	}
}
