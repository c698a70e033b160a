// Package controller is failoverd's state machine: it joins the election
// while the local service is healthy, and when elected it reads the
// breadcrumb, fences the previous leader, writes its own breadcrumb and only
// then promotes the service. It demotes the service first whenever
// leadership ends, for any reason.
//
// # Safety
//
//   - Nothing is promoted unless the breadcrumb is absent, names this very
//     leadership, or the node it names was fenced (or the operator allowed
//     running without fencing).
//   - The breadcrumb write is guarded by the election znode and is
//     compare-and-set; promotion happens only after it succeeded and after
//     Leadership.Valid still holds, so a paused process that wakes after its
//     lease ran out does not promote.
//   - The demote hook runs before anything else when leadership ends. The
//     breadcrumb is deleted only after a demote that succeeded and only on a
//     graceful end (stop, cede, manual failover); otherwise it stays so the
//     successor fences us.
package controller

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/healthcheck"
	"github.com/failoverd/failoverd/internal/proc"
	"github.com/failoverd/failoverd/zk"
)

// Hook is a command run on promotion or demotion.
type Hook struct {
	Argv    []string
	Timeout time.Duration
	// KillGrace is how long the hook may take to exit after SIGTERM (0:
	// lease.KillGrace). The promote's and the demote's are part of the
	// demote budget (see DemoteBudget).
	KillGrace time.Duration
}

// Fencer fences a target; *fencer.Chain implements it.
type Fencer interface {
	Fence(ctx context.Context, t fencer.Target) (method string, err error)
}

// Config describes this node and its hooks.
type Config struct {
	Cluster  string
	NodeID   string
	Host     string
	AdminURL string
	Root     string // znode root, e.g. /failoverd
	Version  string
	// ElectionMode ("fair" or "unfair") is recorded in the cluster record
	// by the first node; a node whose mode differs refuses to join. Empty
	// skips the check.
	ElectionMode string

	Promote Hook
	Demote  Hook

	// ShutdownTimeout bounds a graceful stop (default 30s).
	ShutdownTimeout time.Duration
	// BackoffMin and BackoffMax bound the pause after a failed takeover
	// (fencing or promotion failed); it doubles per failure, with jitter.
	BackoffMin, BackoffMax time.Duration
	// DemoteHoldoff is how long an operator demote (POST /v1/demote) keeps
	// this node out of the election (default 10s).
	DemoteHoldoff time.Duration
	Logger        *slog.Logger
}

// Why leadership ended, as decided by the controller (label values).
const (
	reasonShutdown  = "shutdown"
	reasonUnhealthy = "unhealthy"
	reasonOperator  = "operator_demote"
	reasonCeded     = "ceded"
	reasonFailover  = "failover_handoff"
	reasonStuckHook = "hook_unkillable"
	reasonRefused   = "join_refused"
)

// graceful reports whether a leadership end lets us delete the breadcrumb
// (after a successful demote): the successor then needs no fencing.
func graceful(reason string) bool {
	return reason == reasonShutdown || reason == reasonCeded || reason == reasonFailover
}

// Controller runs one node. Create it with New, feed health changes to
// HealthChanged, and call Run.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	client  *zk.Client
	el      *election.Elector
	fence   Fencer
	metrics Metrics
	bcPath  string

	wake          chan struct{} // health changed
	memberChanged chan struct{}
	hookMu        sync.Mutex // hooks never overlap
	// cedeMu orders every change of the elector's cede deadline (cede,
	// the start and the end of a stand-aside), so that ending a
	// stand-aside can never cut a cede made meanwhile (see endStandAside).
	cedeMu   sync.Mutex
	instance string // random id of this process, in the member record

	mu         sync.Mutex
	state      State
	since      time.Time
	health     healthcheck.State
	epoch      int64
	lastErr    string
	leadership *election.Leadership
	endReason  string        // set before we end a leadership on purpose
	inTerm     bool          // a leadership callback is running
	termOver   chan struct{} // closed when the running leadership callback returns
	failures   int
	cededUntil time.Time // operator cede, demote holdoff, backoff
	primary    primaryTracker
	stuck      *stuckHook    // a hook still alive after SIGKILL, or reaped but not yet followed by a demote
	stopped    chan struct{} // closed when Run returned
	// join is the verdict of the checks that must pass before we campaign
	// (duplicate node id, election mode); joinChecked is false until the
	// first verdict.
	joinErr     error
	joinChecked bool
	joinProblem string // what the join checks last put in lastErr
	// A manual failover to another node: we stand aside until
	// standAsideUntil (monotonic) or until the target is promoted.
	standAsideKey   string
	standAsideUntil time.Time
}

