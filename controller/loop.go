package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/healthcheck"
	"github.com/failoverd/failoverd/internal/proc"
)

// loop is the controller's state. Only the loop goroutine touches it.
type loop struct {
	state   State
	since   time.Time
	health  healthcheck.State
	epoch   int64 // current or last term's epoch (or adopted)
	lastErr string
	primary primaryTracker
	stuck   *stuckHook
	// proving is the newest term fenced by ProveOut (nil: none), until
	// the elector reports that it ended that term itself (ProvedEnded):
	// then it is provedOut, which the next term won takes.
	proving   *provedOut
	provedOut *provedOut

	// The verdict of the checks that must pass before we campaign
	// (duplicate node id, election mode); joinChecked is false until the
	// first verdict. joinProblem is what they last put in lastErr.
	joinChecked bool
	joinErr     error
	// floor is the cluster record's EpochFloor, added to every term's
	// epoch (a cluster moved from another coordination service).
	floor       int64
	joinProblem string

	cededUntil time.Time // operator cede, demote holdoff, takeover backoff
	standAside standAside
	failures   int // takeover backoff exponent

	gen       uint64
	cand      *candidacy
	candRetry time.Time // a candidacy that ended by itself is restarted after this
	term      *term
	hook      *hookRun // the one hook in flight: hooks never overlap
	waiters   []*demoteWaiter

	startup startupState
	adopt   adoptState
	follow  followState
	pause   pauseState    // maintenance mode and the failover cooldown (pause.go)
	pos     positionState // position.go

	choice choiceState // who should lead (choice.go)

	seenFailover string                   // key of the last failover request acted on
	expiry       *cluster.FailoverRequest // deleted at expiryAt unless done
	expiryAt     time.Time

	stopping     bool
	stopDeadline time.Time

	bg    context.Context // ends when Run returns: background readers
	local []event         // events the loop produced itself, applied next

	// For status (whynot.go): the last decision about the election
	// (reconcile), the error of the health change to health and when it
	// was seen, the cause that set cededUntil, and the last failed
	// takeover.
	decision  decision
	healthErr string
	healthAt  time.Time
	cededBy   *endCause
	setback   setback
}

// standAside: a manual failover to another node keeps us out until until
// (monotonic) or until the target is promoted.
type standAside struct {
	key   string
	until time.Time
}

type candidacy struct {
	gen       uint64
	cancel    context.CancelCauseFunc
	cancelled bool
	// later: the candidacy was left (cancelled) but its context is ended
	// with this cause only when its term is released, after a graceful
	// end's demote (graceful.go).
	later *endCause
}

type startupState struct {
	done     bool
	failures int
	retryAt  time.Time
	msg      string // what the failure put in lastErr
}

// adoptState drives the reader that adopts our previous run's epoch.
type adoptState struct {
	wanted  bool // after the startup demote, until the breadcrumb was read
	running bool
	retryAt time.Time
}

type demoteWaiter struct {
	seen     uint64 // primary.demotes when the request arrived
	epoch    int64
	reply    chan DemoteOutcome
	tried    bool // a demote hook started for it
	adopting bool // demoted; waiting for the adopt reader before answering
}

// hookPurpose says why a hook runs, i.e. what its end means.
type hookPurpose int

const (
	forStartup    hookPurpose = iota // demote at process start
	forFencePrev                     // local demote of our own previous term (the fence)
	forPromote                       // the promote of a term
	forTermEnd                       // the demote that ends a term (or follows a failed promote)
	forOperator                      // demote requests
	forReap                          // demote after a stuck hook was reaped
	forFollow                        // the follow hook (never in a term)
	forPrePromote                    // the pre_promote of a term (after fencing, before the breadcrumb)
)

