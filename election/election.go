// Package election decides which failoverd instance may act as leader.
//
// An Elector campaigns under Config.Dir until its Run context ends, in one of
// two modes:
//
//   - Fair: every candidate creates an ephemeral sequential znode; the lowest
//     sequence leads; every other candidate watches only its predecessor, so a
//     change wakes exactly one candidate (no herd).
//   - Unfair: whoever creates the single ephemeral znode "lock" leads; everyone
//     else watches it and races when it goes.
//
// When it wins, OnElected runs in its own goroutine with a context that is
// cancelled the moment leadership can no longer be assumed. Leadership ends
// when that callback returns; the elector then leaves (deletes its znode) and
// joins again with a new one. It never runs two callbacks at once.
//
// # What is guaranteed
//
//   - Every leadership carries an epoch, the czxid of the winning znode. Zxids
//     are ordered across the ensemble, and a leadership always wins with a
//     znode created after the previous leader's, so epochs strictly increase
//     across all leaderships of a cluster.
//   - The leadership context is cancelled no later than Lease after the send
//     time of the newest request the server answered (default: 2/3 of the
//     negotiated session timeout), so a leader cut off from ZooKeeper stops
//     before the server can expire its session and let a successor win
//     (assuming clock rates drift less than the remaining third).
//   - A leadership also ends when its znode is deleted, its session expires,
//     Resign or Cede is called, or Run's context ends.
//   - After losing a create response, the elector finds its own znode by the
//     GUID in its name and adopts it only when its ephemeralOwner is the
//     current session; znodes of its earlier sessions are deleted.
//
// # What is not
//
// A process paused after checking Leadership.Valid can still act once before
// it notices. That is what fencing is for: the successor fences the old
// leader before it promotes, and the epoch lets resources reject stale writes.
package election

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/failoverd/failoverd/zk"
)

// Mode selects the election recipe.
type Mode int

// Election modes.
const (
	Fair Mode = iota
	Unfair
)

func (m Mode) String() string {
	if m == Unfair {
		return "unfair"
	}
	return "fair"
}

// Why a leadership ended; context.Cause of the leadership context is one of these.
var (
	ErrLeaseExpired   = errors.New("election: lease expired (no answer from zookeeper in time)")
	ErrSessionExpired = errors.New("election: zookeeper session expired")
	ErrNodeDeleted    = errors.New("election: election znode deleted")
	ErrResigned       = errors.New("election: resigned")
	ErrStopped        = errors.New("election: stopped")
	ErrReleased       = errors.New("election: released by the callback")
)

// lockName is the single znode of unfair mode.
const lockName = "lock"

// Config describes one candidate.
type Config struct {
	Dir    string // znode directory of the election, e.g. /failoverd/orders/election
	NodeID string // stored in the candidate znode, shown by status
	Mode   Mode
	// Lease bounds how long a leader trusts itself without an answer from
	// ZooKeeper. 0 means 2/3 of the negotiated session timeout; values not
	// below the session timeout fall back to that default.
	Lease time.Duration
	// RenewInterval is how often a leader asks ZooKeeper (0: Lease/4).
	RenewInterval time.Duration
	Logger        *slog.Logger
}

// Leadership is what a won election hands to OnElected.
type Leadership struct {
	Epoch   int64       // fencing token: czxid of the winning znode
	Path    string      // our election znode; breadcrumb writes check it exists
	Session *zk.Session // the session that owns Path
	NodeID  string
	// Lease is how long this leadership trusts itself after the newest
	// answer of the ZooKeeper leader (derived from the negotiated timeout).
	Lease time.Duration

	deadline func() time.Time
}

// Valid reports, without waiting for any goroutine, whether leadership can
// still be assumed: the session is alive and the lease has not run out. Call
// it right before acting (promote, write), because a paused process may wake
// with a context that is not cancelled yet.
func (l Leadership) Valid() error {
	select {
	case <-l.Session.Done():
		return ErrSessionExpired
	default:
	}
	if l.deadline != nil && !time.Now().Before(l.deadline()) {
		return ErrLeaseExpired
	}
	return nil
}