// New wires a controller. fence may be nil only when running without
// fencing was explicitly allowed.
func New(cfg Config, client *zk.Client, el *election.Elector, fence Fencer, m Metrics) (*Controller, error) {
	if client == nil || el == nil || m == nil {
		return nil, errors.New("controller: client, elector and metrics are required")
	}
	if cfg.Cluster == "" || cfg.NodeID == "" || cfg.Root == "" {
		return nil, errors.New("controller: cluster, node id and root are required")
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = time.Second
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(30*time.Second, cfg.BackoffMin)
	}
	if cfg.DemoteHoldoff <= 0 {
		cfg.DemoteHoldoff = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	crand.Read(b[:])
	return &Controller{
		instance:      hex.EncodeToString(b[:]),
		primary:       primaryTracker{mayBePrimary: true}, // until the startup demote worked
		cfg:           cfg,
		log:           cfg.Logger.With("component", "controller"),
		client:        client,
		el:            el,
		fence:         fence,
		metrics:       m,
		bcPath:        cluster.Layout{Root: cfg.Root, Cluster: cfg.Cluster}.Breadcrumb(),
		wake:          make(chan struct{}, 1),
		memberChanged: make(chan struct{}, 1),
		stopped:       make(chan struct{}),
		state:         StateInitializing,
		since:         time.Now(),
	}, nil
}

// HealthChanged is the health monitor's callback; it never blocks.
func (c *Controller) HealthChanged(from, to healthcheck.State, err error) {
	c.mu.Lock()
	c.health = to
	c.mu.Unlock()
	c.log.Info("health changed", "from", from.String(), "to", to.String(), "err", err)
	c.poke(c.wake)
	c.poke(c.memberChanged)
}

func (c *Controller) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *Controller) healthy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health == healthcheck.Healthy
}

func (c *Controller) setState(to State, reason string) {
	c.mu.Lock()
	from := c.state
	if from == to {
		c.mu.Unlock()
		return
	}
	c.state, c.since = to, time.Now()
	epoch := c.epoch
	c.mu.Unlock()
	c.log.Info("state transition", "from", string(from), "to", string(to), "reason", reason, "epoch", epoch)
	c.metrics.StateChanged(from, to)
	c.poke(c.memberChanged)
}

func (c *Controller) setErr(err error) {
	c.mu.Lock()
	c.lastErr = err.Error()
	c.mu.Unlock()
}

// Status reports this node's view of itself.
func (c *Controller) Status() Status {
	c.mu.Lock()
	s := Status{
		Cluster: c.cfg.Cluster, NodeID: c.cfg.NodeID, Host: c.cfg.Host, AdminURL: c.cfg.AdminURL,
		State: c.state, Health: c.health.String(), Epoch: c.epoch, Since: c.since,
		LastError: c.lastErr, Version: c.cfg.Version, Instance: c.instance,
	}
	l := c.leadership
	c.mu.Unlock()
	if err := c.el.Refusal(); err != nil && s.LastError == "" {
		s.LastError = err.Error() // the elector stays out: the lease does not fit
	}
	s.Role = "standby"
	if s.State == StateLeader {
		s.Role = "leader"
	}
	if l != nil {
		s.LeaseRemaining = max(0, l.LeaseRemaining().Seconds())
	}
	if sess := c.client.Current(); sess != nil {
		st, _ := sess.State()
		s.ZKConnected = st == zk.StateConnected
	}
	return s
}

