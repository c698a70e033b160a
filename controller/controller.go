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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
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
	// KillGrace is how long the hook gets after SIGTERM before SIGKILL
	// (0: proc.DefaultKillGrace). config counts it in the demote budget.
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

	mu         sync.Mutex
	state      State
	since      time.Time
	health     healthcheck.State
	epoch      int64
	lastErr    string
	leadership *election.Leadership
	endReason  string // set before we end a leadership on purpose
	inTerm     bool   // a leadership callback is running
	waiters    []chan bool
	failures   int
	cededUntil time.Time
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
	return &Controller{
		cfg:           cfg,
		log:           cfg.Logger.With("component", "controller"),
		client:        client,
		el:            el,
		fence:         fence,
		metrics:       m,
		bcPath:        breadcrumb.Path(cfg.Root, cfg.Cluster),
		wake:          make(chan struct{}, 1),
		memberChanged: make(chan struct{}, 1),
		state:         StateInitializing,
		since:         time.Now(),
	}, nil
}

// ClusterPath is the znode directory of a cluster.
func ClusterPath(root, cluster string) string { return zk.Join(root, cluster) }

// ElectionDir is where the candidates of a cluster live.
func ElectionDir(root, cluster string) string { return zk.Join(root, cluster, "election") }

// MembersDir is where every node publishes its Status.
func MembersDir(root, cluster string) string { return zk.Join(root, cluster, "members") }

