package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/proc"
)

// phase is where a term is; the public State follows it.
type phase int

const (
	phReading      phase = iota // worker: breadcrumb and failover request read
	phFencePrev                 // our own previous term must be demoted locally (hook pending)
	phFencingPrev               // that demote runs
	phFencing                   // worker: fencing the previous leader
	phPrePromote                // fenced: the pre_promote hook is pending (hook slot)
	phPrePromoting              // the pre_promote hook runs
	phWriting                   // worker: guarded breadcrumb write
	phWaitPromote               // breadcrumb written; the promote waits for the hook slot
	phPromoting                 // promote hook runs
	phLeader                    // promoted
	phEndDemote                 // the term ended (or the promote failed): demote pending
	phEndDemoting               // that demote runs
	phFinishing                 // graceful end: Finish (breadcrumb + znode) in flight
	phRelease                   // nothing left to do: give the term back to the elector
)

// term is one leadership, from the won callback to its release.
type term struct {
	t   cluster.Term
	ctx context.Context // the backend's term context, ended also by lapse
	// lapse ends ctx: the controller's own end of a term whose Expiry
	// less the demote budget came while the backend had not ended it
	// (checkExpiry), and the release's.
	lapse   context.CancelCauseFunc
	epoch   int64
	wonAt   time.Time
	release chan struct{}
	phase   phase
	worker  bool       // a takeover step runs (the term is released only after it)
	reads   *termReads // the first reads, started by the won callback
	// proved is the term this node proved out and ended itself right
	// before this term was won (nil: none): its fence is not repeated.
	proved *provedOut
	budget time.Duration // DemoteBudget: acting ends that long before the term's expiry

	prev      *breadcrumb.Record // the breadcrumb read (nil: absent, or naming this very term)
	version   cluster.Revision   // its revision (zero: absent)
	bcVersion cluster.Revision   // our breadcrumb's revision once written (zero: not written; Finish then deletes nothing)
	// promoteStarted: the promote hook ran in this term; cleaned: a term
	// that gave itself back without it has tried to delete a breadcrumb
	// naming it (releaseOrClean).
	promoteStarted, cleaned bool

	// abandoned is set by the loop when it ends the term's candidacy
	// (cede, operator demote, unhealthy, shutdown, a failover to another
	// node...): the backend's term context may end a goroutine hop later,
	// and gone must say no at once, in the loop and in a worker alike.
	abandoned atomic.Pointer[endCause]

	// What the history entry of the term says (history.go): the
	// fencing method that stopped the previous leader ("": none needed)
	// and the failover request naming this node read at the term's start.
	fenceMethod string
	request     *cluster.FailoverRequest

	ended bool // the term's context ended
	// lostAt is when the term was lost (its context ended, or its time to
	// act ran out), zero while it was not; actBy is the last instant until
	// which the loop saw it could act (actUntil, while valid): a loss is
	// never later than the actBy last seen before it.
	lostAt, actBy time.Time
	endReason     string // the reason of the end demote
	promoteErr    error  // the promote failed (the end demote then backs off)
	// graceful: this node ended the promoted term on purpose and keeps it
	// while it demotes; forced: the term was lost meanwhile, so the
	// demote has the forced path's time and the breadcrumb stays
	// (graceful.go).
	graceful, forced bool
	// lastCut is the graceful demote's cut as last seen while the term
	// was valid; forcedBy when a forced end demote must end (zero: not
	// known yet), see graceful.go.
	lastCut, forcedBy time.Time

	// set are the reloadable settings the takeover uses, taken at the
	// win: its workers read these, never the controller's, which a
	// reload replaces (reload.go).
	set takeoverSettings
	// membersWatched: the leader's member watch runs (preemption).
	membersWatched bool
}

// valid reports, without I/O, whether the term can still be acted on by
// the clock: its backend's expiry (no other term can begin before it) less
// the demote budget, which a demote that starts at the latest then still
// has before a successor may act. Error: the term is over, or its time to
// act is (cluster.ErrLeaseExpired).
func (tm *term) valid() error {
	_, err := tm.actUntil()
	return err
}