// Run drives the node until ctx ends, then stops gracefully: demote, delete
// the breadcrumb if that worked, leave the election, close the session.
func (c *Controller) Run(ctx context.Context) error {
	c.setState(StateOut, "startup")

	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.publishMember(bg) }()
	go func() { defer wg.Done(); c.watchFailover(bg) }()
	defer func() {
		stopBG()
		wg.Wait()
		c.client.Close()
		c.setState(StateStopped, reasonShutdown)
		close(c.stopped)
	}()
	// Whatever the service did before we started, it is not primary now;
	// until that is so, the node stays out of the election.
	if c.startupDemote(ctx) {
		wg.Add(1)
		go func() { defer wg.Done(); c.adoptPreviousTermLoop(bg) }()
	}

	var runCancel context.CancelFunc
	var runDone chan struct{}
	var deadline <-chan time.Time // set once a graceful stop began
	cedeTimer := time.NewTimer(time.Hour)
	defer cedeTimer.Stop()
	for {
		stopping := ctx.Err() != nil
		blocked := c.joinBlocked()
		if want := c.healthy() && !stopping && blocked == ""; want && runDone == nil {
			runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			runCancel, runDone = cancel, make(chan struct{})
			done := runDone
			c.setState(StateStandby, "healthy")
			go func() {
				defer close(done)
				if err := c.el.Run(runCtx, c.onElected); err != nil {
					c.log.Error("election stopped", "err", err)
				}
			}()
		} else if !want && runDone != nil && runCancel != nil {
			reason := reasonUnhealthy
			switch {
			case stopping:
				reason = reasonShutdown
			case c.healthy():
				reason = blocked
			}
			c.mu.Lock()
			c.endReason = reason
			c.mu.Unlock()
			c.log.Info("leaving the election", "reason", reason)
			runCancel()
			runCancel = nil
		}
		if stopping && runDone == nil {
			return nil
		}
		var cedeOver <-chan time.Time
		if runDone != nil && !stopping {
			if until := c.cededUntilTime(); time.Now().Before(until) {
				cedeTimer.Reset(time.Until(until))
				cedeOver = cedeTimer.C
			} else if c.currentState() == StateOut {
				c.setState(c.idleState(), "back in the election")
			}
		}
		if stopping && deadline == nil {
			t := time.NewTimer(c.cfg.ShutdownTimeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-c.wake:
		case <-cedeOver:
		case <-runDone:
			runDone = nil
			c.setState(StateOut, "left the election")
		case <-ctx.Done():
		case <-deadline:
			c.log.Error("graceful stop timed out; closing the session (the successor fences us if needed)", "timeout", c.cfg.ShutdownTimeout.String())
			return fmt.Errorf("controller: graceful stop took longer than %v", c.cfg.ShutdownTimeout)
		}
	}
}

// joinBlocked returns why this node may not campaign now (a reason label),
// or "" when it may.
func (c *Controller) joinBlocked() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stuck != nil:
		return reasonStuckHook
	case !c.joinChecked || c.joinErr != nil:
		return reasonRefused
	}
	return ""
}

// startupDemote runs the demote hook until it succeeds (true) or ctx ends
// (false). A service that comes back from a crash may still believe it is
// primary, and nobody else would stop it: the breadcrumb names the
// successor's term, not ours. So a node whose startup demote failed does
// not join the election (it would report itself a standby); it says why in
// its status and retries with a growing back-off.
func (c *Controller) startupDemote(ctx context.Context) bool {
	var msg string
	for failures := 0; ; failures++ {
		err := c.runHook(context.WithoutCancel(ctx), "demote", c.cfg.Demote, "startup", 0, nil)
		if err == nil {
			if failures > 0 {
				c.log.Info("startup demote succeeded; joining the election", "failures", failures)
				c.mu.Lock()
				if c.lastErr == msg {
					c.lastErr = ""
				}
				c.mu.Unlock()
			}
			return true
		}
		msg = "startup demote failed; out of the election until it succeeds (the service may still act as primary): " + err.Error()
		d := c.retryDelay(failures)
		c.log.Error("startup demote failed; the service may still act as primary, so this node stays out of the election and retries",
			"err", err, "retry_in", d.String(), "failures", failures+1)
		c.setErr(errors.New(msg))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
	}
}

