// Package controller is failoverd's state machine: it joins the election
// while the local service is healthy, and when elected it reads the
// breadcrumb, fences the previous leader, writes its own breadcrumb and only
// then promotes the service. It demotes the service first whenever
// leadership ends, for any reason.
//
// # One owner
//
// Every piece of state belongs to one goroutine, the loop (Run). Health
// changes, operator requests, failover requests, elector wins and ends,
// and the results of long work (a takeover step, a hook) are events sent
// to it; the loop alone starts and stops candidacies, hooks and workers
// (reconcile), so hooks never overlap and nothing needs a lock. Status is
// served from an immutable snapshot the loop publishes.
//
// # Safety
//
//   - Nothing is promoted unless the breadcrumb is absent, names this very
//     leadership, or the node it names was fenced (or the operator allowed
//     running without fencing).
//   - The breadcrumb write is guarded by the election znode and is
//     compare-and-set; promotion happens only after it succeeded and after
//     Term.Valid still holds, so a paused process that wakes after its
//     lease ran out does not promote.
//   - The demote hook runs before anything else when leadership ends. The
//     breadcrumb is deleted only after a demote that succeeded and only on a
//     graceful end (stop, cede, manual failover); otherwise it stays so the
//     successor fences us. On a graceful end the term is kept, renewed,
//     until the demote is over (graceful.go).
package controller

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/healthcheck"
)

// Config describes this node and its hooks. Zero durations mean the
// package defaults.
type Config struct {
	Cluster  string
	NodeID   string
	Host     string
	AdminURL string
	Version  string
	// Instance is the random id of this process in the member record and
	// the breadcrumb's judgement of our own previous terms (NewInstance;
	// empty: New draws one). The Records backend must be given the same.
	Instance string
	// ServiceAddress is node.service_address: published in the member
	// record and, when set, in the breadcrumb (earlier versions refuse a
	// breadcrumb with it, so it is empty unless configured).
	ServiceAddress string
	// ElectionMode ("fair" or "unfair") is recorded in the cluster record
	// by the first node; a node whose mode differs refuses to join. Empty
	// skips the check.
	ElectionMode string

	// Priority is node.priority (nil: 1). 0: this node never campaigns,
	// so it never leads; it still checks health, follows the leader and
	// publishes its member record (with the priority, so that the CLI can
	// refuse a failover to it).
	Priority *int
	// PrePromote, when set, runs after fencing and before the breadcrumb
	// is written; a failure or timeout vetoes the promotion (the term is
	// given back and the node backs off). nil: no pre_promote hook.
	PrePromote *Hook
	// MaxLag is election.max_lag: how far behind the last leader position
	// or the most advanced candidate a node may be and still promote
	// (nil: no limit). See choice.go.
	MaxLag *int64
	// PreemptAfter is election.preempt_after: how long a standby of a
	// higher priority must have waited, healthy and eligible, before the
	// leader hands over to it. 0: never.
	PreemptAfter time.Duration

	// Promote and Demote are the hooks' commands; the controller runs them
	// through Deps.Hooks and needs them here for the demote budget.
	Promote Hook
	Demote  Hook
	// GracefulDemoteTimeout is service.demote.graceful_timeout: the demote
	// hook's timeout when this node ends a promoted term on purpose
	// (shutdown, cede, a handover), while it keeps the term (see
	// graceful.go). It is not part of the demote budget. 0, or less than
	// Demote.Timeout: Demote.Timeout.
	GracefulDemoteTimeout time.Duration
	// Follow, when set, makes the loop run the "follow" hook on this node
	// whenever it is not the leader and the promoted leader changes (see
	// follow.go). nil: no follow hook (the leader is still watched when
	// there is a position reader, for the stall rule).
	Follow *Follow

	// StallAfter is how long this node's replication position may stay
	// unchanged, while the leader's advanced, before a standby counts as
	// not following (Status.NotFollowing; see notfollowing.go). Default
	// 30s, and never less than three position intervals.
	StallAfter time.Duration

	// ShutdownTimeout bounds a graceful stop (default 30s, or the graceful
	// demote's timeout and kill grace plus 5s when that is longer; a
	// reload that sets none derives it again from its own config).
	ShutdownTimeout time.Duration
	// BackoffMin and BackoffMax bound the pause after a failed takeover
	// (fencing or promotion failed); it doubles per failure, with jitter.
	BackoffMin, BackoffMax time.Duration
	// PositionInterval is how often Deps.Position is read (default 1s;
	// see position.go).
	PositionInterval time.Duration

	// DemoteHoldoff is how long an operator demote (POST /v1/demote) keeps
	// this node out of the election (default 10s).
	DemoteHoldoff time.Duration
	// FailoverCooldown is election.failover_cooldown: for that long after
	// an automatic promotion the leader keeps its term although its health
	// fails (0: off). See pause.go.
	FailoverCooldown time.Duration
	// ConfigHash and ConfigLoadedAt are shown in Status (see there).
	ConfigHash     string
	ConfigLoadedAt time.Time

	// PauseWait bounds how long the startup demote waits for the first
	// report of the pause record (default 10s): a daemon restarted while
	// the cluster is paused leaves its service alone.
	PauseWait time.Duration
}