// actUntil is when this node stops acting on the term (see valid).
func (tm *term) actUntil() (time.Time, error) {
	exp, err := tm.t.Expiry()
	if err != nil {
		return time.Time{}, err
	}
	until := exp.Add(-tm.budget)
	if !time.Now().Before(until) {
		return until, fmt.Errorf("%w: the term's expiry less the demote budget %s has passed", cluster.ErrLeaseExpired, tm.budget)
	}
	return until, nil
}

// gone reports why the term can no longer be acted on (nil: it can).
func (tm *term) gone() error {
	if err := tm.valid(); err != nil {
		return err
	}
	if cause := tm.abandoned.Load(); cause != nil {
		return cause
	}
	if tm.ctx.Err() != nil {
		return context.Cause(tm.ctx)
	}
	return nil
}

// lossAt is when tm was lost, as far as the loop knows at now: when its
// context ended (onTermEnded), or, lost by the clock alone, the last
// instant the loop saw it could act until. Zero: not lost (it may have
// been abandoned by this node, whose candidacy ended).
func (tm *term) lossAt(now time.Time) time.Time {
	switch {
	case !tm.lostAt.IsZero():
		return tm.lostAt
	case tm.valid() == nil:
		return time.Time{}
	case !tm.actBy.IsZero() && tm.actBy.Before(now):
		return tm.actBy
	}
	return now
}

// checkExpiry is the controller's own end of a term whose time to act ran
// out (its Expiry less the demote budget came, or Expiry failed) while
// the backend's term context is still live. The contract obliges every
// backend to end the context by then (the demote budget is the time the
// demote needs before a successor may begin), and a promoted leader at
// rest stops only when it ends; this timer (armTimer considers actUntil)
// makes a backend that fails to do so safe anyway: the loop ends the
// term's context itself, and its end takes the path of a term lost
// (onTermEnded: a leader demotes, with the time counted from the loss).
func (c *Controller) checkExpiry(now time.Time) {
	tm := c.l.term
	if tm == nil || tm.ended || tm.ctx.Err() != nil {
		return
	}
	until, err := tm.actUntil()
	if err == nil {
		tm.actBy = until
		return
	}
	if tm.lostAt.IsZero() {
		tm.lostAt = now
		if !tm.actBy.IsZero() && tm.actBy.Before(now) {
			tm.lostAt = tm.actBy
		}
	}
	c.log.Warn("the term's time to act ran out while the coordination backend had not ended it: ending it here",
		"epoch", tm.epoch, "err", err)
	tm.lapse(err)
}

// stepResult is what a takeover worker reports.
type stepResult struct {
	// read step
	read     bool
	rec      breadcrumb.Record
	version  cluster.Revision
	readErr  error
	failover *cluster.FailoverRequest // a standing request, if any
	choice   *winOutcome              // the rules at a win chose not to take over
	joinErr  error                    // the join checks after the win failed
	// fence step
	fenced      bool
	fenceMethod string // the method that fenced
	fenceErr    error
	// write step (with read: the read step wrote at once); newVersion is
	// the breadcrumb's revision after the write
	written    bool
	newVersion cluster.Revision
	writeErr   error
	// any step: the term was gone before the step could act
	lost error
}

// wrote reports whether the step tried the breadcrumb write (or found the
// term gone right before it).
func (r stepResult) wrote() bool { return r.written || r.writeErr != nil || r.lost != nil }

// termReads are a term's first reads: the breadcrumb and, next to it, the
// failover request. The elector's won callback starts them before it hands
// the term to the loop, so that they travel while the loop takes the term
// (they write nothing: a term the loop gives back just drops them). On the
// term's own session, issued after the elector saw its predecessor's znode
// (or the lock) go: a leaver that saw a request before it left is seen
// with that request, and a graceful leaver's breadcrumb delete (one write
// with its znode's) is seen done.
type termReads struct {
	done     chan struct{} // closed when every field below is set
	rec      breadcrumb.Record
	version  cluster.Revision
	err      error
	failover *cluster.FailoverRequest
	foErr    error
	// For the rules at a win (choice.go): the member records and the
	// last leader position (nil: none).
	members    []cluster.Member
	membersErr error
	leaderPos  *cluster.LeaderPosition
	lpErr      error
	// joinErr is the join checks run again after the win (nil: they
	// pass). The verdict the loop holds may be older than the term's
	// session: a node whose session expired while a move marked its
	// cluster record moved would otherwise lead in the election it left.
	joinErr error
}