// retryDelay is the pause before retrying a local step that failed
// failures times before (BackoffMin doubling up to BackoffMax, no jitter:
// only this node is waiting on it).
func (c *Controller) retryDelay(failures int) time.Duration {
	return min(c.cfg.BackoffMin<<min(failures, 16), c.cfg.BackoffMax)
}

// onElected runs one leadership: fence, write the breadcrumb, promote, and
// demote when it ends. It runs on the elector's goroutine for that term.
func (c *Controller) onElected(lctx context.Context, l election.Leadership) {
	wonAt := time.Now()
	termOver := make(chan struct{})
	c.mu.Lock()
	c.inTerm, c.leadership, c.epoch, c.endReason, c.termOver = true, &l, l.Epoch, "", termOver
	c.mu.Unlock()
	c.metrics.ElectionWon()

	defer func() {
		c.mu.Lock()
		c.inTerm, c.leadership, c.termOver = false, nil, nil
		c.mu.Unlock()
		close(termOver) // Demote callers read the outcome from c.primary
		c.metrics.Leader(false, l.Epoch)
		c.setState(c.idleState(), "leadership over")
	}()

	if why := c.joinBlocked(); why != "" {
		// Won just before Run could leave the election (a hook is stuck, or
		// a duplicate or mismatched node appeared): give it back at once.
		c.log.Warn("elected while this node may not lead; giving leadership back", "why", why, "epoch", l.Epoch)
		return
	}
	demote := c.cfg.Demote
	if err := checkDemoteBudget(c.cfg, l); err != nil {
		c.log.Error("refusing to lead: the demote hook cannot finish before a successor may be elected", "epoch", l.Epoch, "err", err)
		c.setErr(err)
		c.backoff("demote_budget")
		return
	}

	c.setState(StateFencing, "elected")
	prev, ok := c.takeOver(lctx, l)
	if !ok {
		return
	}
	guard := breadcrumb.Guard{Session: l.Session, Election: l.Path}
	if err := l.Valid(); err != nil || lctx.Err() != nil {
		c.log.Warn("leadership lost before promotion", "epoch", l.Epoch, "err", errors.Join(err, context.Cause(lctx)))
		return
	}
	// No Instance yet: failoverd 1.x refuses breadcrumbs with fields it does
	// not know, so during a rolling upgrade an old node elected after us would
	// call ours unreadable and refuse to promote. ownPreviousTerm does not
	// need it (the admin URL already tells an earlier run of this node from a
	// live duplicate); write it once every supported version reads it.
	rec := breadcrumb.Record{NodeID: c.cfg.NodeID, Host: c.cfg.Host, AdminURL: c.cfg.AdminURL, Epoch: l.Epoch, Since: time.Now().UTC()}
	bcVersion, err := breadcrumb.Write(pauseBeforeBreadcrumb(lctx, c.log, l.Epoch), guard, c.bcPath, rec, prev.version)
	if err != nil {
		c.log.Warn("breadcrumb write failed; not promoting", "epoch", l.Epoch, "err", err)
		c.setErr(err)
		c.backoff("breadcrumb_write_failed")
		return
	}
	if err := l.Valid(); err != nil {
		c.log.Warn("lease ran out before promotion", "epoch", l.Epoch, "err", err)
		return
	}

	c.setState(StatePromoting, "fenced")
	// The promote may wait for the hook lock (a demote request's hook is
	// running): look at the leadership again once it is ours.
	stillLeading := func() error {
		if err := l.Valid(); err != nil {
			return err
		}
		return context.Cause(lctx)
	}
	err = c.runHookIf(lctx, stillLeading, "promote", c.cfg.Promote, "elected", l.Epoch, prev.record)
	if errors.Is(err, errNotStarted) {
		c.log.Warn("leadership lost while waiting to promote; promote not started", "epoch", l.Epoch, "err", err)
		return
	}
	if err != nil || lctx.Err() != nil || l.Valid() != nil {
		c.metrics.Promotion("failure")
		if errors.Is(err, proc.ErrUnkillable) {
			c.metrics.LeadershipLost(reasonStuckHook)
		}
		c.setState(StateDemoting, "promote failed")
		if derr := c.runHook(context.Background(), "demote", demote, "promote_failed", l.Epoch, nil); derr != nil {
			c.setErr(derr)
		}
		if err != nil {
			c.setErr(err)
			c.backoff("promote_failed")
		}
		return
	}
	c.metrics.Promotion("success")
	c.metrics.FailoverDuration(time.Since(wonAt))
	c.mu.Lock()
	// The takeover worked: whatever failure or refusal held it up is over.
	c.failures, c.lastErr = 0, ""
	c.mu.Unlock()
	c.setState(StateLeader, "promoted")
	c.metrics.Leader(true, l.Epoch)
	c.completeFailover(lctx, l)

	<-lctx.Done()

	// Demote before anything else.
	reason := c.lossReason(context.Cause(lctx))
	c.metrics.Leader(false, l.Epoch)
	c.metrics.LeadershipLost(reason)
	c.setState(StateDemoting, reason)
	derr := c.runHook(context.Background(), "demote", demote, reason, l.Epoch, nil)
	if derr != nil {
		c.setErr(derr)
	}
	if derr == nil && graceful(reason) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := breadcrumb.Delete(ctx, guard, c.bcPath, bcVersion); err != nil {
			c.log.Warn("breadcrumb not deleted; the successor will fence us", "err", err)
		} else {
			c.log.Info("breadcrumb deleted after a graceful demote", "epoch", l.Epoch)
		}
	}
}