// FailoverPath holds a manual failover request.
func FailoverPath(root, cluster string) string { return zk.Join(root, cluster, "failover") }

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
		LastError: c.lastErr, Version: c.cfg.Version,
	}
	l := c.leadership
	c.mu.Unlock()
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
	// Whatever the service did before we started, it is not primary now.
	if err := c.runHook(context.WithoutCancel(ctx), "demote", c.cfg.Demote, "startup", 0, nil); err != nil {
		c.log.Warn("startup demote failed; continuing: the election still requires fencing", "err", err)
	}
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
	}()

	var runCancel context.CancelFunc
	var runDone chan struct{}
	var deadline <-chan time.Time // set once a graceful stop began
	cedeTimer := time.NewTimer(time.Hour)
	defer cedeTimer.Stop()
	for {
		stopping := ctx.Err() != nil
		if want := c.healthy() && !stopping; want && runDone == nil {
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
			if stopping {
				reason = reasonShutdown
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

// onElected runs one leadership: fence, write the breadcrumb, promote, and
// demote when it ends. It runs on the elector's goroutine for that term.
func (c *Controller) onElected(lctx context.Context, l election.Leadership) {
	wonAt := time.Now()
	c.mu.Lock()
	c.inTerm, c.leadership, c.epoch, c.endReason = true, &l, l.Epoch, ""
	c.mu.Unlock()
	c.metrics.ElectionWon()

	demoteResult := true // service not promoted in this term: nothing to undo
	defer func() {
		c.mu.Lock()
		c.inTerm, c.leadership = false, nil
		waiters := c.waiters
		c.waiters = nil
		c.mu.Unlock()
		for _, w := range waiters {
			w <- demoteResult
		}
		c.metrics.Leader(false, l.Epoch)
		c.setState(c.idleState(), "leadership over")
	}()

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
	err = c.runHook(lctx, "promote", c.cfg.Promote, "elected", l.Epoch, prev.record)
	if err != nil || lctx.Err() != nil || l.Valid() != nil {
		c.metrics.Promotion("failure")
		c.setState(StateDemoting, "promote failed")
		demoteResult = c.runHook(context.Background(), "demote", c.cfg.Demote, "promote_failed", l.Epoch, nil) == nil
		if err != nil {
			c.setErr(err)
			c.backoff("promote_failed")
		}
		return
	}
	c.metrics.Promotion("success")
	c.metrics.FailoverDuration(time.Since(wonAt))
	c.mu.Lock()
	c.failures = 0
	c.mu.Unlock()
	c.setState(StateLeader, "promoted")
	c.metrics.Leader(true, l.Epoch)

	<-lctx.Done()

	// Demote before anything else.
	reason := c.lossReason(context.Cause(lctx))
	c.metrics.Leader(false, l.Epoch)
	c.metrics.LeadershipLost(reason)
	c.setState(StateDemoting, reason)
	demoteResult = c.runHook(context.Background(), "demote", c.cfg.Demote, reason, l.Epoch, nil) == nil
	if demoteResult && graceful(reason) {
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
	if rec.NodeID == c.cfg.NodeID {
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

// runHook runs a promote or demote hook with the documented environment.
func (c *Controller) runHook(ctx context.Context, name string, h Hook, reason string, epoch int64, prev *breadcrumb.Record) error {
	if len(h.Argv) == 0 {
		return nil
	}
	c.hookMu.Lock()
	defer c.hookMu.Unlock()
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
		Argv: h.Argv, Env: env, Timeout: h.Timeout, KillGrace: h.KillGrace,
		OnLine: func(stream, line string) { log.Info("hook output", "stream", stream, "line", line) },
	})
	result := "success"
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
func (c *Controller) Demote(ctx context.Context, reason string) (fencer.DemoteResponse, error) {
	c.log.Warn("demote requested", "reason", reason)
	c.mu.Lock()
	epoch := c.epoch
	var wait chan bool
	if c.inTerm {
		wait = make(chan bool, 1)
		c.waiters = append(c.waiters, wait)
	}
	c.mu.Unlock()
	resp := fencer.DemoteResponse{NodeID: c.cfg.NodeID, Epoch: epoch}
	c.cede(c.cfg.DemoteHoldoff, reasonOperator)
	if wait != nil {
		select {
		case ok := <-wait:
			resp.Demoted = ok
		case <-ctx.Done():
			resp.Error = "demote still running: " + ctx.Err().Error()
			return resp, nil
		}
	} else {
		// Not leading: make sure anyway (a paused leader may wake here). The
		// hook gets its own timeout: a caller that gave up must not cut a
		// demote short halfway.
		err := c.runHook(context.WithoutCancel(ctx), "demote", c.cfg.Demote, reasonOperator, epoch, nil)
		resp.Demoted = err == nil
		if err != nil {
			resp.Error = err.Error()
		}
	}
	if !resp.Demoted && resp.Error == "" {
		resp.Error = "demote hook failed"
	}
	return resp, nil
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
	if c.health != healthcheck.Healthy || time.Now().Before(c.cededUntil) {
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

func (c *Controller) cededUntilTime() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cededUntil
}

// memberDebounce delays a member status write after a change.
const memberDebounce = 25 * time.Millisecond

// publishMember keeps members/<node-id> up to date: an ephemeral znode of
// the current session, rewritten on every change.
func (c *Controller) publishMember(ctx context.Context) {
	dir := MembersDir(c.cfg.Root, c.cfg.Cluster)
	path := zk.Join(dir, c.cfg.NodeID)
	for ctx.Err() == nil {
		sess, err := c.client.Session(ctx)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		if err := c.writeMember(ctx, sess, dir, path); err != nil {
			if ctx.Err() == nil {
				c.log.Debug("publishing member status failed", "err", err)
				sleepCtx(ctx, 500*time.Millisecond)
			}
			continue
		}
		_, changed := sess.State()
		select {
		case <-ctx.Done():
		case <-c.memberChanged:
			// Coalesce bursts (standby → fencing → promoting → leader) and keep
			// this write off the session while a takeover reads and writes:
			// ZooKeeper answers a session's requests in order.
			sleepCtx(ctx, memberDebounce)
		case <-changed:
		case <-sess.Done():
		case <-time.After(30 * time.Second):
		}
	}
}

func (c *Controller) writeMember(ctx context.Context, sess *zk.Session, dir, path string) error {
	data := c.member()
	st, err := sess.Set(ctx, path, data, -1)
	if err == nil && st.EphemeralOwner == sess.ID() {
		return nil
	}
	if err == nil { // left over from an earlier session of ours
		if err := sess.Delete(ctx, path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	} else if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	if err := sess.EnsurePath(ctx, dir); err != nil {
		return err
	}
	_, _, err = sess.Create(ctx, path, data, zk.Ephemeral)
	return err
}

// FailoverRequest is the JSON of a manual failover request znode.
type FailoverRequest struct {
	To       string    `json:"to"`
	Deadline time.Time `json:"deadline"`
	By       string    `json:"by,omitempty"`
}

// watchFailover acts on manual failover requests: every node but the target
// cedes until the deadline; a leader that is not the target hands over
// gracefully (demote, delete the breadcrumb).
func (c *Controller) watchFailover(ctx context.Context) {
	path := FailoverPath(c.cfg.Root, c.cfg.Cluster)
	var seen time.Time
	for ctx.Err() == nil {
		sess, err := c.client.Session(ctx)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		data, _, ch, err := sess.GetW(ctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = sess.ExistsW(ctx, path)
			if err == nil && ok {
				continue
			}
		}
		if err != nil {
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		if data != nil {
			var req FailoverRequest
			if json.Unmarshal(data, &req) == nil && req.To != "" && time.Now().Before(req.Deadline) && !req.Deadline.Equal(seen) {
				seen = req.Deadline
				if req.To != c.cfg.NodeID {
					d := time.Until(req.Deadline)
					c.log.Info("manual failover requested: standing aside", "to", req.To, "for", d.Round(time.Millisecond).String())
					c.cede(d, reasonFailover)
					c.setStateIfIdle()
				} else {
					c.log.Info("manual failover requested to this node")
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-ch:
		case <-sess.Done():
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
