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
//     across all leaderships of a cluster. An elector never leads twice with
//     one epoch: after a lost create response it adopts a znode only when the
//     znode carries the nonce of the current join (a lock left over from an
//     earlier term, whose delete was lost, is deleted instead), and it refuses
//     an epoch not above the one it last led with.
//   - The leadership context is cancelled, and Valid fails, no later than
//     Lease after the lease's anchor (below); no successor can be elected
//     before anchor + T, and Lease + D + T/20 <= T leaves the demote budget D
//     (Config.DemoteBudget) after the lease ends.
//   - A leadership also ends when its znode is deleted, its session expires,
//     a reconnect negotiates a session timeout the lease no longer fits,
//     or Run's context ends (the leadership context's cause is then the
//     cause Run's context was cancelled with).
//   - Cancelling Run's context never abandons a create in flight: the
//     elector learns its outcome (bounded by the session's life) and
//     deletes the znode, so no znode of its live session stays behind.
//   - The lease is enforced by the clock alone: no ZooKeeper call runs in the
//     loop that watches a leadership, so a call that hangs (go-zookeeper's
//     calls can, during reconnect cycles) cannot delay the end of leadership.
//   - After losing a create response, the elector finds its own znode by the
//     GUID in its name and adopts it only when its ephemeralOwner is the
//     current session and it carries the current join's nonce; znodes of its
//     earlier sessions and terms are deleted.
//
// The lease argument (the "credit chain"). T is the negotiated session
// timeout, tick ZooKeeper's tickTime, ρ the clock rate margin (1/20). Only
// the ZooKeeper leader expires sessions, no earlier than T after the newest
// touch of the session it credited; it credits a touch only when a
// follower's answer to its ping (sent every tick/2) reports it, and a new
// ZooKeeper leader restores every session with a full T. Our requests touch
// the session at the server F they reach. Only an answered write (the
// renewal is a multi holding one version check of our znode) proves that
// the leader committed it with a quorum; a sync or a read proves nothing.
//
// Let Z be a write answered by F (sent s_Z, answered a_Z), X a later write
// sent at s_X >= a_Z + tick/2·(1+ρ) and answered at a_X, and Y a write sent
// at s_Y >= a_X and answered, all over one connection to F. The leader sent
// a ping p within tick/2 after F got Z; p precedes X's commit on the
// leader→F stream, so F answered p (reporting Z's touch) before X's answer
// reached us, before F forwarded Y; Y's answer proves that the F→leader
// stream delivered everything sent before it, so p's answer, the touch, was
// credited. The session lives until at least s_Z + T (leader's time). The
// anchor is s_Z of the newest Z with such X and Y (zk.Session.Acks keeps
// the writes' send and answer times and connection), and the lease ends at
// anchor + Lease. Renewals come in pairs (X, then Y at once) every renew
// interval R >= tick/2·(1+ρ), so the anchor lags "now" by R to 2R plus round
// trips, and a leader tolerates an outage of Lease - 2R less round trips.
// Lease <= T - D - T/20 (the default is exactly that), so when the lease
// ends, D remains for the demote before the session can expire.
//
// A new leader needs an anchor too. A candidate that kept a credit chain
// while it waited (Config.WarmStandby, Warm) leads at once when its anchor,
// on the connection in use, is at most 2R + MinTolerance/2 old, what a
// leader has in steady state; any other first renews until a chain of
// writes sent after its win exists (about R). Both are sound: a chain
// bounds the life of the session (every request touches the session,
// whichever znode it names, and a check of a missing znode is answered
// through the ZooKeeper leader too), and the election znode, ephemeral,
// goes before the session ends only when deleted explicitly (by us after
// the term, or by an operator, which the watch on it reports). The fresh
// chain was only ever about liveness: an old anchor leaves little lease.
//
// Assumed: the ZooKeeper leader pings every tick/2; tick is Config.TickTime
// or, unknown, at most T/2 (ZooKeeper's default minSessionTimeout is two
// ticks; a server configured with a lower minimum breaks the bound unless
// TickTime says so); clock rates on this host and on the ZooKeeper leader
// within ρ of each other (steps do not matter: only durations measured on
// one host are compared); TCP delivers in order and both ends process quorum
// packets in order; ZooKeeper behaves as 3.5 to 3.9 do, and keeps its own
// safety (a quorum, at most one leader per epoch).
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
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/internal/lease"
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
	ErrStopped        = errors.New("election: stopped")
	ErrReleased       = errors.New("election: released by the callback")
	// ErrResigned is never a cause this elector gives: a candidacy ends
	// by the cancellation of Run's context, whose cause the term carries.
	// cluster/zkcluster still maps it to cluster.ErrResigned.
	ErrResigned = errors.New("election: resigned")
	// ErrLeaseTooShort: the lease that fits the negotiated session timeout
	// and the demote budget leaves no tolerance; the elector stays out of
	// the election.
	ErrLeaseTooShort = errors.New("election: lease too short")
	// ErrTimeoutShrunk: a reconnect negotiated a session timeout the lease
	// no longer fits.
	ErrTimeoutShrunk = errors.New("election: the session timeout negotiated on reconnect no longer fits the lease")
)