type previous struct {
	record  *breadcrumb.Record // nil when there is nothing to fence
	version int32              // breadcrumb znode version read (-1 absent)
}

// takeOver reads the breadcrumb and fences the node it names. It returns
// false when we must not promote.
func (c *Controller) takeOver(lctx context.Context, l election.Leadership) (previous, bool) {
	rec, version, err := breadcrumb.Read(lctx, l.Session, c.bcPath)
	verdict := breadcrumb.Assess(rec, err, c.cfg.NodeID, l.Epoch)
	p := previous{version: version}
	switch verdict {
	case breadcrumb.Refuse:
		if lctx.Err() != nil {
			return p, false
		}
		var ce *breadcrumb.CorruptError
		if errors.As(err, &ce) {
			c.metrics.BreadcrumbUnreadable()
			c.log.Error("breadcrumb unreadable: refusing to promote", "err", err, "data", string(ce.Data))
		} else {
			c.log.Warn("cannot read the breadcrumb; not promoting", "err", err)
		}
		c.setErr(err)
		c.backoff("breadcrumb_unreadable")
		return p, false
	case breadcrumb.NothingToFence:
		if err == nil {
			p.record = &rec
		}
		return p, true
	}
	p.record = &rec
	own := c.ownPreviousTerm(rec)
	if rec.NodeID == c.cfg.NodeID && !own {
		// Our id, but another host or another process on this host: a
		// second node was configured with this id. Its service is not
		// ours; it must be fenced like any other.
		c.log.Error("the breadcrumb names this node id but another host or process: a second node uses this id; fencing it",
			"host", rec.Host, "admin_url", rec.AdminURL, "instance", rec.Instance, "target_epoch", rec.Epoch)
	}
	if own {
		// An earlier leadership of this very node (a restart, or a term that
		// ended without cleanup): its service is ours, so demoting it locally
		// is the fence; asking our own admin API would only make us step aside.
		if err := c.runHook(lctx, "demote", c.cfg.Demote, "fence_previous_term", rec.Epoch, nil); err != nil {
			c.metrics.FencingFailed()
			c.log.Error("demoting our own previous term failed: not promoting", "target_epoch", rec.Epoch, "err", err)
			c.setErr(err)
			c.backoff("fencing_failed")
			return p, false
		}
		c.log.Info("previous term of this node fenced by a local demote", "target_epoch", rec.Epoch)
		return p, true
	}
	t := fencer.Target{NodeID: rec.NodeID, Host: rec.Host, AdminURL: rec.AdminURL, Epoch: rec.Epoch}
	if c.fence == nil {
		c.log.Warn("promoting without fencing the previous leader (fencing.allow_none)", "target", rec.NodeID, "target_epoch", rec.Epoch)
		return p, true
	}
	start := time.Now()
	method, err := c.fence.Fence(lctx, t)
	if err != nil {
		if lctx.Err() == nil {
			c.metrics.FencingFailed()
			c.log.Error("fencing failed: not promoting", "target", rec.NodeID, "target_epoch", rec.Epoch, "err", err)
			c.setErr(err)
			c.backoff("fencing_failed")
		}
		return p, false
	}
	c.log.Info("previous leader fenced", "target", rec.NodeID, "target_epoch", rec.Epoch, "method", method, "duration_seconds", time.Since(start).Seconds())
	return p, true
}