// joinAgain runs the join checks for this node's home (startReads).
func (c *Controller) joinAgain(ctx context.Context) error {
	_, err := c.checkJoin(ctx)
	return err
}

// The last leader position matters only to election.max_lag (leaderPos
// false: not read, one request less on the critical path).
//
// join runs the join checks again, beside the reads: issued after the win,
// it sees a mark of a move made before this term's election entry was
// created; a mark made after it finds the entry and refuses the move
// (docs/safety.md, "One election per cluster").
func startReads(ctx context.Context, t cluster.Term, leaderPos bool, join func(context.Context) error) *termReads {
	r := &termReads{done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		r.joinErr = join(ctx)
	}()
	go func() {
		defer wg.Done()
		r.failover, r.foErr = t.ReadFailover(ctx)
	}()
	go func() {
		defer wg.Done()
		r.members, r.membersErr = t.ReadMembers(ctx)
	}()
	go func() {
		defer wg.Done()
		if leaderPos {
			r.leaderPos, r.lpErr = t.ReadLeaderPosition(ctx)
		}
	}()
	go func() {
		defer close(r.done)
		r.rec, r.version, r.err = t.ReadBreadcrumb(ctx)
		wg.Wait()
	}()
	return r
}

func (c *Controller) onTermWon(ev termWon) {
	l := &c.l
	if l.cand == nil || l.cand.gen != ev.gen || l.term != nil {
		close(ev.release) // a candidacy we ended already: give it back
		return
	}
	epoch := l.floor + ev.t.Epoch()
	// The term's context is the backend's, which the loop may also end
	// itself (checkExpiry): whatever runs under it stops either way.
	tctx, lapse := context.WithCancelCause(ev.ctx)
	tm := &term{t: ev.t, ctx: tctx, lapse: lapse, epoch: epoch, wonAt: time.Now(), release: ev.release, budget: c.budget, set: c.takeoverSettings(ev.t),
		proved: l.provedOut}
	l.term, l.epoch = tm, epoch
	l.provedOut, l.proving = nil, nil // a proof stands for the next term won only
	c.metrics.ElectionWon()
	context.AfterFunc(tctx, func() { c.send(termEnded{epoch: epoch, cause: context.Cause(tctx), at: time.Now()}) })
	if want, why := c.want(time.Now()); !want || l.cand.cancelled {
		// Won just before the candidacy could end (a hook is stuck, or a
		// duplicate or mismatched node appeared): give it back at once.
		label := "candidacy ended"
		if why != nil {
			label = why.label
		}
		c.log.Warn("elected while this node may not lead; giving leadership back", "why", label, "epoch", epoch)
		tm.phase = phRelease
		return
	}
	if _, seen := c.home.Load(); epoch <= seen {
		err := fmt.Errorf("the term's epoch %d is not above %d, the highest this node led with: "+
			"the cluster record's epoch floor (%d) is too low for a cluster moved from another coordination service", epoch, seen, l.floor)
		c.log.Error("refusing to lead: epochs must only increase", "epoch", epoch, "err", err)
		c.setErr(err.Error())
		c.backoff("epoch_floor")
		tm.phase = phRelease
		return
	}
	go func() {
		if err := c.home.Saw(epoch); err != nil {
			c.log.Warn("cannot remember this term's epoch on disk", "epoch", epoch, "err", err)
		}
	}()
	if err := checkDemoteBudget(c.cfg, c.budget, ev.t); err != nil {
		c.log.Error("refusing to lead: the demote hook cannot finish before a successor may be elected", "epoch", epoch, "err", err)
		c.setErr(err.Error())
		c.backoff("demote_budget")
		tm.phase = phRelease
		return
	}
	c.setState(StateFencing, reasonElected)
	c.stopFollowing()
	tm.reads = ev.reads
	seen, failed := l.seenFailover, c.failedSet(time.Now())
	c.startStep(tm, phReading, func(tm *term) stepResult { return c.readStep(tm, seen, failed) })
}

// startStep runs one takeover step in a worker under the term's context.
func (c *Controller) startStep(tm *term, p phase, step func(*term) stepResult) {
	tm.phase, tm.worker = p, true
	go func() { c.send(stepDone{epoch: tm.epoch, res: step(tm)}) }()
}

