package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// join creates our fair-mode znode, surviving a lost create response.
// It returns the znode and its czxid (0 when adopted: not known yet).
// Once a create was sent it runs on r.keep until its outcome is known, so a
// cancelled ctx never leaves a znode of ours that the caller does not
// know of; ctx only stops it from sending another create.
func (e *Elector) join(ctx context.Context, r *run) (string, int64, error) {
	prefix := e.cfg.Dir + "/c_" + e.guid + "-n_"
	// Leftovers of earlier terms (a leave that failed while ZooKeeper was
	// away) must go: adopting one would reuse an old epoch.
	if _, err := e.adopt(ctx, r, ""); err != nil {
		return "", 0, err
	}
	join := nonce()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return "", 0, err
		}
		node, st, err := e.create(r.keep, r.sess, prefix, zk.EphemeralSequential, join)
		if err == nil {
			return node, st.Czxid, nil
		}
		if !errors.Is(err, zk.ErrConnectionLoss) {
			return "", 0, fmt.Errorf("joining the election: %w", err)
		}
		e.log.Warn("create response lost; looking for our znode", "err", err)
		if err := waitConnected(r.keep, r.sess); err != nil {
			return "", 0, err
		}
		node, err = e.adopt(r.keep, r, join)
		if err != nil {
			return "", 0, err
		}
		if node != "" {
			e.log.Info("found our znode after a lost create response", "node", node)
			return node, 0, nil
		}
		if attempt >= 5 {
			return "", 0, fmt.Errorf("joining the election: %d create responses lost", attempt+1)
		}
	}
}

// adopt looks for fair-mode znodes carrying our GUID. With a join nonce it
// returns one owned by the current session and created by that join (our
// create went through after all); it deletes the rest: orphans of earlier
// sessions, duplicates, leftovers of earlier terms. Reads run on ctx, the
// deletes on r.keep.
func (e *Elector) adopt(ctx context.Context, r *run, join string) (string, error) {
	kids, err := r.sess.Children(ctx, e.cfg.Dir)
	if err != nil {
		return "", err
	}
	var mine string
	for _, k := range sortCandidates(kids) {
		if !strings.Contains(k, e.guid) {
			continue
		}
		p := e.cfg.Dir + "/" + k
		b, st, err := r.sess.Get(ctx, p)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return "", err
		}
		var c candidate
		_ = json.Unmarshal(b, &c)
		if join != "" && c.Join == join && st.EphemeralOwner == r.sess.ID() && mine == "" {
			mine = p
			continue
		}
		e.log.Info("deleting an orphan znode of ours", "node", p, "owner", fmt.Sprintf("0x%x", st.EphemeralOwner))
		if err := r.sess.Delete(r.keep, p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return "", err
		}
	}
	return mine, nil
}

// seq returns the sequence suffix of a fair-mode znode name, or -1.
func seq(name string) int64 {
	i := strings.LastIndex(name, "_")
	if i < 0 || len(name)-i-1 != 10 {
		return -1
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// sortCandidates keeps fair-mode znode names and orders them by sequence
// suffix only (the GUID prefix must not influence the order).
func sortCandidates(kids []string) []string {
	out := make([]string, 0, len(kids))
	for _, k := range kids {
		if seq(k) >= 0 {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return seq(out[i]) < seq(out[j]) })
	return out
}

// Queue lists the node ids in election order (fair: queue order; unfair: the
// lock holder only). It is for status displays.
func Queue(ctx context.Context, sess *zk.Session, dir string) ([]string, error) {
	kids, err := sess.Children(ctx, dir)
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		return nil, err
	}
	names := sortCandidates(kids)
	for _, k := range kids {
		if k == lockName {
			names = append([]string{k}, names...)
		}
	}
	var ids []string
	for _, k := range names {
		b, _, err := sess.Get(ctx, dir+"/"+k)
		if err != nil {
			continue // gone meanwhile
		}
		var c candidate
		if json.Unmarshal(b, &c) != nil || c.NodeID == "" {
			c.NodeID = "?" + k
		}
		ids = append(ids, c.NodeID)
	}
	return ids, nil
}

// waitTurn blocks until our fair-mode znode is the lowest, watching only the
// predecessor. It returns our epoch (the znode's czxid).
// czxid, when known from the create, saves a round trip at the end.
// A cancelled ctx ends it; the caller then leaves.
// The candidate next in line (with Config.WarmStandby) and one told
// Warm(true) keep a credit chain meanwhile, renewing on their own znode.
func (e *Elector) waitTurn(ctx context.Context, r *run, czxid int64) (int64, error) {
	name := r.node[strings.LastIndex(r.node, "/")+1:]
	w := e.newWarmer(r, r.node)
	defer func() { r.warmDone = w.stop() }()
	for {
		kids, err := r.sess.Children(ctx, e.cfg.Dir)
		if err != nil {
			return 0, err
		}
		order := sortCandidates(kids)
		idx := -1
		for i, k := range order {
			if k == name {
				idx = i
			} else if strings.Contains(k, e.guid) && idx < 0 {
				// A stray duplicate of ours (a create that landed late) ahead of
				// us would block everyone behind it: remove it.
				r.sess.Delete(r.keep, e.cfg.Dir+"/"+k, -1)
			}
		}
		if idx < 0 {
			return 0, fmt.Errorf("%w: %s", ErrNodeDeleted, r.node)
		}
		if idx == 0 && czxid > 0 {
			return czxid, nil // created by this session, still listed: ours
		}
		if idx == 0 {
			ok, st, err := r.sess.Exists(ctx, r.node)
			if err != nil {
				return 0, err
			}
			if !ok || st.EphemeralOwner != r.sess.ID() {
				return 0, fmt.Errorf("%w: %s", ErrNodeDeleted, r.node)
			}
			return st.Czxid, nil
		}
		pred := e.cfg.Dir + "/" + order[idx-1]
		if idx == 1 && e.beats() {
			if err := e.awaitDeadline(ctx, r, w, pred); err != nil {
				return 0, err
			}
			continue
		}
		ok, _, ch, err := r.sess.ExistsW(ctx, pred)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		e.log.Debug("waiting for predecessor", "predecessor", pred, "position", idx)
	wait:
		for {
			warm, warmChanged := e.warmState()
			w.run(warm || idx == 1 && e.cfg.WarmStandby)
			select {
			case ev := <-ch: // deleted, changed or not watching: look again
				// (A change may be the new leader's first renewal telling
				// us that we moved up: see renewLoop.) With heartbeats, a
				// waiting predecessor's renewals change its data too: only
				// a leader's (Leading) says we moved up.
				if ev.Type == zk.EventNodeDataChanged && e.beats() {
					data, _, next, err := r.sess.GetW(ctx, pred)
					var c candidate
					if err == nil && json.Unmarshal(data, &c) == nil && !c.Leading {
						ch = next
						continue
					}
				}
				r.woke = time.Now()
				break wait
			case <-warmChanged:
			case <-w.lost: // our znode is gone: look again
				w.stop()
				break wait
			case <-r.sess.Done():
				return 0, r.sess.Err()
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
}