// LeaseRemaining is how long the lease still runs (<= 0: expired).
func (l Leadership) LeaseRemaining() time.Duration {
	if l.deadline == nil {
		return 0
	}
	return time.Until(l.deadline())
}

// candidate is the JSON stored in an election znode.
type candidate struct {
	NodeID string `json:"node_id"`
	GUID   string `json:"guid"`
}

// Elector campaigns for one candidate.
type Elector struct {
	client *zk.Client
	cfg    Config
	log    *slog.Logger
	guid   string

	mu         sync.Mutex
	kick       chan struct{} // closed by Resign/Cede; replaced after each use
	cededUntil time.Time
	current    *Leadership
}

// New checks cfg and returns an Elector; it does not contact ZooKeeper.
func New(client *zk.Client, cfg Config) (*Elector, error) {
	if client == nil {
		return nil, errors.New("election: nil zookeeper client")
	}
	if !strings.HasPrefix(cfg.Dir, "/") || strings.HasSuffix(cfg.Dir, "/") {
		return nil, fmt.Errorf("election: dir %q must be an absolute znode path", cfg.Dir)
	}
	if cfg.NodeID == "" {
		return nil, errors.New("election: node id is empty")
	}
	if cfg.Lease < 0 || cfg.RenewInterval < 0 {
		return nil, errors.New("election: negative lease or renew interval")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var b [16]byte
	rand.Read(b[:])
	return &Elector{
		client: client,
		cfg:    cfg,
		log:    cfg.Logger.With("component", "election", "mode", cfg.Mode.String()),
		guid:   hex.EncodeToString(b[:]),
		kick:   make(chan struct{}),
	}, nil
}

// GUID identifies this elector's znodes.
func (e *Elector) GUID() string { return e.guid }

// Leader returns the current leadership, or nil.
func (e *Elector) Leader() *Leadership {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.current
}

// Resign ends the current leadership (or candidacy) now; the elector joins
// again at once with a new znode.
func (e *Elector) Resign() { e.Cede(0) }

// Cede ends the current leadership (or candidacy) and stays out of the
// election for d.
func (e *Elector) Cede(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if until := time.Now().Add(d); until.After(e.cededUntil) {
		e.cededUntil = until
	}
	close(e.kick)
	e.kick = make(chan struct{})
}

// EndCede shortens a cede: the elector stays out only until until (zero or
// past: it joins again now). It acts only while the elector is ceded, so it
// never ends a leadership or a candidacy.
func (e *Elector) EndCede(until time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !time.Now().Before(e.cededUntil) || !until.Before(e.cededUntil) {
		return
	}
	e.cededUntil = until
	close(e.kick) // wakes Run's wait; every term it could end was kicked by the Cede
	e.kick = make(chan struct{})
}

func (e *Elector) state() (kick <-chan struct{}, cededUntil time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kick, e.cededUntil
}

// Run campaigns until ctx ends. onElected is called for every leadership won
// and must return once its context is cancelled. Run returns nil when ctx
// ends, after the last callback returned and our znode was deleted.
func (e *Elector) Run(ctx context.Context, onElected func(ctx context.Context, l Leadership)) error {
	if onElected == nil {
		return errors.New("election: nil OnElected")
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		kick, until := e.state()
		if wait := time.Until(until); wait > 0 {
			e.log.Info("ceded: staying out of the election", "for", wait.Round(time.Millisecond).String())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			case <-kick: // another Cede moved the deadline
			}
			continue
		}
		sess, err := e.client.Session(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			e.log.Warn("no zookeeper session", "err", err)
			sleep(ctx, backoff)
			continue
		}
		err = e.campaign(ctx, sess, kick, onElected)
		switch {
		case err == nil:
			backoff = 100 * time.Millisecond
		case ctx.Err() != nil:
			return nil
		default:
			e.log.Warn("campaign interrupted", "err", err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// campaign joins with one znode, waits for our turn, leads, and leaves.
// It returns nil when the leadership or candidacy ended normally.
func (e *Elector) campaign(ctx context.Context, sess *zk.Session, kick <-chan struct{}, onElected func(context.Context, Leadership)) error {
	if err := sess.EnsurePath(ctx, e.cfg.Dir); err != nil {
		return err
	}
	var node string
	var epoch int64
	var err error
	if e.cfg.Mode == Unfair {
		node, epoch, err = e.acquireLock(ctx, sess, kick)
		if node == "" {
			return err
		}
		defer e.leave(sess, node)
	} else {
		var czxid int64
		if node, czxid, err = e.join(ctx, sess); err != nil {
			return err
		}
		defer e.leave(sess, node)
		epoch, err = e.waitTurn(ctx, sess, node, czxid, kick)
		if errors.Is(err, errKicked) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	e.lead(ctx, sess, node, epoch, kick, onElected)
	return nil
}

var errKicked = errors.New("election: resigned or ceded")

// leave deletes our znode while the session is alive; bounded in time.
func (e *Elector) leave(sess *zk.Session, node string) {
	select {
	case <-sess.Done():
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := sess.Delete(ctx, node, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		e.log.Warn("leaving the election failed; the znode goes with the session", "node", node, "err", err)
	}
}

func (e *Elector) data() []byte {
	b, _ := json.Marshal(candidate{NodeID: e.cfg.NodeID, GUID: e.guid})
	return b
}

// testHookAfterCreate lets tests lose a create response on purpose.
var testHookAfterCreate func(sess *zk.Session, path string) error

func (e *Elector) create(ctx context.Context, sess *zk.Session, p string, mode zk.CreateMode) (string, zk.Stat, error) {
	got, st, err := sess.Create(ctx, p, e.data(), mode)
	if err == nil && testHookAfterCreate != nil {
		if herr := testHookAfterCreate(sess, got); herr != nil {
			return "", zk.Stat{}, herr
		}
	}
	return got, st, err
}

// join creates our fair-mode znode, surviving a lost create response.
// It returns the znode and its czxid (0 when adopted: not known yet).
func (e *Elector) join(ctx context.Context, sess *zk.Session) (string, int64, error) {
	prefix := e.cfg.Dir + "/c_" + e.guid + "-n_"
	// Leftovers of earlier terms (a leave that failed while ZooKeeper was
	// away) must go: adopting one would reuse an old epoch.
	if _, err := e.adopt(ctx, sess, false); err != nil {
		return "", 0, err
	}
	for attempt := 0; ; attempt++ {
		node, st, err := e.create(ctx, sess, prefix, zk.EphemeralSequential)
		if err == nil {
			return node, st.Czxid, nil
		}
		if !errors.Is(err, zk.ErrConnectionLoss) || attempt >= 5 {
			return "", 0, fmt.Errorf("joining the election: %w", err)
		}
		e.log.Warn("create response lost; looking for our znode", "err", err)
		if err := waitConnected(ctx, sess); err != nil {
			return "", 0, err
		}
		node, err = e.adopt(ctx, sess, true)
		if err != nil {
			return "", 0, err
		}
		if node != "" {
			e.log.Info("found our znode after a lost create response", "node", node)
			return node, 0, nil
		}
	}
}

// adopt looks for fair-mode znodes carrying our GUID. With keep it returns
// one owned by the current session (our create went through after all); it
// deletes the rest: orphans of earlier sessions, duplicates, leftovers.
func (e *Elector) adopt(ctx context.Context, sess *zk.Session, keep bool) (string, error) {
	kids, err := sess.Children(ctx, e.cfg.Dir)
	if err != nil {
		return "", err
	}
	var mine string
	for _, k := range sortCandidates(kids) {
		if !strings.Contains(k, e.guid) {
			continue
		}
		p := e.cfg.Dir + "/" + k
		ok, st, err := sess.Exists(ctx, p)
		if err != nil {
			return "", err
		}
		if !ok {
			continue
		}
		if keep && st.EphemeralOwner == sess.ID() && mine == "" {
			mine = p
			continue
		}
		e.log.Info("deleting an orphan znode of ours", "node", p, "owner", fmt.Sprintf("0x%x", st.EphemeralOwner))
		if err := sess.Delete(ctx, p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return "", err
		}
	}
	return mine, nil
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
func (e *Elector) waitTurn(ctx context.Context, sess *zk.Session, node string, czxid int64, kick <-chan struct{}) (int64, error) {
	name := node[strings.LastIndex(node, "/")+1:]
	for {
		kids, err := sess.Children(ctx, e.cfg.Dir)
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
				sess.Delete(ctx, e.cfg.Dir+"/"+k, -1)
			}
		}
		if idx < 0 {
			return 0, fmt.Errorf("%w: %s", ErrNodeDeleted, node)
		}
		if idx == 0 && czxid > 0 {
			return czxid, nil // created by this session, still listed: ours
		}
		if idx == 0 {
			ok, st, err := sess.Exists(ctx, node)
			if err != nil {
				return 0, err
			}
			if !ok || st.EphemeralOwner != sess.ID() {
				return 0, fmt.Errorf("%w: %s", ErrNodeDeleted, node)
			}
			return st.Czxid, nil
		}
		pred := e.cfg.Dir + "/" + order[idx-1]
		ok, _, ch, err := sess.ExistsW(ctx, pred)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		e.log.Debug("waiting for predecessor", "predecessor", pred, "position", idx)
		select {
		case <-ch: // deleted, changed or not watching: look again
		case <-sess.Done():
			return 0, sess.Err()
		case <-kick:
			return 0, errKicked
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// acquireLock blocks until we hold the unfair-mode lock; it returns the lock
// path and its czxid, or "" when kicked.
func (e *Elector) acquireLock(ctx context.Context, sess *zk.Session, kick <-chan struct{}) (string, int64, error) {
	lock := e.cfg.Dir + "/" + lockName
	lostCreate := false
	for {
		_, st, err := e.create(ctx, sess, lock, zk.Ephemeral)
		switch {
		case err == nil:
			return lock, st.Czxid, nil
		case errors.Is(err, zk.ErrConnectionLoss):
			lostCreate = true
			e.log.Warn("create response lost; checking the lock owner", "err", err)
			if err := waitConnected(ctx, sess); err != nil {
				return "", 0, err
			}
		case !errors.Is(err, zk.ErrNodeExists):
			return "", 0, err
		}
		b, st, ch, err := sess.GetW(ctx, lock)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return "", 0, err
		}
		var c candidate
		_ = json.Unmarshal(b, &c)
		if lostCreate && st.EphemeralOwner == sess.ID() {
			return lock, st.Czxid, nil // our create went through after all
		}
		if c.GUID == e.guid || st.EphemeralOwner == sess.ID() {
			// Ours from an earlier session or term: adopting it would reuse
			// an old epoch.
			e.log.Info("deleting an old lock of ours", "owner", fmt.Sprintf("0x%x", st.EphemeralOwner))
			if err := sess.Delete(ctx, lock, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return "", 0, err
			}
			continue
		}
		select {
		case <-ch:
		case <-sess.Done():
			return "", 0, sess.Err()
		case <-kick:
			return "", 0, nil
		case <-ctx.Done():
			return "", 0, ctx.Err()
		}
	}
}

func (e *Elector) lease(sess *zk.Session) time.Duration {
	def := sess.Timeout() * 2 / 3
	if e.cfg.Lease > 0 && e.cfg.Lease < sess.Timeout() {
		return e.cfg.Lease
	}
	return def
}

// lead runs the callback and watches leadership until it ends.
func (e *Elector) lead(ctx context.Context, sess *zk.Session, node string, epoch int64, kick <-chan struct{}, onElected func(context.Context, Leadership)) {
	// The lease runs from the newest answer of the ZooKeeper leader; a
	// candidate that waited in the queue may have none for a long time.
	if err := sess.Sync(ctx, node); err != nil {
		e.log.Warn("could not confirm leadership with the zookeeper leader", "err", err)
		return
	}
	lease := e.lease(sess)
	renewEvery := e.cfg.RenewInterval
	if renewEvery <= 0 || renewEvery > lease/2 {
		renewEvery = lease / 4
	}
	deadline := func() time.Time { return sess.LastAck().Add(lease) }
	l := Leadership{Epoch: epoch, Path: node, Session: sess, NodeID: e.cfg.NodeID, Lease: lease, deadline: deadline}

	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(ErrStopped)
	done := make(chan struct{})
	e.mu.Lock()
	e.current = &l
	e.mu.Unlock()
	e.log.Info("elected", "epoch", epoch, "node", node, "lease", lease.String())
	go func() {
		defer close(done)
		onElected(lctx, l)
	}()

	cause := e.watch(ctx, sess, node, lease, renewEvery, kick, done)
	cancel(cause)
	<-done
	e.mu.Lock()
	e.current = nil
	e.mu.Unlock()
	e.log.Info("leadership ended", "epoch", epoch, "reason", cause.Error())
}

// watch returns why the leadership ended. It never blocks on ZooKeeper: the
// renewals run in their own goroutine and the lease is checked by the clock.
func (e *Elector) watch(ctx context.Context, sess *zk.Session, node string, lease, renewEvery time.Duration, kick <-chan struct{}, done <-chan struct{}) error {
	wctx, stop := context.WithCancel(ctx)
	defer stop()

	gone := make(chan error, 1)
	renewed := make(chan struct{}, 1)
	var inflight sync.Mutex
	// renew asks ZooKeeper whether our znode is still ours (which also moves
	// the lease on); after a reconnect (full) it also checks we are first.
	renew := func(full bool) {
		if !inflight.TryLock() {
			return
		}
		go func() {
			defer inflight.Unlock()
			// Sync first: only an answer the ZooKeeper leader gave moves the
			// lease (a cut-off follower still answers reads).
			err := sess.Sync(wctx, node)
			var ok bool
			var st zk.Stat
			if err == nil {
				ok, st, err = sess.Exists(wctx, node)
			}
			if err == nil && ok && full && e.cfg.Mode == Fair {
				var kids []string
				if kids, err = sess.Children(wctx, e.cfg.Dir); err == nil {
					order := sortCandidates(kids)
					ok = len(order) > 0 && e.cfg.Dir+"/"+order[0] == node
				}
			}
			switch {
			case err == nil && (!ok || st.EphemeralOwner != sess.ID()):
				select {
				case gone <- ErrNodeDeleted:
				default:
				}
			case err == nil:
				select {
				case renewed <- struct{}{}:
				default:
				}
			}
		}()
	}
	// Watch our own znode so an operator deleting it ends leadership at once.
	var deleted <-chan zk.Event
	if ok, _, ch, err := sess.ExistsW(ctx, node); err == nil {
		if !ok {
			return ErrNodeDeleted
		}
		deleted = ch
	}

	ticker := time.NewTicker(renewEvery)
	defer ticker.Stop()
	timer := time.NewTimer(lease)
	defer timer.Stop()
	_, stateChanged := sess.State()
	for {
		// Check the clock first: after a pause every case may be ready at once.
		left := time.Until(sess.LastAck().Add(lease))
		if left <= 0 {
			return ErrLeaseExpired
		}
		timer.Reset(left)
		select {
		case <-done:
			return ErrReleased
		case <-ctx.Done():
			return ErrStopped
		case <-kick:
			return ErrResigned
		case <-sess.Done():
			return ErrSessionExpired
		case err := <-gone:
			return err
		case ev, ok := <-deleted:
			if ok && ev.Type == zk.EventNodeDeleted {
				return ErrNodeDeleted
			}
			deleted = nil
			if ok && ev.Type != zk.EventNotWatching {
				// Data changed: watch again.
				if ok, _, ch, err := sess.ExistsW(ctx, node); err == nil && ok {
					deleted = ch
				}
			}
		case <-stateChanged:
			var st zk.State
			st, stateChanged = sess.State()
			if st == zk.StateConnected {
				// Reconnected within the session: make sure our znode survived
				// and is still first.
				renew(true)
				if deleted == nil {
					if ok, _, ch, err := sess.ExistsW(ctx, node); err == nil && ok {
						deleted = ch
					}
				}
			}
		case <-ticker.C:
			renew(false)
		case <-renewed:
		case <-timer.C:
		}
	}
}