// readStep takes the term's first reads (termReads) and, when they leave
// nothing to decide (no breadcrumb, or ours of this very term, and no
// failover request keeping us out: onRead would start the write next),
// writes the breadcrumb at once, saving the loop a round trip on the
// critical path. seen is the loop's seenFailover when the step began,
// failed the nodes that recently failed a handover (choice.go). Before
// any write, the rules at a win (choose) may decide that another node
// should lead: the step then writes nothing but that node's request.
func (c *Controller) readStep(tm *term, seen string, failed map[string]bool) stepResult {
	r := tm.reads
	if r == nil { // not started by the won callback
		r = startReads(tm.ctx, tm.t, tm.set.maxLag != nil, c.joinAgain)
	}
	select {
	case <-r.done:
	case <-tm.ctx.Done():
		return stepResult{read: true, readErr: context.Cause(tm.ctx)}
	}
	if r.joinErr != nil {
		return stepResult{read: true, joinErr: r.joinErr}
	}
	if r.foErr != nil && tm.ctx.Err() == nil {
		c.log.Warn("cannot read the failover request; taking over as if there were none", "err", r.foErr)
	}
	res := stepResult{read: true, rec: r.rec, version: r.version, readErr: r.err, failover: r.failover}
	if c.failoverKeepsOut(res.failover, seen, time.Now()) {
		return res
	}
	if res.choice = c.choose(tm, r, failed); res.choice != nil {
		return res
	}
	if breadcrumb.Assess(res.rec, res.readErr, c.cfg.NodeID, tm.epoch) != breadcrumb.NothingToFence {
		return res
	}
	if tm.set.prePromote {
		return res // the pre_promote hook runs before the write
	}
	w := c.write(tm, res.version)
	res.written, res.newVersion, res.writeErr, res.lost = w.written, w.newVersion, w.writeErr, w.lost
	return res
}

// failoverKeepsOut reports whether req, read at the start of a term, is a
// manual failover to another node that this node has not acted on yet
// (seen: the key of the last one it did) and that still stands: then this
// node must not take over, whatever its elector won before the request
// reached it.
func (c *Controller) failoverKeepsOut(req *cluster.FailoverRequest, seen string, now time.Time) bool {
	return req != nil && !req.Done && req.To != c.cfg.NodeID && req.Key() != seen && req.StandFor(now) > 0
}

// fenceStep fences the node the breadcrumb names.
func (c *Controller) fenceStep(tm *term) stepResult {
	rec := tm.prev
	t := fencer.Target{NodeID: rec.NodeID, Host: rec.Host, AdminURL: rec.AdminURL, Epoch: rec.Epoch, ServiceAddress: rec.ServiceAddress}
	start := time.Now()
	method, err := tm.set.fence.Fence(tm.ctx, t)
	if err != nil {
		return stepResult{fenceErr: err}
	}
	c.log.Info("previous leader fenced", "target", rec.NodeID, "target_epoch", rec.Epoch, "method", method, "duration_seconds", time.Since(start).Seconds())
	return stepResult{fenced: true, fenceMethod: method}
}

// writeStep writes our breadcrumb at the version onRead kept.
func (c *Controller) writeStep(tm *term) stepResult { return c.write(tm, tm.version) }

// write writes our breadcrumb, guarded by the term's znode and CAS on
// version (the one read; zero: absent), after a synchronous look at the
// lease.
func (c *Controller) write(tm *term, version cluster.Revision) stepResult {
	if err := tm.gone(); err != nil {
		return stepResult{lost: err}
	}
	// No Instance yet: failoverd 1.x refuses breadcrumbs with fields it does
	// not know, so during a rolling upgrade an old node elected after us would
	// call ours unreadable and refuse to promote. ownPreviousTerm does not
	// need it (the admin URL already tells an earlier run of this node from a
	// live duplicate); write it once every supported version reads it.
	// ServiceAddress likewise is written only when configured (docs/configuration.md
	// says to configure it once every node runs this version).
	rec := breadcrumb.Record{NodeID: c.cfg.NodeID, Host: c.cfg.Host, AdminURL: c.cfg.AdminURL, Epoch: tm.epoch, Since: time.Now().UTC(),
		ServiceAddress: c.cfg.ServiceAddress}
	v, err := tm.t.WriteBreadcrumb(pauseBeforeBreadcrumb(tm.ctx, c.log, tm.epoch), rec, version)
	if err != nil {
		return stepResult{writeErr: err}
	}
	c.log.Debug("breadcrumb written", "epoch", tm.epoch, "duration_seconds", time.Since(tm.wonAt).Seconds())
	return stepResult{written: true, newVersion: v}
}