// lockName is the single znode of unfair mode.
const lockName = "lock"

// Config describes one candidate.
type Config struct {
	Dir    string // znode directory of the election, e.g. /failoverd/orders/election
	NodeID string // stored in the candidate znode, shown by status
	Mode   Mode
	// Lease bounds how long a leader trusts itself after the anchor (see
	// "What is guaranteed"). 0 means the longest that fits:
	// T - DemoteBudget - T/20 for the negotiated timeout T. A longer one
	// is shortened (and logged); the elector stays out of the election
	// when the lease leaves no tolerance (lease.Timing.MinLease).
	Lease time.Duration
	// RenewInterval is how often a leader renews (0, or anything below
	// tickTime/2·(1+ρ): that).
	RenewInterval time.Duration
	// TickTime is ZooKeeper's tickTime when the operator knows it; 0 assumes
	// half the negotiated session timeout (ZooKeeper's default limits).
	TickTime time.Duration
	// DemoteBudget is how long the controller may need, after the lease
	// ended, to stop the service (lease.DemoteBudget).
	DemoteBudget time.Duration
	// WarmStandby keeps a credit chain on the candidate that would lead
	// next (fair: the one next in line; unfair: every candidate) while it
	// waits, so that it leads at once when it wins instead of renewing for
	// a renew interval first (see Warm). It costs the waiting candidate
	// the renewals a leader sends. false: only a candidate told Warm(true)
	// keeps a chain.
	WarmStandby bool
}

// Deps are the parts an Elector uses.
type Deps struct {
	Client *zk.Client   // required; the elector campaigns on its sessions
	Logger *slog.Logger // nil: discard
}

// Timing is the lease arithmetic of this configuration for a session of
// the given negotiated timeout: lease.Compute, the function config
// validation applies to the configured timeout.
func (c Config) Timing(timeout time.Duration) (lease.Timing, error) {
	return lease.Compute(timeout, c.TickTime, c.DemoteBudget, c.Lease, c.RenewInterval)
}

// timing is Config.Timing; it wraps a refusal in ErrLeaseTooShort.
func (e *Elector) timing(timeout time.Duration) (lease.Timing, error) {
	tm, err := e.cfg.Timing(timeout)
	if err != nil {
		return tm, fmt.Errorf("%w: refusing to lead with the session timeout zookeeper granted (%v): %s", ErrLeaseTooShort, timeout, tm.Explain())
	}
	return tm, nil
}

// Anchor returns the send time of the newest answered write Z for which
// acks hold a credit chain: a write X over the same connection sent at least
// gap after Z's answer, and a write Y over it sent after X's answer (see
// "What is guaranteed"). It is the zero time when there is none. The acks
// need not be evenly spaced: a renewal answered late counts only from its
// own send time, and only once later writes complete a chain behind it.
func Anchor(acks []zk.Ack, gap time.Duration) time.Time {
	lastSent := map[uint64]time.Time{} // per connection: newest send (a Y)
	for _, a := range acks {
		if a.Sent.After(lastSent[a.Conn]) {
			lastSent[a.Conn] = a.Sent
		}
	}
	var anchor time.Time
	for _, x := range acks {
		if y, ok := lastSent[x.Conn]; !ok || y.Before(x.Answered) {
			continue // no Y after X's answer
		}
		for _, z := range acks {
			if z.Conn == x.Conn && !x.Sent.Before(z.Answered.Add(gap)) && z.Sent.After(anchor) {
				anchor = z.Sent
			}
		}
	}
	return anchor
}

// renewNow reports whether a write sent now would move the anchor (it would
// be the Y of a chain whose Z is newer than the anchor); otherwise the next
// renewal (an X) waits a renew interval after the newest answer.
func renewNow(acks []zk.Ack, gap time.Duration, now time.Time) bool {
	if len(acks) == 0 {
		return true
	}
	newest := acks[len(acks)-1]
	probe := append(append([]zk.Ack(nil), acks...), zk.Ack{Sent: now, Answered: now, Conn: newest.Conn})
	return Anchor(probe, gap).After(Anchor(acks, gap))
}

// anchorFn returns the anchor of sess's writes, never moving back: a chain
// seen once stays a fact even after its writes left the ring.
func anchorFn(sess *zk.Session, gap time.Duration) func() time.Time {
	var mu sync.Mutex
	var cur time.Time
	return func() time.Time {
		a := Anchor(sess.Acks(), gap)
		mu.Lock()
		defer mu.Unlock()
		if a.After(cur) {
			cur = a
		}
		return cur
	}
}