type hookRun struct {
	name    string // "pre_promote", "promote", "demote" or "follow"
	purpose hookPurpose
	env     HookEnv
	term    *term
	stuck   *stuckHook // forReap
	refused bool       // not started: a stuck hook is alive
	// cut, for a graceful end's demote, kills it at the instant given
	// (forceDemote); nil otherwise.
	cut func(at time.Time)
	// stopKilled: the graceful stop's deadline came while it ran, and it
	// was killed then (reapBeforeStop).
	stopKilled bool

	// forFollow: the loop may stop a follow it no longer wants (cancel);
	// cancelled says it did, so the end is not a failure.
	cancel    context.CancelCauseFunc
	cancelled bool
}

// loop runs until the graceful stop is over.
func (c *Controller) loop(ctx context.Context, bg context.Context) error {
	l := &c.l
	l.bg = bg
	c.readHealth()
	l.pause.waitUntil = time.Now().Add(c.cfg.PauseWait)
	c.setState(StateOut, reasonStartup)
	if c.priority == 0 {
		c.log.Info("node.priority is 0: this node never joins the election (it checks health, follows the leader and publishes its status)")
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stop := ctx.Done()
	for {
		c.reconcile()
		c.publish()
		if l.stopping {
			if l.cand == nil && l.term == nil && l.hook == nil {
				c.stopped()
				return nil
			}
			if !time.Now().Before(l.stopDeadline) && !c.reapBeforeStop(time.Now()) {
				c.log.Error("graceful stop timed out; the session closes now (the successor fences us if needed)", "timeout", c.cfg.ShutdownTimeout.String())
				c.stopped()
				return fmt.Errorf("controller: graceful stop took longer than %v", c.cfg.ShutdownTimeout)
			}
		}
		if len(l.local) > 0 {
			ev := l.local[0]
			l.local = l.local[1:]
			c.apply(ev)
			continue
		}
		c.armTimer(timer)
		select {
		case ev := <-c.events:
			c.apply(ev)
		case <-c.healthPoke:
			was := l.health
			c.readHealth()
			if l.health == healthcheck.Healthy && (was == healthcheck.Unhealthy || was == healthcheck.NotResponding) {
				c.followAfterRecovery()
			}
		case <-timer.C:
		case <-stop:
			stop = nil
			l.stopping = true
			l.stopDeadline = time.Now().Add(c.cfg.ShutdownTimeout)
			c.cutForStop(l.hook) // a graceful end's demote running already
			c.endCandidacy(causeShutdown)
		}
	}
}

// stopReapWait bounds how long, after the graceful stop's deadline, the
// loop waits for a term's hook killed then to be gone: its kill grace (a
// hook under the term's context gets SIGTERM only now) and proc.ReapWait,
// after which proc.Run gives up on a process that outlives SIGKILL.
func (c *Controller) stopReapWait() time.Duration {
	grace := max(killGrace(c.cfg.Promote), killGrace(c.cfg.Demote))
	if p := c.cfg.PrePromote; p != nil {
		grace = max(grace, killGrace(*p))
	}
	return grace + proc.ReapWait + time.Second
}

// reapBeforeStop reports whether the loop, past the graceful stop's
// deadline, must go on waiting: a hook of a term still runs. Returning
// would release the term (the won callback returns when the loop ends)
// and the session closes next, so the election entry would go while the
// hook may still act on the service, and a successor could promote
// beside it. The hook is killed by now (a graceful end's demote was cut a
// kill grace before the deadline; any other gets its context ended here),
// so its end comes within its kill grace, or proc.Run gives up on it
// ReapWait after SIGKILL; past that bound the loop returns anyway.
func (c *Controller) reapBeforeStop(now time.Time) bool {
	h := c.l.hook
	if h == nil || h.term == nil || h.refused {
		return false
	}
	if !now.Before(c.l.stopDeadline.Add(c.stopReapWait())) {
		c.log.Error("a hook of the term still runs after the graceful stop's deadline and its kill: leaving it behind", "hook", h.name)
		return false
	}
	if !h.stopKilled {
		h.stopKilled = true
		c.log.Warn("graceful stop timed out: waiting for the killed hook to be gone before the term's election entry may go", "hook", h.name)
		if h.cut != nil {
			h.cut(now)
		}
		h.term.lapse(causeShutdown)
	}
	return true
}

// stopped answers what is still waiting and marks the node stopped.
func (c *Controller) stopped() {
	if cand := c.l.cand; cand != nil && cand.later != nil {
		// The graceful stop timed out during a graceful end: the
		// candidacy must not outlive the loop.
		cand.cancel(cand.later)
		cand.later = nil
	}
	for _, w := range c.l.waiters {
		w.reply <- DemoteOutcome{Epoch: c.l.epoch, Err: errors.New("controller: stopped")}
	}
	c.l.waiters = nil
	c.setState(StateStopped, causeShutdown.label)
	c.publish()
}

// armTimer sets timer to the earliest moment something is due.
func (c *Controller) armTimer(timer *time.Timer) {
	l := &c.l
	now := time.Now()
	next := now.Add(time.Hour)
	consider := func(t time.Time) {
		if t.After(now) && t.Before(next) {
			next = t
		}
	}
	consider(l.cededUntil)
	consider(l.standAside.until)
	consider(l.candRetry)
	if l.expiry != nil {
		consider(l.expiryAt)
	}
	if !l.startup.done {
		consider(l.startup.retryAt)
	}
	if l.adopt.wanted {
		consider(l.adopt.retryAt)
	}
	if l.stuck != nil {
		consider(l.stuck.retryAt)
	}
	c.considerFollow(consider)
	c.considerStall(consider)
	c.considerPause(consider)
	c.considerPosition(consider)
	c.considerChoice(consider)
	if l.stopping {
		consider(l.stopDeadline)
		consider(l.stopDeadline.Add(c.stopReapWait()))
	}
	if tm := l.term; tm != nil && !tm.ended && tm.ctx.Err() == nil {
		// checkExpiry's timer: the term's time to act runs out then.
		if until, err := tm.actUntil(); err == nil {
			consider(until)
		} else {
			consider(now.Add(time.Millisecond)) // ran out since reconcile looked: at once
		}
	}
	if tm := l.term; tm != nil && tm.gracefulDemoting() {
		if cut, err := c.gracefulCut(tm); err == nil {
			// checkGraceful looks at the term again then, and every
			// second, so that its last cut stays fresh.
			consider(cut)
			consider(now.Add(gracefulRecheck))
		}
	}
	// Past deadlines were acted on by reconcile; a tiny floor keeps a
	// deadline equal to now from spinning.
	timer.Reset(max(next.Sub(now), time.Millisecond))
}

// reconcile is the only place that starts or stops candidacies, hooks and
// the release of terms. It runs after every event; a few passes let one
// step's change (a term released) start the next (a waiting demote).
func (c *Controller) reconcile() {
	for range 3 {
		c.reconcileOnce()
	}
}

func (c *Controller) reconcileOnce() {
	l := &c.l
	now := time.Now()
	if l.expiry != nil && !now.Before(l.expiryAt) {
		c.expireFailover(*l.expiry)
		c.onRequestExpired(*l.expiry)
		l.expiry = nil
	}
	if l.standAside.key != "" && !now.Before(l.standAside.until) {
		l.standAside = standAside{}
	}
	c.trackHold(now)
	c.checkGraceful(now)
	c.checkExpiry(now)
	v := c.decide(now)
	l.decision = v // what status shows: the decision acted on here
	if !v.join && v.cause != nil {
		c.endCandidacy(v.cause)
	}
	if v.join && l.cand == nil {
		c.startCandidacy()
	}
	c.preemptIfDue(now)
	c.stopUnwantedFollow(now)
	if l.hook == nil {
		c.startNextHook(now)
	}
	if l.hook == nil || l.hook.purpose == forFollow {
		// A follow changes nothing a demote answer says (the service is
		// not primary): the answer does not wait for the follow run that
		// a demote makes due.
		c.answerWaiters()
	}
	c.adoptIfDue(now)
	c.writeLeaderPosition(now)
	if tm := l.term; tm != nil && tm.phase == phRelease && !tm.worker && (l.hook == nil || l.hook.term != tm) {
		c.releaseOrClean(tm)
	}
	if l.term == nil {
		c.setState(c.idleState(), "")
	}
}

// idleState is the state between terms.
func (c *Controller) idleState() State {
	l := &c.l
	if l.cand != nil && !l.cand.cancelled {
		return StateStandby
	}
	return StateOut
}

func (c *Controller) startCandidacy() {
	l := &c.l
	l.gen++
	gen := l.gen
	ctx, cancel := context.WithCancelCause(context.Background())
	l.cand = &candidacy{gen: gen, cancel: cancel}
	c.log.Info("joining the election")
	go func() {
		err := c.el.Campaign(ctx, func(tctx context.Context, t cluster.Term) { c.won(gen, tctx, t) })
		c.send(candidacyEnded{gen: gen, err: err})
	}()
	c.setState(StateStandby, "healthy")
}

// won is the elector's callback for a term: it hands the term to the loop
// and holds it until the loop released it.
func (c *Controller) won(gen uint64, ctx context.Context, t cluster.Term) {
	release := make(chan struct{})
	if !c.send(termWon{gen: gen, t: t, ctx: ctx, release: release, reads: startReads(ctx, t, c.readsLag.Load(), c.joinAgain)}) {
		return
	}
	select {
	case <-release:
	case <-c.loopDone:
	}
}

// endCandidacy leaves the election with cause (the term in progress, if
// any, ends with it).
func (c *Controller) endCandidacy(cause *endCause) {
	l := &c.l
	if l.cand == nil || l.cand.cancelled {
		return
	}
	c.log.Info("leaving the election", "reason", cause.label)
	l.cand.cancelled = true
	if tm := l.term; tm != nil {
		tm.abandoned.Store(cause) // before the context's end reaches it
		if c.keepsForDemote(tm, cause) {
			c.endGracefully(tm, cause) // the candidacy ends when the term is released
			return
		}
	}
	l.cand.cancel(cause)
	if l.term == nil {
		c.setState(StateOut, cause.label)
	}
}

// cedeFor keeps this node out of the election for d (at least).
func (c *Controller) cedeFor(d time.Duration, cause *endCause) {
	l := &c.l
	if until := time.Now().Add(d); until.After(l.cededUntil) {
		l.cededUntil, l.cededBy = until, cause
	}
	c.endCandidacy(cause)
}

// backoff gives up this leadership and stays out for a growing, jittered
// delay so another candidate can try.
func (c *Controller) backoff(why string) { c.backoffWith(why, causeBackoff) }

// backoffWith is backoff ending the candidacy with cause.
func (c *Controller) backoffWith(why string, cause *endCause) {
	l := &c.l
	l.failures++
	d := c.cfg.BackoffMin << min(l.failures-1, 16)
	d = min(d, c.cfg.BackoffMax)
	d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	c.log.Warn("backing off before joining the election again", "why", why, "for", d.Round(time.Millisecond).String(), "failures", l.failures)
	c.noteSetback(why, time.Now())
	c.dropOwnTargetRequest()
	c.cedeFor(d, cause)
}

// retryDelay is the pause before retrying a local step that failed
// failures times before (BackoffMin doubling up to BackoffMax, no jitter:
// only this node is waiting on it).
func (c *Controller) retryDelay(failures int) time.Duration {
	return min(c.cfg.BackoffMin<<min(failures, 16), c.cfg.BackoffMax)
}

func (c *Controller) setState(to State, reason string) {
	l := &c.l
	from := l.state
	if from == to {
		return
	}
	l.state, l.since = to, time.Now()
	c.log.Info("state transition", "from", string(from), "to", string(to), "reason", reason, "epoch", l.epoch)
	c.metrics.StateChanged(from, to)
}

func (c *Controller) setErr(msg string) { c.l.lastErr = msg }

// clearErr clears the last error if it still says msg.
func (c *Controller) clearErr(msg string) {
	if msg != "" && c.l.lastErr == msg {
		c.l.lastErr = ""
	}
}

// publish stores a new snapshot when anything shown changed.
func (c *Controller) publish() {
	l := &c.l
	s := &snapshot{status: Status{State: l.state, Priority: c.priority, Member: cluster.Member{
		Cluster: c.cfg.Cluster, NodeID: c.cfg.NodeID, Host: c.cfg.Host, AdminURL: c.cfg.AdminURL,
		Health: l.health.String(), Epoch: l.epoch, Since: l.since,
		LastError: l.lastErr, Version: c.cfg.Version, Instance: c.instance, Role: "standby",
		ServiceAddress: c.cfg.ServiceAddress, Paused: l.pause.cur, CooldownUntil: c.cooldownShown(time.Now()),
		Position: l.pos.value, PositionAt: l.pos.at,
		ConfigHash: c.cfg.ConfigHash, ConfigLoadedAt: c.cfg.ConfigLoadedAt,
	}}}
	if f := l.follow.following; f != nil {
		s.status.Following, s.status.FollowingEpoch = f.NodeID, f.Epoch
	}
	s.status.FollowingSince = l.follow.since
	s.status.NotFollowing = c.notFollowing(time.Now())
	s.status.NotLeading, s.status.Holds = c.notLeading(), c.holds(time.Now())
	if l.state == StateLeader {
		s.status.Role = "leader"
	}
	if l.term != nil {
		s.term, s.budget = l.term.t, l.term.budget
	}
	s.decision = l.decision
	if old := c.snap.Load(); old != nil && old.status == s.status && old.term == s.term && old.budget == s.budget && old.decision == s.decision {
		return
	}
	c.snap.Store(s)
	poke(c.memberPoke)
}

// apply changes the state for one event.
func (c *Controller) apply(ev event) {
	switch ev := ev.(type) {
	case joinChecked:
		c.onJoinChecked(ev)
	case termWon:
		c.onTermWon(ev)
	case termEnded:
		c.onTermEnded(ev)
	case candidacyEnded:
		c.onCandidacyEnded(ev)
	case demoteReq:
		c.cedeFor(c.cfg.DemoteHoldoff, causeOperator)
		c.l.waiters = append(c.l.waiters, &demoteWaiter{seen: c.l.primary.demotes, epoch: c.l.epoch, reply: ev.reply})
	case cedeReq:
		c.cedeFor(ev.d, causeCeded)
		ev.reply <- nil
	case failoverSeen:
		if !c.staleWithdrawal(ev.req) {
			c.onFailoverSeen(ev.req)
		}
	case withdrawalChecked:
		c.onWithdrawalChecked(ev)
	case stepDone:
		c.onStepDone(ev)
	case hookDone:
		c.onHookDone(ev)
	case hookReaped:
		c.onHookReaped(ev.h)
	case adopted:
		c.onAdopted(ev)
	case termFinished:
		c.onTermFinished(ev)
	case leaderSeen:
		c.onLeaderSeen(ev.leader)
	case pauseSeen:
		c.onPauseSeen(ev.p)
	case positionRead:
		c.onPositionRead(ev)
	case positionWritten:
		c.onPositionWritten(ev)
	case membersSeen:
		c.onMembersSeen(ev)
	case preemptWritten:
		c.onPreemptWritten(ev)
	case reloadReq:
		c.onReload(ev)
	case proveReq:
		c.onProveReq(ev)
	case *provedOut:
		c.onProvedOut(ev)
	case provedEnded:
		c.onProvedEnded(ev)
	}
}

func (c *Controller) onCandidacyEnded(ev candidacyEnded) {
	l := &c.l
	if l.cand == nil || l.cand.gen != ev.gen {
		return
	}
	if ev.err != nil {
		c.log.Error("election stopped", "err", ev.err)
	}
	if !l.cand.cancelled {
		l.candRetry = time.Now().Add(time.Second) // ended by itself: do not spin
	}
	l.cand = nil
	if l.term != nil { // cannot happen: Campaign returns after the last won returned
		c.log.Error("candidacy ended while its term was held", "epoch", l.term.epoch)
	}
}

// onJoinChecked records the member publisher's outcome: a verdict gates
// joining; a failure to check is shown (the last verdict stands).
func (c *Controller) onJoinChecked(ev joinChecked) {
	l := &c.l
	if !ev.verdict {
		c.setJoinProblem(fmt.Errorf("cannot publish the member record or check the cluster: %w", ev.err))
		return
	}
	changed := !l.joinChecked || fmt.Sprint(l.joinErr) != fmt.Sprint(ev.err)
	l.joinChecked, l.joinErr = true, ev.err
	if ev.err == nil {
		l.floor = ev.floor
	}
	c.setJoinProblem(ev.err)
	if !changed {
		return
	}
	if ev.err != nil {
		c.log.Error("not joining the election", "err", ev.err)
	} else {
		c.log.Info("cluster checks passed: node id unique, election mode matches")
	}
}

// setJoinProblem shows err (the join checks' refusal, or why they could not
// run) as the last error, and once the problem is gone (err nil) clears
// the last error if it still shows it.
func (c *Controller) setJoinProblem(err error) {
	l := &c.l
	if err == nil {
		c.clearErr(l.joinProblem)
		l.joinProblem = ""
		return
	}
	l.joinProblem = err.Error()
	c.setErr(l.joinProblem)
}

// joinVerdict reports whether err is a verdict (nil or a refusal) rather
// than a failure to check (coordination service unavailable: keep the last
// verdict).
func joinVerdict(err error) bool {
	var d *cluster.DuplicateIDError
	var m *cluster.ModeMismatchError
	var mv *cluster.MovedError
	return err == nil || errors.As(err, &d) || errors.As(err, &m) || errors.As(err, &mv)
}

// startNextHook starts the most urgent pending hook: a term's end demote,
// the startup demote, the demote after a stuck hook was reaped, operator
// demotes (between terms), then a term's fence-by-demote or promote.
func (c *Controller) startNextHook(now time.Time) {
	l := &c.l
	tm := l.term
	switch {
	case tm != nil && tm.phase == phEndDemote:
		tm.phase = phEndDemoting
		h, ctx := c.endDemoteRun(tm)
		c.startHook(h, ctx)
	case !l.startup.done && !l.stopping && !now.Before(l.startup.retryAt) && c.startupDemoteAllowed(now):
		c.startHook(&hookRun{name: "demote", purpose: forStartup, env: HookEnv{Reason: reasonStartup}}, context.Background())
	case !l.startup.done:
	case l.stuck != nil && l.stuck.reapSeen && !now.Before(l.stuck.retryAt):
		h := l.stuck
		if !l.primary.mayBePrimary {
			c.stuckOver(h)
			return
		}
		c.log.Warn("the service may still be primary: demoting it before joining the election again", "epoch", l.epoch)
		c.startHook(&hookRun{name: "demote", purpose: forReap, stuck: h, env: HookEnv{Reason: causeStuck.label, Epoch: l.epoch}}, context.Background())
	case tm == nil && c.waitersNeedHook():
		for _, w := range l.waiters {
			if !w.adopting {
				w.tried = true
			}
		}
		c.startHook(&hookRun{name: "demote", purpose: forOperator, env: HookEnv{Reason: causeOperator.label, Epoch: l.epoch}}, context.Background())
	case tm != nil && tm.phase == phFencePrev:
		if err := tm.gone(); err != nil {
			tm.phase = phRelease
			return
		}
		tm.phase = phFencingPrev
		c.startHook(&hookRun{name: "demote", purpose: forFencePrev, term: tm, env: HookEnv{Reason: reasonFencePrev, Epoch: tm.prev.Epoch}}, tm.ctx)
	case tm != nil && tm.phase == phPrePromote:
		if err := tm.gone(); err != nil {
			c.log.Warn("leadership lost while waiting to run pre_promote", "epoch", tm.epoch, "err", err)
			tm.phase = phRelease
			return
		}
		tm.phase = phPrePromoting
		c.startHook(&hookRun{name: "pre_promote", purpose: forPrePromote, term: tm, env: HookEnv{Reason: reasonElected, Epoch: tm.epoch, Previous: tm.prev}}, tm.ctx)
	case tm != nil && tm.phase == phWaitPromote:
		// The promote may have waited for the hook slot: look at the
		// leadership again right before it starts.
		if err := tm.gone(); err != nil {
			c.log.Warn("leadership lost while waiting to promote; promote not started", "epoch", tm.epoch, "err", err)
			tm.phase = phRelease
			return
		}
		tm.phase, tm.promoteStarted = phPromoting, true
		c.startHook(&hookRun{name: "promote", purpose: forPromote, term: tm, env: HookEnv{Reason: reasonElected, Epoch: tm.epoch, Previous: tm.prev}}, tm.ctx)
	case tm == nil:
		c.startFollow(now)
	}
}

// startHook runs h in its own goroutine (it reports hookDone). While a
// hook is alive after SIGKILL, no hook starts next to it: h fails at once
// with ErrHookStuck.
func (c *Controller) startHook(h *hookRun, ctx context.Context) {
	l := &c.l
	l.hook = h
	if s := l.stuck; s != nil && s.alive() {
		err := fmt.Errorf("%s hook not started: %w (the %s hook, stuck for %s)",
			h.name, ErrHookStuck, s.name, time.Since(s.since).Round(time.Second))
		c.log.Error("hook not run", "hook", h.name, "reason", h.env.Reason, "err", err)
		if h.name == "demote" {
			c.metrics.Demotion("failure")
		}
		h.refused = true
		l.local = append(l.local, hookDone{run: h, err: err})
		return
	}
	if h.name == "promote" {
		l.primary.promoteStarted()
	}
	hooks := c.hooks // a reload may replace it; this run keeps its own
	go func() {
		reaped, err := hooks.Run(ctx, h.name, h.env)
		c.send(hookDone{run: h, err: err, reaped: reaped})
	}()
}

func (c *Controller) onHookDone(ev hookDone) {
	l := &c.l
	h := ev.run
	if l.hook != h {
		return
	}
	l.hook = nil
	if h.name == "demote" && !h.refused {
		result := "success"
		if ev.err != nil {
			result = "failure"
		}
		c.metrics.Demotion(result)
	}
	if ev.reaped != nil || errors.Is(ev.err, proc.ErrUnkillable) {
		c.hookUnkillable(h.name, ev.reaped, ev.err)
	}
	if h.name == "demote" && ev.err == nil {
		l.primary.demoted()
	}
	if h.name == "demote" && h.purpose != forStartup && !h.refused {
		c.followAfterDemote()
	}
	switch h.purpose {
	case forStartup:
		c.onStartupDemote(ev.err)
	case forReap:
		c.onReapDemote(h.stuck, ev.err)
	case forOperator:
		if ev.err == nil {
			return // answerWaiters sees the demote
		}
		kept := l.waiters[:0]
		for _, w := range l.waiters {
			if w.tried && !w.adopting {
				w.reply <- DemoteOutcome{Epoch: w.epoch, Err: ev.err}
				continue
			}
			kept = append(kept, w)
		}
		l.waiters = kept
	case forFencePrev:
		c.onFencePrevDone(h.term, ev.err)
	case forPrePromote:
		c.onPrePromoteDone(h.term, ev.err)
	case forPromote:
		c.onPromoteDone(h.term, ev.err)
	case forTermEnd:
		c.onEndDemoteDone(h.term, ev.err)
	case forFollow:
		c.onFollowDone(h, ev.err)
	}
}

// onStartupDemote: whatever the service did before we started, it is not
// primary now; until that is so, the node stays out of the election. A
// service back from a crash may still believe it is primary, and nobody
// else would stop it (the breadcrumb names the successor's term, not
// ours), so a failed startup demote is retried with a growing back-off.
func (c *Controller) onStartupDemote(err error) {
	l := &c.l
	s := &l.startup
	if err == nil {
		if s.failures > 0 {
			c.log.Info("startup demote succeeded; joining the election", "failures", s.failures)
			c.clearErr(s.msg)
		}
		s.done = true
		l.adopt.wanted = true
		return
	}
	s.msg = "startup demote failed; out of the election until it succeeds (the service may still act as primary): " + err.Error()
	d := c.retryDelay(s.failures)
	s.failures++
	s.retryAt = time.Now().Add(d)
	c.log.Error("startup demote failed; the service may still act as primary, so this node stays out of the election and retries",
		"err", err, "retry_in", d.String(), "failures", s.failures)
	c.setErr(s.msg)
}

// waitersNeedHook reports whether a demote request waits for a demote that
// has not succeeded since it arrived.
func (c *Controller) waitersNeedHook() bool {
	for _, w := range c.l.waiters {
		if !w.adopting && !c.l.primary.demotedSince(w.seen) {
			return true
		}
	}
	return false
}

// answerWaiters answers the demote requests that a successful demote
// served, between terms (a term in progress may still promote).
func (c *Controller) answerWaiters() {
	l := &c.l
	if l.term != nil || len(l.waiters) == 0 {
		return
	}
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if !l.primary.demotedSince(w.seen) {
			kept = append(kept, w)
			continue
		}
		if w.epoch == 0 && l.epoch == 0 && !w.adopting {
			// Restarted (after a host crash, say) and no leadership since:
			// our previous run's term, if the breadcrumb names it, was
			// just stood down too.
			w.adopting = true
		}
		if w.adopting && l.epoch == 0 {
			kept = append(kept, w)
			continue
		}
		w.reply <- DemoteOutcome{Demoted: true, Epoch: max(w.epoch, l.epoch)}
	}
	l.waiters = kept
}