func (c *Controller) onStepDone(ev stepDone) {
	l := &c.l
	tm := l.term
	if tm == nil || tm.epoch != ev.epoch {
		return
	}
	tm.worker = false
	r := ev.res
	switch {
	case r.read:
		c.onRead(tm, r)
	case r.lost != nil:
		c.log.Warn("leadership lost before promotion", "epoch", tm.epoch, "err", r.lost)
		tm.phase = phRelease
	case r.fenceErr != nil:
		if tm.ctx.Err() == nil {
			c.metrics.FencingFailed()
			c.log.Error("fencing failed: not promoting", "target", tm.prev.NodeID, "target_epoch", tm.prev.Epoch, "err", r.fenceErr)
			c.setErr(r.fenceErr.Error())
			c.backoff("fencing_failed")
		}
		tm.phase = phRelease
	case r.fenced:
		tm.fenceMethod = r.fenceMethod
		c.fenced(tm)
	default:
		c.onWritten(tm, r)
	}
}

// onWritten: the breadcrumb write is over (r.written, r.writeErr or r.lost).
func (c *Controller) onWritten(tm *term, r stepResult) {
	switch {
	case r.lost != nil:
		c.log.Warn("leadership lost before promotion", "epoch", tm.epoch, "err", r.lost)
		tm.phase = phRelease
	case r.writeErr != nil:
		c.log.Warn("breadcrumb write failed; not promoting", "epoch", tm.epoch, "err", r.writeErr)
		c.setErr(r.writeErr.Error())
		c.backoff("breadcrumb_write_failed")
		tm.phase = phRelease
	case r.written:
		tm.bcVersion = r.newVersion
		if err := tm.valid(); err != nil {
			c.log.Warn("lease ran out before promotion", "epoch", tm.epoch, "err", err)
			tm.phase = phRelease
			return
		}
		c.setState(StatePromoting, "fenced")
		tm.phase = phWaitPromote
	}
}