// adoptPreviousTermLoop runs adoptPreviousTerm after a successful startup
// demote until it could read the breadcrumb (or a leadership began).
func (c *Controller) adoptPreviousTermLoop(ctx context.Context) {
	for ctx.Err() == nil && !c.adoptPreviousTerm(ctx) {
		sleepCtx(ctx, time.Second)
	}
}

// adoptPreviousTerm makes the epoch of our previous run's leadership this
// node's last epoch when the breadcrumb names it (ownPreviousTerm) and no
// leadership began since this process started. Call it only after a demote
// that succeeded: that demote stood that term's service down, so a fence
// of that epoch (the rpc fencer asks for epoch >= the breadcrumb's) is
// answered truthfully. Without it a node whose daemon restarted after a
// crash answers with epoch 0 and an rpc-only cluster can never fence it.
// It reports whether the breadcrumb could be read (or need not be).
func (c *Controller) adoptPreviousTerm(ctx context.Context) bool {
	c.mu.Lock()
	epoch := c.epoch
	c.mu.Unlock()
	if epoch != 0 {
		return true
	}
	sess, err := c.client.Session(ctx)
	if err != nil {
		return false
	}
	rec, _, err := breadcrumb.Read(ctx, sess, c.bcPath)
	if errors.Is(err, breadcrumb.ErrAbsent) {
		return true
	}
	if err != nil {
		return false
	}
	if !c.ownPreviousTerm(rec) {
		return true
	}
	c.mu.Lock()
	adopted := c.epoch == 0
	if adopted {
		c.epoch = rec.Epoch
	}
	c.mu.Unlock()
	if adopted {
		c.log.Info("the breadcrumb names an earlier run of this node, whose service is demoted now: answering fences of its epoch", "epoch", rec.Epoch)
	}
	return true
}

// ownPreviousTerm reports whether rec, a breadcrumb naming our node id, is
// a leadership whose service is the one our hooks drive, so that a local
// demote fences it (asking our own admin API would only make us step
// aside). That holds when rec was written
//   - by this very process (its instance id is ours), or
//   - on this host by a process that advertised our admin URL: no other
//     live process on this host can serve the address we serve now, so
//     that process is gone, and with our id, host and admin URL it was an
//     earlier run of this node (a restart; records of earlier versions,
//     without an instance id, are judged the same way).
//
// A live duplicate (another process with our node id) is never demoted
// locally: on another host the host differs, on this host it cannot listen
// on our admin URL; the join checks keep us out while it publishes its
// member record, and if it leads it is fenced like any other node.
func (c *Controller) ownPreviousTerm(rec breadcrumb.Record) bool {
	if rec.NodeID != c.cfg.NodeID || rec.Host != c.cfg.Host {
		return false
	}
	if rec.Instance != "" && rec.Instance == c.instance {
		return true
	}
	return rec.AdminURL == c.cfg.AdminURL
}

// backoff gives up this leadership and stays out for a growing, jittered
// delay so another candidate can try.
func (c *Controller) backoff(why string) {
	c.mu.Lock()
	c.failures++
	n := c.failures
	c.mu.Unlock()
	d := c.cfg.BackoffMin << min(n-1, 16)
	d = min(d, c.cfg.BackoffMax)
	d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	c.log.Warn("backing off before joining the election again", "why", why, "for", d.Round(time.Millisecond).String(), "failures", n)
	c.cede(d, "")
}