// adoptIfDue starts the reader that adopts our previous run's epoch, when
// the startup demote asked for it or a demote request waits for it.
func (c *Controller) adoptIfDue(now time.Time) {
	l := &c.l
	if l.epoch != 0 {
		l.adopt.wanted = false
	}
	waiting := false
	for _, w := range l.waiters {
		waiting = waiting || w.adopting
	}
	if l.adopt.running || !(waiting || l.adopt.wanted && !now.Before(l.adopt.retryAt)) {
		return
	}
	if l.epoch != 0 {
		c.answerAdopting()
		return
	}
	l.adopt.running = true
	timeout := 5 * time.Second
	if waiting {
		timeout = 2 * time.Second
	}
	go func() {
		ctx, cancel := context.WithTimeout(l.bg, timeout)
		defer cancel()
		rec, _, err := c.rec.ReadBreadcrumb(ctx)
		switch {
		case errors.Is(err, breadcrumb.ErrAbsent):
			c.send(adopted{ok: true})
		case err != nil:
			c.send(adopted{})
		default:
			c.send(adopted{rec: &rec, ok: true})
		}
	}()
}

// onAdopted makes the epoch of our previous run's leadership this node's
// last epoch when the breadcrumb names it (ownPreviousTerm) and no
// leadership began since this process started. It is read only after a
// demote that succeeded: that demote stood that term's service down, so a
// fence of that epoch (the rpc fencer asks for epoch >= the breadcrumb's)
// is answered truthfully. Without it a node whose daemon restarted after a
// crash answers with epoch 0 and an rpc-only cluster can never fence it.
func (c *Controller) onAdopted(ev adopted) {
	l := &c.l
	l.adopt.running = false
	if !ev.ok {
		l.adopt.retryAt = time.Now().Add(time.Second)
	} else {
		l.adopt.wanted = false
	}
	if ev.rec != nil && l.epoch == 0 && c.ownPreviousTerm(*ev.rec) {
		l.epoch = ev.rec.Epoch
		c.log.Info("the breadcrumb names an earlier run of this node, whose service is demoted now: answering fences of its epoch", "epoch", l.epoch)
	}
	c.answerAdopting()
}

// answerAdopting answers the demote requests that waited for adoption.
func (c *Controller) answerAdopting() {
	l := &c.l
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if w.adopting {
			w.reply <- DemoteOutcome{Demoted: true, Epoch: l.epoch}
			continue
		}
		kept = append(kept, w)
	}
	l.waiters = kept
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
