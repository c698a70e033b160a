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
//     (Config.DemoteBudget) after the lease ends. With
//     Config.TakeOverAtDeadline a successor can be elected earlier, but
//     not before anchor + Lease + D + T/20 by its own clock (takeover.go).
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
// the term, by an operator, which the watch on it reports, or with
// Config.TakeOverAtDeadline by the successor once the deadline of our
// newest heartbeat passed, when the lease runs from heartbeats only). The fresh
// chain was only ever about liveness: an old anchor leaves little lease.
//
// Assumed: the ZooKeeper leader pings every tick/2; tick is Config.TickTime
// or, unknown, at most T/2 (ZooKeeper's default minSessionTimeout is two
// ticks; a server configured with a lower minimum breaks the bound unless
// TickTime says so); clock rates on this host and on the ZooKeeper leader
// within ρ of each other (with Config.TakeOverAtDeadline also between this
// host and the successor's) (steps do not matter: only durations measured on
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
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

// Mode selects the election recipe (cluster's election modes).
type Mode = cluster.ElectionMode

// Election modes.
const (
	Fair   = cluster.Fair
	Unfair = cluster.Unfair
)

// Why a leadership ended; context.Cause of the leadership context is one
// of these: cluster's reasons, in ZooKeeper's words.
var (
	ErrLeaseExpired   = cluster.Reason(cluster.ErrLeaseExpired, "election: lease expired (no answer from zookeeper in time)")
	ErrSessionExpired = cluster.Reason(cluster.ErrSessionExpired, "election: zookeeper session expired")
	ErrNodeDeleted    = cluster.Reason(cluster.ErrEntryDeleted, "election: election znode deleted")
	ErrStopped        = cluster.Reason(cluster.ErrStopped, "election: stopped")
	ErrReleased       = cluster.Reason(cluster.ErrReleased, "election: released by the callback")
	// ErrLeaseTooShort: the lease that fits the negotiated session timeout
	// and the demote budget leaves no tolerance; the elector stays out of
	// the election.
	ErrLeaseTooShort = cluster.Reason(cluster.ErrLeaseTooShort, "election: lease too short")
	// ErrTimeoutShrunk: a reconnect negotiated a session timeout the lease
	// no longer fits.
	ErrTimeoutShrunk = errors.New("election: the session timeout negotiated on reconnect no longer fits the lease")
)

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
	// ended, to stop the service (controller.DemoteBudget).
	DemoteBudget time.Duration
	// WarmStandby keeps a credit chain on the candidate that would lead
	// next (fair: the one next in line; unfair: every candidate) while it
	// waits, so that it leads at once when it wins instead of renewing for
	// a renew interval first (see Warm). It costs the waiting candidate
	// the renewals a leader sends. false: only a candidate told Warm(true)
	// keeps a chain.
	WarmStandby bool
	// TakeOverAtDeadline (fair mode only) makes every renewal a heartbeat
	// the successor can time, and has the candidate next in line delete the
	// lowest znode once its heartbeat stood still past the deadline that
	// znode's owner published: the owner has demoted by its own lease by
	// then (docs/safety.md, "Taking over at the leader's own deadline").
	// The lease then runs from the heartbeats only.
	TakeOverAtDeadline bool
	// FenceFirst (fair mode only) makes every renewal a heartbeat, as
	// TakeOverAtDeadline does, and has the candidate next in line ask
	// FenceFirst.ProveOut to fence a leader whose heartbeat stood still
	// for FenceFirst.SuspectAfter; once that proved the leader out, the
	// candidate deletes its znode at the version it timed
	// (docs/safety.md, "Fencing first, then taking over").
	FenceFirst cluster.FenceFirst

	// testHooks, set by tests only, are this elector's failpoints (nil:
	// none).
	testHooks *testHooks
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
	// above it. Only Run's goroutine uses it.
	lastEpoch int64
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
	if cfg.TakeOverAtDeadline && cfg.Mode != Fair {
		return nil, errors.New("election: taking over at the leader's deadline needs fair mode")
	}
	if cfg.FenceFirst.On() && (cfg.Mode != Fair || cfg.FenceFirst.SuspectAfter <= 0) {
		return nil, errors.New("election: fencing first needs fair mode and a positive suspect_after")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.testHooks == nil {
		cfg.testHooks = &testHooks{}
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
// (docs/safety.md, "Warm standbys").
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
			cluster.Sleep(ctx, backoff)
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
			cluster.Sleep(ctx, 5*time.Second)
		default:
			e.log.Warn("campaign interrupted", "err", err)
			cluster.Sleep(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
		}
	}
	return nil
}

// run is one campaign: what joining, waiting for our turn, leading and
// leaving share. campaign builds it; node is set once we have a znode,
// and lead sets tm and gap again (the session timeout may have changed
// while we waited) and anchor when we win. Nothing changes it once a
// leadership begins. Only Run's goroutine writes it; a waiting
// candidate's warmer renews with a copy of its own.
type run struct {
	sess *zk.Session
	// keep carries the calls whose outcome must be known even when the
	// candidacy is cancelled meanwhile (see campaign).
	keep context.Context
	node string        // our znode (unfair mode: the lock), once we have one
	tm   lease.Timing  // the lease arithmetic of sess's negotiated timeout
	gap  time.Duration // lease.Gap for tm: X goes at least this long after Z's answer
	// anchor is the lease's anchor (anchorFn), set when we win.
	anchor func() time.Time
	// woke is when the watch that led to the win fired (or the campaign
	// began). warmDone is the stop channel of the wait's warmer (see
	// warmer.stop), for ready.
	woke     time.Time
	warmDone <-chan struct{}
	// beatsFrom: with Config.TakeOverAtDeadline only heartbeats sent at or
	// after it count for the anchor (those of this campaign, or of this
	// term when its timing outgrew the deadline its heartbeats published).
	beatsFrom time.Time
}

// deadline is when the lease ends: Lease after the anchor.
func (r *run) deadline() time.Time { return r.anchor().Add(r.tm.Lease) }

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
	now := time.Now()
	r := &run{sess: sess, keep: keep, tm: tm, gap: lease.Gap(tm.Session, e.cfg.TickTime), woke: now, beatsFrom: now}
	var epoch int64
	deleted := new(atomic.Bool) // by the term (Leadership.Deleted)
	if e.cfg.Mode == Unfair {
		r.node, epoch, err = e.acquireLock(ctx, r)
		if r.node == "" {
			return err
		}
		defer func(czxid int64) {
			if !deleted.Load() {
				e.leave(sess, r.node, czxid)
			}
		}(epoch)
	} else {
		var czxid int64
		if r.node, czxid, err = e.join(ctx, r); err != nil {
			return err
		}
		defer func() {
			if !deleted.Load() {
				e.leave(sess, r.node, 0)
			}
		}()
		epoch, err = e.waitTurn(ctx, r, czxid)
		if err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // cancelled while the create was in flight: leave
	}
	e.lead(ctx, r, epoch, deleted, onElected)
	return nil
}