func (c *Controller) cede(d time.Duration, reason string) {
	c.cedeMu.Lock()
	defer c.cedeMu.Unlock()
	c.mu.Lock()
	if reason != "" {
		c.endReason = reason
	}
	if until := time.Now().Add(d); until.After(c.cededUntil) {
		c.cededUntil = until
	}
	c.mu.Unlock()
	c.el.Cede(d)
	c.poke(c.wake) // Run re-arms its end-of-cede timer
}

func (c *Controller) currentState() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *Controller) lossReason(cause error) string {
	c.mu.Lock()
	r := c.endReason
	c.mu.Unlock()
	if r != "" {
		return r
	}
	switch {
	case errors.Is(cause, election.ErrLeaseExpired):
		return "lease_expired"
	case errors.Is(cause, election.ErrSessionExpired):
		return "session_expired"
	case errors.Is(cause, election.ErrNodeDeleted):
		return "znode_deleted"
	case errors.Is(cause, election.ErrResigned):
		return reasonCeded
	case errors.Is(cause, election.ErrStopped):
		return reasonShutdown
	}
	return "unknown"
}

// runHook runs a promote or demote hook with the documented environment,
// and keeps c.primary up to date: a promote that starts makes the service
// possibly primary, only a demote that succeeds makes it surely not.
//
// Hooks never overlap. A hook that did not exit after SIGKILL (proc.Run
// gave up on it) still counts as running: until it is reaped, every other
// hook fails at once with ErrHookStuck instead of starting next to it.
func (c *Controller) runHook(ctx context.Context, name string, h Hook, reason string, epoch int64, prev *breadcrumb.Record) error {
	return c.runHookIf(ctx, nil, name, h, reason, epoch, prev)
}

// errNotStarted wraps the error of runHookIf's check.
var errNotStarted = errors.New("hook not started")

// runHookIf is runHook with a check made once the hook lock is held, right
// before the hook starts (nil: none). When the check fails, the hook does
// not start and the error wraps errNotStarted.
func (c *Controller) runHookIf(ctx context.Context, check func() error, name string, h Hook, reason string, epoch int64, prev *breadcrumb.Record) error {
	c.hookMu.Lock()
	defer c.hookMu.Unlock()
	if err := c.stuckErr(name); err != nil {
		c.log.Error("hook not run", "hook", name, "reason", reason, "err", err)
		if name == "demote" {
			c.metrics.Demotion("failure")
		}
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return fmt.Errorf("%s %w: %w", name, errNotStarted, err)
		}
	}
	if name == "promote" {
		c.mu.Lock()
		c.primary.promoteStarted()
		c.mu.Unlock()
	}
	err := c.execHook(ctx, name, h, reason, epoch, prev)
	if name == "demote" && err == nil {
		c.mu.Lock()
		c.primary.demoted()
		c.mu.Unlock()
	}
	return err
}

func (c *Controller) execHook(ctx context.Context, name string, h Hook, reason string, epoch int64, prev *breadcrumb.Record) error {
	if len(h.Argv) == 0 {
		return nil
	}
	role := "standby"
	if name == "promote" {
		role = "leader"
	}
	env := []string{
		"FAILOVERD_CLUSTER=" + c.cfg.Cluster,
		"FAILOVERD_NODE_ID=" + c.cfg.NodeID,
		"FAILOVERD_EPOCH=" + strconv.FormatInt(epoch, 10),
		"FAILOVERD_ROLE=" + role,
		"FAILOVERD_REASON=" + reason,
	}
	if prev != nil && prev.NodeID != "" {
		env = append(env, "FAILOVERD_PREVIOUS_LEADER="+prev.NodeID, "FAILOVERD_PREVIOUS_EPOCH="+strconv.FormatInt(prev.Epoch, 10))
	}
	log := c.log.With("hook", name)
	log.Info("running hook", "reason", reason, "epoch", epoch)
	res, err := proc.Run(ctx, proc.Spec{
		Argv: h.Argv, Env: env, Timeout: h.Timeout, KillGrace: killGrace(h),
		OnLine: func(stream, line string) { log.Info("hook output", "stream", stream, "line", line) },
	})
	result := "success"
	if errors.Is(err, proc.ErrUnkillable) {
		c.hookUnkillable(name, res.Reaped, err)
	}
	if err != nil {
		result = "failure"
		log.Error("hook failed", "err", err, "duration_seconds", res.Duration.Seconds())
	} else {
		log.Info("hook done", "duration_seconds", res.Duration.Seconds())
	}
	if name == "demote" {
		c.metrics.Demotion(result)
	}
	return err
}