// onRead decides what the breadcrumb (and the failover request) read at
// the start of a term asks for.
func (c *Controller) onRead(tm *term, r stepResult) {
	l := &c.l
	if r.choice != nil && c.onChoice(tm, r.choice) {
		// The rules chose another node (or none): also when the term
		// ended meanwhile (the failover watch may report the request
		// written, and end the term for it, before this result).
		return
	}
	if tm.ctx.Err() != nil {
		tm.phase = phRelease
		return
	}
	if r.joinErr != nil {
		// Nothing was written. A refusal stands as the join verdict
		// until the member publisher's next check says otherwise.
		c.log.Error("elected, but the join checks now refuse this node: giving leadership back", "epoch", tm.epoch, "err", r.joinErr)
		if joinVerdict(r.joinErr) {
			l.joinErr = r.joinErr
			c.setJoinProblem(r.joinErr)
		} else {
			c.setErr(r.joinErr.Error())
			c.backoff("join_check")
		}
		tm.phase = phRelease
		return
	}
	if req := r.failover; c.failoverKeepsOut(req, l.seenFailover, time.Now()) {
		// A manual failover to another node stands: this node must not take
		// over, whatever its elector won before the request reached us.
		// (The read step wrote nothing then, unless the loop acted on a
		// newer request meanwhile: that write, if any, is left for the
		// target to fence, as one cut short by the end of a term is.)
		c.log.Info("elected while a manual failover to another node stands; giving leadership back", "to", req.To, "epoch", tm.epoch)
		c.onFailoverSeen(req)
		tm.phase = phRelease
		return
	}
	tm.version = r.version
	if req := r.failover; req != nil && !req.Done && req.To == c.cfg.NodeID && req.StandFor(time.Now()) > 0 {
		// The request this term answers. One marked done was answered by
		// an earlier term (it stays until its requester withdraws it, or
		// for good when that requester is gone): it says nothing of why
		// this one began.
		tm.request = req
	}
	verdict := breadcrumb.Assess(r.rec, r.readErr, c.cfg.NodeID, tm.epoch)
	if r.wrote() && verdict != breadcrumb.NothingToFence {
		// Cannot happen: the read step writes only on this verdict.
		c.log.Error("breadcrumb written although the read asks for more; not promoting", "epoch", tm.epoch)
		tm.phase = phRelease
		return
	}
	switch verdict {
	case breadcrumb.Refuse:
		var ce *breadcrumb.CorruptError
		if errors.As(r.readErr, &ce) {
			c.metrics.BreadcrumbUnreadable()
			c.log.Error("breadcrumb unreadable: refusing to promote", "err", r.readErr, "data", string(ce.Data))
		} else {
			c.log.Warn("cannot read the breadcrumb; not promoting", "err", r.readErr)
		}
		c.setErr(r.readErr.Error())
		c.backoff("breadcrumb_unreadable")
		tm.phase = phRelease
		return
	case breadcrumb.NothingToFence:
		if r.readErr == nil {
			rec := r.rec
			if rec.NodeID != c.cfg.NodeID || rec.Epoch != tm.epoch {
				tm.prev = &rec
			}
		}
		if r.wrote() {
			c.onWritten(tm, r)
			return
		}
		c.fenced(tm)
		return
	}
	rec := r.rec
	tm.prev = &rec
	own := c.ownPreviousTerm(rec)
	if rec.NodeID == c.cfg.NodeID && !own {
		// Our id, but another host or another process on this host: a
		// second node was configured with this id. Its service is not
		// ours; it must be fenced like any other.
		c.log.Error("the breadcrumb names this node id but another host or process: a second node uses this id; fencing it",
			"host", rec.Host, "admin_url", rec.AdminURL, "instance", rec.Instance, "target_epoch", rec.Epoch)
	}
	switch {
	case own:
		// An earlier leadership of this very node (a restart, or a term that
		// ended without cleanup): its service is ours, so demoting it locally
		// is the fence (in the hook slot, see startNextHook).
		tm.phase = phFencePrev
	case tm.proved.covers(rec):
		tm.fenceMethod = tm.proved.method
		c.log.Info("previous leader was fenced before this term began: not fencing it again", "target", rec.NodeID,
			"target_epoch", rec.Epoch, "method", tm.fenceMethod, "fenced_seconds_ago", time.Since(tm.proved.at).Seconds())
		c.fenced(tm)
	case tm.set.fence == nil:
		c.log.Warn("promoting without fencing the previous leader (fencing.allow_none)", "target", rec.NodeID, "target_epoch", rec.Epoch)
		tm.fenceMethod = cluster.FenceSkipped
		c.fenced(tm)
	default:
		c.startStep(tm, phFencing, c.fenceStep)
	}
}

// onFencePrevDone: the local demote of our own previous term is over.
func (c *Controller) onFencePrevDone(tm *term, err error) {
	if c.l.term != tm {
		return
	}
	if err != nil && tm.ctx.Err() != nil {
		// The term ended meanwhile and its context killed the demote:
		// not a fencing failure, nothing to back off from.
		c.log.Warn("leadership lost while demoting our own previous term", "epoch", tm.epoch, "err", err)
		tm.phase = phRelease
		return
	}
	if err != nil {
		c.metrics.FencingFailed()
		c.log.Error("demoting our own previous term failed: not promoting", "target_epoch", tm.prev.Epoch, "err", err)
		c.setErr(err.Error())
		c.backoff("fencing_failed")
		tm.phase = phRelease
		return
	}
	c.log.Info("previous term of this node fenced by a local demote", "target_epoch", tm.prev.Epoch)
	tm.fenceMethod = cluster.FenceLocalDemote
	c.fenced(tm)
}

// fenced: nothing is left to fence. The pre_promote hook, if configured,
// runs next (in the hook slot, see startNextHook); then the breadcrumb is
// written, after its own look at the lease.
func (c *Controller) fenced(tm *term) {
	c.fenceSucceeded()
	if tm.set.prePromote {
		tm.phase = phPrePromote
		return
	}
	c.startStep(tm, phWriting, c.writeStep)
}