// Follow configures the follow hook.
type Follow struct {
	Hook Hook
	// NoLeaderAfter is how long without a promoted leader before the hook
	// runs once with no leader (reason no_leader); 0 never runs it.
	NoLeaderAfter time.Duration
}

// Package defaults of Config.
const (
	defaultShutdownTimeout = 30 * time.Second
	defaultBackoffMin      = time.Second
	defaultBackoffMax      = 30 * time.Second
	defaultDemoteHoldoff   = 10 * time.Second
)

// DefaultPriority is a node's priority when none is configured.
const DefaultPriority = 1

// DemoteOutcome is the answer to a demote request.
type DemoteOutcome struct {
	// Demoted is true only when a demote hook succeeded after the request
	// arrived and after the last promote hook started, and no term is left
	// running that could promote again.
	Demoted bool
	// Epoch is this node's current or last leadership (of an earlier run
	// of this node, once its service was demoted: see adoption).
	Epoch int64
	Err   error
}

// Controller runs one node. Create it with New, feed health changes to
// HealthChanged, and call Run.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	el       Elector
	rec      Records
	hooks    Hooks
	fence    Fencer
	prover   Fencer // the proving methods only (fencing first); nil: none
	probe    Prober
	metrics  Metrics
	position PositionReader // nil: no service.position
	home     Home           // the cluster record and epoch this node remembers
	instance string         // random id of this process, in the member record
	priority int            // Config.Priority with its default

	events     chan event
	healthPoke chan struct{} // health changed (value in healthNow)
	healthNow  atomic.Int64
	// healthErr is the error of the last health change.
	healthErr  atomic.Pointer[string]
	memberPoke chan struct{} // the snapshot changed: publish the member record
	loopDone   chan struct{} // closed when the loop returned
	snap       atomic.Pointer[snapshot]
	runOnce    sync.Once
	// budget is DemoteBudget at start, which sized the elector's lease: a
	// reload may lower the demote budget, never raise it above this, and
	// every term keeps this one (a later reload may raise the demote
	// timeout back up to it while the term runs).
	budget time.Duration
	// The reloadable settings goroutines other than the loop need
	// (reload.go): whether a won term reads the leader position, and the
	// position reader with its interval.
	readsLag  atomic.Bool
	positions atomic.Pointer[positionSource]

	l loop // only the loop goroutine (Run) touches it
}

// snapshot is what the loop last published.
type snapshot struct {
	status   Status
	term     cluster.Term  // nil between terms
	budget   time.Duration // the term's DemoteBudget
	decision decision      // the loop's decision that status shows
}

// defaultShutdown is the ShutdownTimeout of a cfg that sets none: 30s, or
// the graceful demote's timeout and kill grace plus the finish when that
// is longer. New and a reload both derive it from the config they get.
func defaultShutdown(cfg Config) time.Duration {
	return max(defaultShutdownTimeout, gracefulTimeout(cfg)+killGrace(cfg.Demote)+finishTimeout)
}