// Leadership is what a won election hands to OnElected.
type Leadership struct {
	Epoch   int64       // fencing token: czxid of the winning znode
	Path    string      // our election znode; breadcrumb writes check it exists
	Session *zk.Session // the session that owns Path
	NodeID  string
	// Mode is the recipe that won: in Unfair mode Path is the shared
	// "lock", which another session may hold under the same name once
	// ours is gone (see StillOwned).
	Mode Mode
	// Lease is how long this leadership trusts itself after its anchor
	// (see "What is guaranteed").
	Lease time.Duration
	// SessionTimeout is the session timeout ZooKeeper negotiated for Session
	// when the leadership began; a reconnect that negotiates one the lease
	// does not fit ends the leadership.
	SessionTimeout time.Duration
	// RenewInterval is how often the elector renews the lease.
	RenewInterval time.Duration
	// Grace is how long after the lease ended no successor can have been
	// elected yet: SessionTimeout - Lease - SessionTimeout/20, at least
	// Config.DemoteBudget. What must happen after the lease ends (killing
	// a promote, the demote) must fit in it (lease.DemoteBudget); the
	// controller refuses to lead when it does not.
	Grace time.Duration
	// Timing is the whole arithmetic (tick assumed, tolerance).
	Timing lease.Timing

	deadline func() time.Time
	// deleted is set by Deleted: the term deleted Path itself.
	deleted *atomic.Bool
}

// Deleted tells the elector that this leadership's own write deleted Path
// (Term.Finish: one multi hands the breadcrumb over and deletes it). Leaving
// then sends nothing, where it would delete Path again (fair mode) or read
// the lock after a sync (unfair mode): requests that would reach the
// ensemble just as the successor reads, for nothing. Call it only once that
// write was answered as done.
func (l Leadership) Deleted() {
	if l.deleted != nil {
		l.deleted.Store(true)
	}
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
	// Join is a nonce of the join that created the znode: after a lost
	// create response only a znode of the current join may be adopted.
	Join string `json:"join,omitempty"`
}

// Elector campaigns for one candidate.
type Elector struct {
	client *zk.Client
	cfg    Config
	log    *slog.Logger
	guid   string

	mu      sync.Mutex
	refusal error // why the elector stays out (the lease does not fit), or nil

	warm        bool          // Warm(true)
	warmChanged chan struct{} // closed and replaced when warm changes

	// lastEpoch is the epoch of our newest leadership; a new one must be
	// above it. woke is when the watch that led to the current win fired
	// (or the campaign began). warmDone is the stop channel of the last
	// wait's warmer (see warmer.stop). Only Run's goroutine uses them.
	lastEpoch int64
	woke      time.Time
	warmDone  <-chan struct{}
}

// Refusal says why the elector stays out of the election (the lease cannot
// fit the session timeout ZooKeeper granted and the demote budget), or nil.
func (e *Elector) Refusal() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refusal
}

func (e *Elector) setRefusal(err error) {
	e.mu.Lock()
	e.refusal = err
	e.mu.Unlock()
}