// onPrePromoteDone: the pre_promote hook is over. A failure vetoes the
// promotion: nothing was written, so the term is given back (the
// candidacy ends with causeVeto) and the node backs off like after any
// failed takeover, so that another candidate can take over.
func (c *Controller) onPrePromoteDone(tm *term, err error) {
	if c.l.term != tm {
		return
	}
	if err != nil && tm.gone() != nil {
		// The term ended meanwhile (its context kills the hook): not a veto.
		c.log.Warn("leadership lost while the pre_promote hook ran", "epoch", tm.epoch, "err", err)
		tm.phase = phRelease
		return
	}
	if err != nil {
		msg := "pre_promote hook vetoed the promotion: " + err.Error()
		c.log.Error("pre_promote hook vetoed the promotion: not promoting, giving leadership back", "epoch", tm.epoch, "err", err)
		c.metrics.PrePromoteVetoed()
		c.setErr(msg)
		c.backoffWith("pre_promote_veto", causeVeto)
		tm.phase = phRelease
		return
	}
	c.startStep(tm, phWriting, c.writeStep)
}

func (c *Controller) onPromoteDone(tm *term, err error) {
	l := &c.l
	if err != nil || tm.gone() != nil {
		c.metrics.Promotion("failure")
		if errors.Is(err, proc.ErrUnkillable) {
			c.metrics.LeadershipLost(causeStuck.label)
		}
		c.setState(StateDemoting, "promote failed")
		tm.endReason, tm.promoteErr, tm.phase = reasonPromote, err, phEndDemote
		if lost := tm.lossAt(time.Now()); !lost.IsZero() {
			// The term was lost during the promote: the demote's time
			// counts from the loss (the promote's kill grace, then the
			// demote timeout), not from the demote's own late start.
			tm.forcedBy = lost.Add(killGrace(c.cfg.Promote) + c.cfg.Demote.Timeout)
		}
		return
	}
	c.metrics.Promotion("success")
	c.metrics.FailoverDuration(time.Since(tm.wonAt))
	// The takeover worked: whatever failure or refusal held it up is over.
	l.failures, l.lastErr = 0, ""
	c.setState(StateLeader, "promoted")
	c.metrics.Leader(true, tm.epoch)
	tm.phase = phLeader
	c.recordHistory(tm, time.Now())
	c.promoted(tm, time.Now())
	if c.cfg.PreemptAfter > 0 {
		tm.membersWatched = true
		go c.watchMembers(tm.ctx, tm.epoch)
	}
	// Mark a pending failover request to this node done, so the other
	// nodes stop standing aside. Best effort: the requester deletes the
	// request when it sees us lead, and the request times out anyway.
	go func() {
		ctx, cancel := context.WithTimeout(tm.ctx, 2*time.Second)
		defer cancel()
		if err := tm.t.CompleteFailover(ctx, tm.epoch); err != nil {
			c.log.Warn("could not mark the failover request done; the others rejoin when it is deleted or times out", "err", err)
		}
	}()
}

// onTermEnded: the term's context ended. A leader demotes first; a term
// that promoted nothing ends with its running step or hook.
func (c *Controller) onTermEnded(ev termEnded) {
	l := &c.l
	tm := l.term
	if tm == nil || tm.epoch != ev.epoch || tm.ended {
		return
	}
	tm.ended = true
	if tm.lostAt.IsZero() {
		tm.lostAt = ev.at
		if !tm.actBy.IsZero() && tm.actBy.Before(ev.at) {
			tm.lostAt = tm.actBy // noticed late: lost by the clock already
		}
	}
	switch tm.phase {
	case phLeader:
		reason := lossReason(ev.cause)
		if c.stopsWhilePaused(reason) {
			c.log.Warn("graceful stop while the cluster is paused: leaving the service as it is (no demote; the breadcrumb stays, so whoever leads next fences it)", "epoch", tm.epoch)
			c.metrics.Leader(false, tm.epoch)
			c.metrics.LeadershipLost(reason)
			tm.phase = phRelease
			return
		}
		c.log.Warn("leadership ended: demoting", "epoch", tm.epoch, "reason", reason, "cause", ev.cause)
		c.metrics.Leader(false, tm.epoch)
		c.metrics.LeadershipLost(reason)
		c.setState(StateDemoting, reason)
		tm.endReason, tm.phase = reason, phEndDemote
		// The demote's time counts from the loss, not from when this
		// loop got to it (endDemoteRun).
		tm.forcedBy = tm.lostAt.Add(c.cfg.Demote.Timeout)
	case phFencePrev, phPrePromote, phWaitPromote:
		tm.phase = phRelease // nothing started: nothing to undo
	case phEndDemote, phEndDemoting:
		if tm.gracefulDemoting() {
			// Counted from the loss, not from when this loop saw it, and
			// never past the last cut seen while the term was valid: the
			// elector, too, may notice a lapsed lease late.
			at := ev.at.Add(c.cfg.Demote.Timeout)
			if !tm.lastCut.IsZero() && tm.lastCut.Before(at) {
				at = tm.lastCut
			}
			c.forceDemote(tm, ev.cause, at)
		}
	}
}