// Demote is the server side of the rpc fencer and of POST /v1/demote: the
// local service stops acting as primary now, and this node stays out of the
// election for DemoteHoldoff.
//
// Demoted is true only when a demote hook succeeded after this request
// arrived and after the last promote hook started (in this term or any
// earlier one), and no term is left running that could promote again. A term
// in progress is waited for (it demotes as it ends); otherwise the demote
// hook runs here, also when the service should already be standby (the
// service may have been restarted as primary behind our back).
func (c *Controller) Demote(ctx context.Context, reason string) (adminapi.DemoteResponse, error) {
	c.log.Warn("demote requested", "reason", reason)
	c.cede(c.cfg.DemoteHoldoff, reasonOperator)
	c.mu.Lock()
	resp := adminapi.DemoteResponse{NodeID: c.cfg.NodeID, Epoch: c.epoch}
	seen := c.primary.demotes
	c.mu.Unlock()
	for {
		c.mu.Lock()
		termOver, done := c.termOver, c.primary.demotedSince(seen)
		c.mu.Unlock()
		if termOver != nil {
			select {
			case <-termOver:
				continue
			case <-ctx.Done():
				resp.Error = "demote still running: " + ctx.Err().Error()
				return resp, nil
			}
		}
		if done {
			resp.Demoted = true
			if resp.Epoch == 0 {
				// Restarted (after a host crash, say) and no leadership
				// since: our previous run's term, if the breadcrumb names
				// it, was just stood down too.
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				c.adoptPreviousTerm(actx)
				cancel()
				c.mu.Lock()
				resp.Epoch = c.epoch
				c.mu.Unlock()
			}
			return resp, nil
		}
		// The hook gets its own timeout: a caller that gave up must not cut
		// a demote short halfway.
		if err := c.runHook(context.WithoutCancel(ctx), "demote", c.cfg.Demote, reasonOperator, resp.Epoch, nil); err != nil {
			resp.Error = err.Error()
			return resp, nil
		}
		// Demoted; look again in case a term started meanwhile.
	}
}

// Cede leaves leadership gracefully (demote, then delete the breadcrumb) and
// stays out of the election for d.
func (c *Controller) Cede(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return errors.New("controller: cede duration must be > 0")
	}
	c.log.Info("ceding", "for", d.String())
	c.cede(d, reasonCeded)
	c.setStateIfIdle()
	return nil
}

// idleState is the state between leaderships: out while ceded or unhealthy.
func (c *Controller) idleState() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	blocked := c.stuck != nil || !c.joinChecked || c.joinErr != nil
	if c.health != healthcheck.Healthy || blocked || time.Now().Before(c.cededUntil) || time.Now().Before(c.standAsideUntil) {
		return StateOut
	}
	return StateStandby
}

func (c *Controller) setStateIfIdle() {
	c.mu.Lock()
	idle := !c.inTerm
	c.mu.Unlock()
	if idle {
		c.setState(StateOut, "ceded")
	}
}

// member is the JSON published under members/<node-id>.
func (c *Controller) member() []byte {
	s := c.Status()
	if time.Now().Before(c.cededUntilTime()) && s.State == StateStandby {
		s.State = StateOut
	}
	b, _ := json.Marshal(s)
	return b
}

// cededUntilTime is when every cede and stand-aside is over.
func (c *Controller) cededUntilTime() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.standAsideUntil.After(c.cededUntil) {
		return c.standAsideUntil
	}
	return c.cededUntil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