// New checks cfg and returns an Elector; it does not contact ZooKeeper.
func New(cfg Config, deps Deps) (*Elector, error) {
	if deps.Client == nil {
		return nil, errors.New("election: nil zookeeper client")
	}
	if !strings.HasPrefix(cfg.Dir, "/") || strings.HasSuffix(cfg.Dir, "/") {
		return nil, fmt.Errorf("election: dir %q must be an absolute znode path", cfg.Dir)
	}
	if cfg.NodeID == "" {
		return nil, errors.New("election: node id is empty")
	}
	if cfg.Lease < 0 || cfg.RenewInterval < 0 || cfg.TickTime < 0 || cfg.DemoteBudget < 0 {
		return nil, errors.New("election: negative lease, renew interval, tick time or demote budget")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	var b [16]byte
	rand.Read(b[:])
	return &Elector{
		client: deps.Client,
		cfg:    cfg,
		log:    deps.Logger.With("component", "election", "mode", cfg.Mode.String()),
		guid:   hex.EncodeToString(b[:]),

		warmChanged: make(chan struct{}),
	}, nil
}

// Warm asks the elector to keep a credit chain while it waits (true), as
// a failover target should, or to go back to Config.WarmStandby's rule
// (false). A waiting candidate that keeps one renews as a leader does (a
// write that changes nothing, in pairs every renew interval); when it
// wins, it leads at once on the anchor it already has instead of renewing
// for a renew interval first. That is as safe as a chain built after the
// win: the anchor bounds the life of the session, whatever znode its
// writes named, and the election znode lives as long as the session
// (README, "The lease").
func (e *Elector) Warm(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.warm == on {
		return
	}
	e.warm = on
	close(e.warmChanged)
	e.warmChanged = make(chan struct{})
}

func (e *Elector) warmState() (on bool, changed <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.warm, e.warmChanged
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
		sess, err := e.client.Session(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			e.log.Warn("no zookeeper session", "err", err)
			sleep(ctx, backoff)
			continue
		}
		err = e.campaign(ctx, sess, onElected)
		switch {
		case err == nil:
			backoff = 100 * time.Millisecond
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrLeaseTooShort):
			e.log.Error("not joining the election", "err", err)
			sleep(ctx, 5*time.Second)
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
func (e *Elector) campaign(ctx context.Context, sess *zk.Session, onElected func(context.Context, Leadership)) error {
	// A candidate that could not lead safely with this session's negotiated
	// timeout must not win and then refuse: it stays out altogether.
	tm, err := e.timing(sess.Timeout())
	e.setRefusal(err)
	if err != nil {
		return err
	}
	if tm.Clamped {
		e.log.Warn("configured lease too long for the negotiated session timeout and the demote budget; using a shorter one",
			"configured", e.cfg.Lease.String(), "lease", tm.Lease.String(), "session_timeout", tm.Session.String(),
			"demote_budget", tm.Budget.String())
	}
	if err := sess.EnsurePath(ctx, e.cfg.Dir); err != nil {
		return err
	}
	// keep carries the calls whose outcome must be known even when the
	// candidacy is cancelled meanwhile: a create (and the search for it
	// after a lost response) and the deletes of our own znodes. Abandoning
	// a create in flight would leave a znode of our live session behind
	// with nobody to delete it: in unfair mode a lock that nobody can take,
	// in fair mode a head of the queue that never leads. ctx is consulted
	// only between calls and in the selects where the calls wait.
	keep, release := sessionCtx(ctx, sess)
	defer release()
	e.woke = time.Now()
	var node string
	var epoch int64
	deleted := new(atomic.Bool) // by the term (Leadership.Deleted)
	if e.cfg.Mode == Unfair {
		node, epoch, err = e.acquireLock(ctx, keep, sess, tm)
		if node == "" {
			return err
		}
		defer func(czxid int64) {
			if !deleted.Load() {
				e.leave(sess, node, czxid)
			}
		}(epoch)
	} else {
		var czxid int64
		if node, czxid, err = e.join(ctx, keep, sess); err != nil {
			return err
		}
		defer func() {
			if !deleted.Load() {
				e.leave(sess, node, 0)
			}
		}()
		epoch, err = e.waitTurn(ctx, keep, sess, tm, node, czxid)
		if err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // cancelled while the create was in flight: leave
	}
	e.lead(ctx, sess, node, epoch, deleted, onElected)
	return nil
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
	if testHookLeave != nil && testHookLeave(sess, node) {
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

func (e *Elector) data(join string) []byte {
	b, _ := json.Marshal(candidate{NodeID: e.cfg.NodeID, GUID: e.guid, Join: join})
	return b
}

func nonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Failpoints for tests. testHookAfterCreate sees every create's outcome and
// may replace it (a lost response: the create happened, or failed, but we
// hear ErrConnectionLoss); testHookLeave may lose a leave's delete (it
// returns true: the request never reached the server).
// testHookLeading runs when a leadership has begun, right before the elector
// starts watching it; testHookRenewed right after a renewal was answered.
var (
	testHookAfterCreate func(sess *zk.Session, path string, err error) error
	testHookLeave       func(sess *zk.Session, path string) bool
	testHookLeading     func(l Leadership)
	testHookRenewed     func()
)

func (e *Elector) create(ctx context.Context, sess *zk.Session, p string, mode zk.CreateMode, join string) (string, zk.Stat, error) {
	got, st, err := sess.Create(ctx, p, e.data(join), mode)
	if testHookAfterCreate != nil {
		if herr := testHookAfterCreate(sess, got, err); herr != nil {
			return "", zk.Stat{}, herr
		}
	}
	return got, st, err
}

// join creates our fair-mode znode, surviving a lost create response.
// It returns the znode and its czxid (0 when adopted: not known yet).
// Once a create was sent it runs on keep until its outcome is known, so a
// cancelled ctx never leaves a znode of ours that the caller does not
// know of; ctx only stops it from sending another create.
func (e *Elector) join(ctx, keep context.Context, sess *zk.Session) (string, int64, error) {
	prefix := e.cfg.Dir + "/c_" + e.guid + "-n_"
	// Leftovers of earlier terms (a leave that failed while ZooKeeper was
	// away) must go: adopting one would reuse an old epoch.
	if _, err := e.adopt(ctx, keep, sess, ""); err != nil {
		return "", 0, err
	}
	join := nonce()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return "", 0, err
		}
		node, st, err := e.create(keep, sess, prefix, zk.EphemeralSequential, join)
		if err == nil {
			return node, st.Czxid, nil
		}
		if !errors.Is(err, zk.ErrConnectionLoss) {
			return "", 0, fmt.Errorf("joining the election: %w", err)
		}
		e.log.Warn("create response lost; looking for our znode", "err", err)
		if err := waitConnected(keep, sess); err != nil {
			return "", 0, err
		}
		node, err = e.adopt(keep, keep, sess, join)
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
// deletes on keep.
func (e *Elector) adopt(ctx, keep context.Context, sess *zk.Session, join string) (string, error) {
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
		b, st, err := sess.Get(ctx, p)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return "", err
		}
		var c candidate
		_ = json.Unmarshal(b, &c)
		if join != "" && c.Join == join && st.EphemeralOwner == sess.ID() && mine == "" {
			mine = p
			continue
		}
		e.log.Info("deleting an orphan znode of ours", "node", p, "owner", fmt.Sprintf("0x%x", st.EphemeralOwner))
		if err := sess.Delete(keep, p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
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
// A cancelled ctx ends it; the caller then leaves.
// The candidate next in line (with Config.WarmStandby) and one told
// Warm(true) keep a credit chain meanwhile, renewing on their own znode.
func (e *Elector) waitTurn(ctx, keep context.Context, sess *zk.Session, tm lease.Timing, node string, czxid int64) (int64, error) {
	name := node[strings.LastIndex(node, "/")+1:]
	w := e.newWarmer(sess, tm, node)
	defer func() { e.warmDone = w.stop() }()
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
				sess.Delete(keep, e.cfg.Dir+"/"+k, -1)
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
	wait:
		for {
			warm, warmChanged := e.warmState()
			w.run(warm || idx == 1 && e.cfg.WarmStandby)
			select {
			case <-ch: // deleted, changed or not watching: look again
				e.woke = time.Now()
				break wait
			case <-warmChanged:
			case <-w.lost: // our znode is gone: look again
				w.stop()
				break wait
			case <-sess.Done():
				return 0, sess.Err()
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
}

// acquireLock blocks until we hold the unfair-mode lock; it returns the lock
// path and its czxid, or "" when cancelled. A create, once sent,
// runs on keep until its outcome is known: it returns the lock when it
// got it, even if ctx ended meanwhile (the caller then leaves).
//
// With Config.WarmStandby (or Warm(true)) it keeps a credit chain while it
// waits, renewing on the election directory (it has no znode of its own).
func (e *Elector) acquireLock(ctx, keep context.Context, sess *zk.Session, tm lease.Timing) (string, int64, error) {
	lock := e.cfg.Dir + "/" + lockName
	w := e.newWarmer(sess, tm, e.cfg.Dir)
	defer func() { e.warmDone = w.stop() }()
	join := nonce()
	lostCreate := false
	unresolved := false // a create's response was lost and no read has told its outcome yet
	for {
		if err := ctx.Err(); err != nil && !unresolved {
			return "", 0, err
		}
		if !unresolved {
			_, st, err := e.create(keep, sess, lock, zk.Ephemeral, join)
			switch {
			case err == nil && st.EphemeralOwner == sess.ID():
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
			rctx = keep
			if err := waitConnected(keep, sess); err != nil {
				return "", 0, err
			}
		}
		b, st, ch, err := sess.GetW(rctx, lock)
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
		if lostCreate && st.EphemeralOwner == sess.ID() && c.Join == join {
			return lock, st.Czxid, nil // our create went through after all
		}
		if c.GUID == e.guid || st.EphemeralOwner == sess.ID() {
			// Ours from an earlier session or term (a leave whose delete was
			// lost): adopting it would reuse an old epoch.
			if err := e.deleteOldLock(keep, sess, lock, st); err != nil {
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
				e.woke = time.Now()
				break wait
			case <-warmChanged:
			case <-w.lost: // the directory is gone: the create says why
				w.stop()
				break wait
			case <-sess.Done():
				return "", 0, sess.Err()
			case <-ctx.Done():
				return "", 0, ctx.Err()
			}
		}
	}
}

// warmer runs a waiting candidate's renewals while they are wanted: the
// renew loop a leader runs, writing a version check of path (our queue
// znode, or in unfair mode the election directory) without the read
// after it. Each answer goes into the session's Acks, from which lead
// takes the anchor when this candidate wins.
type warmer struct {
	e    *Elector
	sess *zk.Session
	tm   lease.Timing
	path string

	cancel context.CancelFunc // of the running loop, nil when none runs
	// lost is closed when the running loop found path gone (and ended);
	// nil when no loop runs. The waiter then calls stop and looks again.
	lost chan struct{}
	// done is closed when the newest loop ended, a renewal it had in
	// flight answered (nil: no loop ran).
	done chan struct{}
}

func (e *Elector) newWarmer(sess *zk.Session, tm lease.Timing, path string) *warmer {
	return &warmer{e: e, sess: sess, tm: tm, path: path}
}

// run starts (on) or stops the loop; it does nothing when it already
// runs, or already stands, as asked.
func (w *warmer) run(on bool) {
	if on == (w.cancel != nil) {
		return
	}
	if !on {
		w.stop()
		return
	}
	var ctx context.Context
	ctx, w.cancel = context.WithCancel(context.Background())
	lost := make(chan struct{})
	w.lost = lost
	w.e.log.Debug("keeping a credit chain while waiting", "node", w.path)
	gap := lease.Gap(w.tm.Session, w.e.cfg.TickTime)
	done := make(chan struct{})
	w.done = done
	// renewLoop reports at most once, and returns right after.
	go func() {
		defer close(done)
		w.e.renewLoop(ctx, w.sess, w.path, false, w.tm, gap, nil, func(error) { close(lost) })
	}()
}

// stop ends the loop without waiting for a renewal in flight: that one
// runs to its answer, which goes into the session's Acks. It returns a
// channel closed once the loop is over (nil: no loop ran), which a win
// waits for before it judges the chain (see ready).
func (w *warmer) stop() <-chan struct{} {
	if w.cancel != nil {
		w.cancel()
		w.cancel, w.lost = nil, nil
	}
	return w.done
}

// confirm renews the lease: a multi holding one version check of our znode
// is a write that changes nothing, so the ZooKeeper leader answers it only
// after a quorum acknowledged it (a follower cut off from its leader, or a
// leader cut off from its quorum, cannot), and an answer goes into
// sess.Acks, the material of the credit chain. It also fails when the znode is gone.
// The Exists after it (read-your-writes: as fresh as the write) checks that
// the znode is still ours.
func confirm(ctx context.Context, sess *zk.Session, node string) (bool, error) {
	return renewWith(ctx, sess, node, zk.CheckOp{Path: node, Version: -1})
}

// announce is confirm with a write of our znode's data (the same, less the
// join nonce, which matters only before a win) in place of the version
// check: one write as well, so a renewal like any other, which also fires
// the exists watch of the candidate behind us.
func (e *Elector) announce(ctx context.Context, sess *zk.Session, node string) (bool, error) {
	return renewWith(ctx, sess, node, zk.SetOp{Path: node, Data: e.data(""), Version: -1})
}

// renewWith sends op (one write naming node) as a renewal, then checks
// with a read as fresh as the write that node is still ours; false when
// it is gone.
func renewWith(ctx context.Context, sess *zk.Session, node string, op zk.Op) (bool, error) {
	err := sess.Multi(ctx, op)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ok, st, err := sess.Exists(ctx, node)
	if err != nil {
		return false, err
	}
	return ok && st.EphemeralOwner == sess.ID(), nil
}

// touch is a waiting candidate's renewal: the write of confirm (a version
// check of path) without the read after it.
func touch(ctx context.Context, sess *zk.Session, path string) (bool, error) {
	err := sess.Multi(ctx, zk.CheckOp{Path: path, Version: -1})
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	return err == nil, err
}

// lead runs the callback and watches leadership until it ends.
func (e *Elector) lead(ctx context.Context, sess *zk.Session, node string, epoch int64, deleted *atomic.Bool, onElected func(context.Context, Leadership)) {
	if epoch <= e.lastEpoch {
		// Never lead twice with one epoch, whatever went wrong in between.
		e.log.Error("refusing to lead with an epoch not above our last one", "epoch", epoch, "last_epoch", e.lastEpoch, "node", node)
		return
	}
	// The timeout may have changed since the campaign began (a reconnect).
	tm, err := e.timing(sess.Timeout())
	e.setRefusal(err)
	if err != nil {
		e.log.Error("won the election but cannot lead safely; giving it back", "node", node, "err", err)
		return
	}
	won := time.Now()
	e.log.Debug("candidate won", "node", node, "epoch", epoch, "duration_seconds", won.Sub(e.woke).Seconds())
	gap := lease.Gap(tm.Session, e.cfg.TickTime)
	anchor := anchorFn(sess, gap)
	deadline := func() time.Time { return anchor().Add(tm.Lease) }
	// The lease runs from an anchor that a credit chain of answered writes
	// proves; a candidate that waited without keeping one has none.
	sctx, cancelSettle := context.WithTimeout(ctx, tm.Session)
	warm, err := e.ready(sctx, sess, node, tm, gap, anchor)
	cancelSettle()
	if err == nil {
		e.log.Debug("lease ready", "node", node, "epoch", epoch, "warm", warm, "duration_seconds", time.Since(won).Seconds())
	}
	if err != nil {
		e.log.Warn("could not confirm leadership with the zookeeper leader", "node", node, "err", err)
		return
	}
	e.lastEpoch = epoch
	l := Leadership{Epoch: epoch, Path: node, Session: sess, NodeID: e.cfg.NodeID, Mode: e.cfg.Mode, Lease: tm.Lease,
		SessionTimeout: tm.Session, RenewInterval: tm.Renew, Grace: tm.Grace(), Timing: tm, deadline: deadline,
		deleted: deleted}

	// The term's context derives from Run's: when Run's context is
	// cancelled with a cause, context.Cause of the term is that cause (the
	// caller's reason, such as a shutdown or an unhealthy service); the
	// elector's own reasons (ErrLeaseExpired, ErrNodeDeleted, ...) are the
	// cause when the term ends otherwise.
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(ErrStopped)
	done := make(chan struct{})
	e.log.Info("elected", "epoch", epoch, "node", node, "lease", tm.Lease.String(),
		"renew_every", tm.Renew.String(), "tolerance", tm.Tolerance().String(), "grace", tm.Grace().String(),
		"demote_budget", tm.Budget.String(), "tick_time", tm.Tick.String(), "tick_time_known", tm.TickKnown,
		"session_timeout", tm.Session.String(), "lease_left", l.LeaseRemaining().Round(time.Millisecond).String())
	go func() {
		defer close(done)
		onElected(lctx, l)
	}()

	if testHookLeading != nil {
		testHookLeading(l)
	}
	cause := e.watch(ctx, sess, node, tm, gap, deadline, done)
	cancel(cause)
	<-done
	e.log.Info("leadership ended", "epoch", epoch, "reason", cause.Error())
}

// ready returns once the lease leaves this new leader the tolerance a
// leader has in steady state. A candidate that kept a credit chain while
// it waited (warm) is ready at once when the chain's anchor, on the
// connection in use, is at most 2R + MinTolerance/2 old (what a leader
// renewing every R has), or once the wait's renewal still in flight was
// answered (it may be the one that completes a fresh chain, and any write
// sent before its answer could not be the Y of its chain), or after at most
// two more writes complete a newer chain (its renewals ran late: the pair
// the renew loop would send now); otherwise it settles. warm says which. (Acks are per connection:
// after a reconnect only a chain on the new connection counts here,
// although the lease may still run from an older one.)
func (e *Elector) ready(ctx context.Context, sess *zk.Session, node string, tm lease.Timing, gap time.Duration, anchor func() time.Time) (warm bool, err error) {
	if on, _ := e.warmState(); on || e.cfg.WarmStandby {
		pending := e.warmDone // the wait's renewal, maybe still in flight
		e.warmDone = nil
		for writes := 0; ; {
			acks := acksOn(sess)
			if a := Anchor(acks, gap); !a.IsZero() && time.Since(a) <= 2*tm.Renew+lease.MinTolerance/2 {
				return true, nil
			}
			if pending != nil {
				// A renewal of the wait still in flight is answered before
				// any write we could send now (one session's requests are
				// answered in order) and may complete a fresh chain, or be
				// its X: wait for it rather than send a write that could
				// not be the Y of that chain, then judge again.
				select {
				case <-pending:
				case <-ctx.Done():
					return false, ctx.Err()
				}
				pending = nil
				continue
			}
			// A write now moves the anchor when it is the Y of a chain, or
			// the X of one (a gap after the newest answer) that a Y completes.
			now := time.Now()
			if writes == 2 || len(acks) == 0 || !renewNow(acks, gap, now) && now.Sub(acks[len(acks)-1].Answered) < gap {
				break
			}
			ok, err := confirm(ctx, sess, node)
			if err != nil {
				return false, err
			}
			if !ok {
				return false, ErrNodeDeleted
			}
			writes++
		}
	}
	return false, e.settle(ctx, sess, node, tm, gap, anchor)
}

// acksOn returns the session's acks over the connection in use.
func acksOn(sess *zk.Session) []zk.Ack {
	conn := sess.Conn()
	var acks []zk.Ack
	for _, a := range sess.Acks() {
		if a.Conn == conn {
			acks = append(acks, a)
		}
	}
	return acks
}

// settle renews until the lease runs from a write sent after the win: a
// first write (Z), one a gap after its answer (X), one right after that
// (Y). An older chain (of the writes that joined the election) may still
// be valid, but would leave a new leader little of its lease.
func (e *Elector) settle(ctx context.Context, sess *zk.Session, node string, tm lease.Timing, gap time.Duration, anchor func() time.Time) error {
	start := time.Now()
	for {
		ok, err := confirm(ctx, sess, node)
		if err != nil {
			return err
		}
		if !ok {
			return ErrNodeDeleted
		}
		if !anchor().Before(start) {
			return nil
		}
		acks := sess.Acks()
		if renewNow(acks, gap, time.Now()) {
			continue
		}
		wait := tm.Renew
		if len(acks) > 0 {
			wait = time.Until(acks[len(acks)-1].Answered.Add(tm.Renew))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// watch returns why the leadership ended. It makes no ZooKeeper call itself:
// renewals and the watch on our znode run in goroutines that report over
// channels, so however long any call blocks, the loop only selects and ends
// leadership when the lease runs out by the clock.
func (e *Elector) watch(ctx context.Context, sess *zk.Session, node string, tm lease.Timing, gap time.Duration, deadline func() time.Time, done <-chan struct{}) error {
	wctx, stop := context.WithCancel(ctx)
	defer stop()

	gone := make(chan error, 1)
	report := func(err error) {
		select {
		case gone <- err:
		default:
		}
	}
	full := make(chan struct{}, 1)
	go e.renewLoop(wctx, sess, node, true, tm, gap, full, report)
	go e.watchNode(wctx, sess, node, report)

	timer := time.NewTimer(tm.Lease)
	defer timer.Stop()
	_, stateChanged := sess.State()
	for {
		// Check the clock first: after a pause every case may be ready at once.
		left := time.Until(deadline())
		if left <= 0 {
			return ErrLeaseExpired
		}
		timer.Reset(left)
		select {
		case <-done:
			return ErrReleased
		case <-ctx.Done():
			return stopCause(ctx)
		case <-sess.Done():
			return ErrSessionExpired
		case err := <-gone:
			return err
		case <-stateChanged:
			var st zk.State
			st, stateChanged = sess.State()
			if st != zk.StateConnected {
				continue
			}
			// Reconnected within the session: the server may have granted
			// another timeout (the gap stays: tick <= the smaller one / 2).
			if t := sess.Timeout(); t != tm.Session {
				ntm, err := e.timing(t)
				if err != nil || tm.Lease > ntm.Max {
					// Reported as a lease expiry (errors.Is matches both).
					return fmt.Errorf("%w: %w: lease %v, session timeout %v (was %v), demote budget %v",
						ErrLeaseExpired, ErrTimeoutShrunk, tm.Lease, t, tm.Session, tm.Budget)
				}
			}
			// Make sure our znode survived and is still first.
			select {
			case full <- struct{}{}:
			default:
			}
		case <-timer.C:
		}
	}
}

// stopCause is why Run's context ended: the cause its caller gave, or
// ErrStopped when it gave none.
func stopCause(ctx context.Context) error {
	if c := context.Cause(ctx); c != nil && c != ctx.Err() {
		return c
	}
	return ErrStopped
}

// renewLoop renews the lease until ctx ends: each renewal is a write
// (confirm); a pair (X, then Y at once) every renew interval keeps the
// anchor within two intervals of now. After a reconnect (full) it renews at
// once and, in fair mode, checks that we are still first. A waiting
// candidate (leader false) runs it too, writing without the read after it;
// it reports a renewal that found node gone.
//
// In fair mode with Config.WarmStandby a leader's first renewal rewrites
// its znode's data instead of checking its version (announce): the only
// candidate watching our znode is the one behind us, which moved up to next
// in line when we won without anything telling it, and must start its chain.
func (e *Elector) renewLoop(ctx context.Context, sess *zk.Session, node string, leader bool, tm lease.Timing, gap time.Duration, full <-chan struct{}, report func(error)) {
	check := false
	announcing := leader && e.cfg.Mode == Fair && e.cfg.WarmStandby
	next := time.Now()
	if acks := sess.Acks(); len(acks) > 0 {
		next = acks[len(acks)-1].Answered.Add(tm.Renew)
	}
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-full:
			check = true
		case <-t.C:
		}
		if ctx.Err() != nil {
			return // stopped while a renewal was due: send none
		}
		// An answer to a request sent more than a lease ago cannot help
		// any more: give up on it so that the next renewal tries afresh.
		// A waiting candidate's renewal is not abandoned when its loop is
		// stopped (it won, say): its answer still goes into the session's
		// Acks, and may complete the chain the win takes its anchor from.
		parent := ctx
		if !leader {
			parent = context.WithoutCancel(ctx)
		}
		rctx, cancel := context.WithTimeout(parent, tm.Lease)
		var ok bool
		var err error
		switch {
		case announcing:
			ok, err = e.announce(rctx, sess, node)
		case leader:
			ok, err = confirm(rctx, sess, node)
		default:
			ok, err = touch(rctx, sess, node)
		}
		if err == nil && ok && check && e.cfg.Mode == Fair {
			var kids []string
			if kids, err = sess.Children(rctx, e.cfg.Dir); err == nil {
				order := sortCandidates(kids)
				ok = len(order) > 0 && e.cfg.Dir+"/"+order[0] == node
			}
		}
		cancel()
		if err == nil && !ok {
			report(ErrNodeDeleted)
			return
		}
		if err == nil {
			check, announcing = false, false
			if leader && testHookRenewed != nil {
				testHookRenewed()
			}
		}
		next = time.Now().Add(tm.Renew)
		if acks := sess.Acks(); err == nil && len(acks) > 0 {
			if now := time.Now(); renewNow(acks, gap, now) {
				next = now
			} else {
				next = acks[len(acks)-1].Answered.Add(tm.Renew)
			}
		}
		t.Reset(time.Until(next))
	}
}

// watchNode watches our znode until ctx ends and reports its deletion, so
// that an operator deleting it ends leadership at once. It sets the watch
// again after a data change and after a failed call (once the session is
// connected again).
func (e *Elector) watchNode(ctx context.Context, sess *zk.Session, node string, report func(error)) {
	for ctx.Err() == nil {
		ok, _, ch, err := sess.ExistsW(ctx, node)
		switch {
		case err == nil && !ok:
			report(ErrNodeDeleted)
			return
		case err == nil:
			select {
			case ev := <-ch:
				if ev.Type == zk.EventNodeDeleted {
					report(ErrNodeDeleted)
					return
				}
				if ev.Type == zk.EventNotWatching {
					sleep(ctx, 100*time.Millisecond) // no tight loop if it persists
				}
				// Changed, or not watching any more: watch again.
			case <-ctx.Done():
				return
			}
		case sess.Err() != nil:
			return // the session is over; watch reports that
		default:
			if waitConnected(ctx, sess) != nil {
				return
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
}