// onEndDemoteDone: the demote that ends a term is over. Only after a
// demote that worked, and only on a graceful end, the breadcrumb goes
// (with the znode, in one write); otherwise it stays so the successor
// fences us.
func (c *Controller) onEndDemoteDone(tm *term, err error) {
	if err != nil {
		c.setErr(err.Error())
	}
	if tm.promoteErr != nil {
		c.setErr(tm.promoteErr.Error())
		c.backoff("promote_failed")
	}
	if err != nil || tm.forced || !graceful(tm.endReason) {
		tm.phase = phRelease
		return
	}
	tm.phase = phFinishing
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
		defer cancel()
		c.send(termFinished{epoch: tm.epoch, err: tm.t.Finish(ctx, tm.bcVersion)})
	}()
}

func (c *Controller) onTermFinished(ev termFinished) {
	tm := c.l.term
	if tm == nil || tm.epoch != ev.epoch {
		return
	}
	switch {
	case ev.err != nil && tm.promoteStarted:
		c.log.Warn("breadcrumb not deleted; the successor will fence us", "err", ev.err)
	case ev.err != nil:
		c.log.Warn("could not delete the breadcrumb naming this unpromoted term; whoever leads next fences us", "epoch", tm.epoch, "err", ev.err)
	case !tm.promoteStarted:
		c.log.Info("breadcrumb naming this unpromoted term deleted with its election entry", "epoch", tm.epoch)
	default:
		c.log.Info("breadcrumb deleted after a graceful demote", "epoch", tm.epoch, "duration_seconds", time.Since(tm.wonAt).Seconds())
	}
	tm.phase = phRelease
}

// releaseOrClean gives a term in phRelease back, unless it never promoted
// and the breadcrumb names it (it wrote it, or its predecessor did, and
// then it declined, handed over, was vetoed, or lost the lease or a race
// with a request): then it first deletes that breadcrumb with its election
// entry (Finish), once, so that whoever leads next has nothing to fence.
// Its service was demoted when this term began (startup demote, or the
// predecessor's fence) and nothing promoted it since, so the breadcrumb
// names a node that is not primary. If Finish fails (the term is over),
// the breadcrumb stays and the next leader fences us: needless, not unsafe.
func (c *Controller) releaseOrClean(tm *term) {
	if !tm.bcVersion.Exists() || tm.promoteStarted || tm.cleaned {
		c.releaseTerm()
		return
	}
	tm.cleaned, tm.phase = true, phFinishing
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
		defer cancel()
		c.send(termFinished{epoch: tm.epoch, err: tm.t.Finish(ctx, tm.bcVersion)})
	}()
}

// releaseTerm gives the term back to the elector, which then deletes its
// znode (if Finish did not) and campaigns again unless the candidacy ended.
func (c *Controller) releaseTerm() {
	l := &c.l
	tm := l.term
	l.term = nil
	defer tm.lapse(cluster.ErrReleased) // after close(release): the backend's own cause comes first
	if cand := l.cand; cand != nil && cand.later != nil {
		// A graceful end kept the candidacy for its demote: it ends now,
		// before the elector gets the term back (and could join again).
		cand.cancel(cand.later)
		cand.later = nil
	}
	close(tm.release)
	c.metrics.Leader(false, tm.epoch)
	c.setState(c.idleState(), "leadership over")
}