// New builds a controller.
func New(cfg Config, deps Deps) (*Controller, error) {
	if deps.Elector == nil || deps.Records == nil || deps.Hooks == nil || deps.Metrics == nil {
		return nil, errors.New("controller: elector, records, hooks and metrics are required")
	}
	if cfg.Cluster == "" || cfg.NodeID == "" {
		return nil, errors.New("controller: cluster and node id are required")
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = defaultShutdown(cfg)
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = defaultBackoffMin
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(defaultBackoffMax, cfg.BackoffMin)
	}
	if cfg.DemoteHoldoff <= 0 {
		cfg.DemoteHoldoff = defaultDemoteHoldoff
	}
	if cfg.PauseWait <= 0 {
		cfg.PauseWait = defaultPauseWait
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Instance == "" {
		cfg.Instance = NewInstance()
	}
	priority := DefaultPriority
	if cfg.Priority != nil {
		priority = *cfg.Priority
	}
	if priority < 0 {
		return nil, fmt.Errorf("controller: priority must be >= 0, got %d", priority)
	}
	c := &Controller{
		cfg:        cfg,
		log:        logger.With("component", "controller"),
		el:         deps.Elector,
		rec:        deps.Records,
		hooks:      deps.Hooks,
		fence:      deps.Fencer,
		prover:     deps.Prover,
		probe:      deps.Probe,
		metrics:    deps.Metrics,
		position:   deps.Position,
		home:       deps.Home,
		instance:   cfg.Instance,
		priority:   priority,
		events:     make(chan event, 64),
		healthPoke: make(chan struct{}, 1),
		memberPoke: make(chan struct{}, 1),
		loopDone:   make(chan struct{}),
		budget:     DemoteBudget(cfg),
	}
	if c.home == nil {
		c.home = noHome{}
	}
	c.readsLag.Store(cfg.MaxLag != nil)
	c.positions.Store(&positionSource{reader: deps.Position, interval: cfg.PositionInterval})
	c.l = loop{
		state:   StateInitializing,
		since:   time.Now(),
		primary: primaryTracker{mayBePrimary: true}, // until the startup demote worked
		follow:  followState{due: true, reason: reasonFollowStartup},
	}
	c.publish()
	return c, nil
}

// NewInstance draws a random process id (Config.Instance).
func NewInstance() string {
	var b [8]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// send hands ev to the loop; false once the loop ended.
func (c *Controller) send(ev event) bool {
	select {
	case c.events <- ev:
		return true
	case <-c.loopDone:
		return false
	}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// HealthChanged is the health monitor's callback; it never blocks.
func (c *Controller) HealthChanged(from, to healthcheck.State, err error) {
	c.log.Info("health changed", "from", from.String(), "to", to.String(), "err", err)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	c.healthErr.Store(&msg)
	c.healthNow.Store(int64(to))
	poke(c.healthPoke)
}

// Status reports this node's view of itself, without waiting for the loop.
func (c *Controller) Status() Status {
	s := c.snap.Load()
	st := s.status
	if err := c.el.Refusal(); err != nil {
		// The elector stays out (the lease does not fit): the node is no
		// candidate, whatever its candidacy says. Its member record must
		// not say standby, or the rules at a win and preemption would
		// hand the leadership to a node that can never take it.
		if st.LastError == "" {
			st.LastError = err.Error()
		}
		if st.State == StateStandby {
			st.State = StateOut
			st.NotLeading = NotLeadingJoinRefused + ": the elector stays out: " + err.Error()
		}
	}
	if s.term != nil {
		if exp, err := s.term.Expiry(); err == nil {
			st.LeaseRemaining = max(0, (time.Until(exp) - s.budget).Seconds())
		}
	}
	st.Connected = c.rec.Connected()
	st.ZKConnected = st.Connected
	if !st.Connected && st.State != StateLeader && st.State != StateStopped && !mayBePrimary(st.NotLeading) {
		st.NotLeading = NotLeadingDisconnected + ": no session with the coordination service"
	}
	if st.Position != nil {
		v := *st.Position // the loop's own stays unshared
		st.Position = &v
	}
	return st
}

// Demote is the server side of the rpc fencer and of POST /v1/demote: the
// local service stops acting as primary now, and this node stays out of the
// election for DemoteHoldoff. A term in progress ends (it demotes as it
// ends); otherwise the demote hook runs, also when the service should
// already be standby (it may have been restarted as primary behind our
// back). ctx bounds the wait only: the hook is never cut short by it.
func (c *Controller) Demote(ctx context.Context, reason string) DemoteOutcome {
	c.log.Warn("demote requested", "reason", reason)
	reply := make(chan DemoteOutcome, 1)
	if !c.send(demoteReq{reason: reason, reply: reply}) {
		return DemoteOutcome{Epoch: c.snap.Load().status.Epoch, Err: errors.New("controller: stopped")}
	}
	select {
	case o := <-reply:
		return o
	case <-ctx.Done():
		return DemoteOutcome{Epoch: c.snap.Load().status.Epoch, Err: errors.New("demote still running: " + ctx.Err().Error())}
	}
}

// Cede leaves leadership gracefully (demote, then delete the breadcrumb) and
// stays out of the election for d.
func (c *Controller) Cede(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return errors.New("controller: cede duration must be > 0")
	}
	c.log.Info("ceding", "for", d.String())
	reply := make(chan error, 1)
	if !c.send(cedeReq{d: d, reply: reply}) {
		return errors.New("controller: stopped")
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run drives the node until ctx ends, then stops gracefully: demote, delete
// the breadcrumb if that worked, leave the election. The caller closes the
// coordination session after Run returned. Run may be called once.
func (c *Controller) Run(ctx context.Context) error {
	err := errors.New("controller: Run called twice")
	c.runOnce.Do(func() { err = c.run(ctx) })
	return err
}

func (c *Controller) run(ctx context.Context) error {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.publishMembers(bg) }()
	go func() { defer wg.Done(); c.watchFailover(bg) }()
	if c.cfg.Follow != nil || c.position != nil {
		wg.Add(1)
		go func() { defer wg.Done(); c.watchLeader(bg) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); c.watchPause(bg) }()
	if c.position != nil {
		wg.Add(1)
		go func() { defer wg.Done(); c.readPositions(bg) }()
	}
	defer func() {
		close(c.loopDone)
		stopBG()
		wg.Wait()
	}()
	return c.loop(ctx, bg)
}
