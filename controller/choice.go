package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// Who should lead: the decision a node takes when it wins the
// election, and the preemption of a running leader by a healthier node of
// a higher priority. Both only ever END a term or ask another node to take
// over through a failover request; neither skips or weakens a step of the
// takeover that follows (the target still fences the breadcrumb's leader),
// so no rule here can cause a promotion that the takeover would not have
// made anyway.
//
// The rules at a win, in this order (decideAtWin):
//  1. The target of a standing failover request promotes: the request
//     already chose (an operator, or the node that handed over).
//  2. Candidates are this node and the members that campaign (standby and
//     healthy), may lead (priority > 0) and did not recently fail a
//     handover. With election.max_lag and positions in play, a candidate
//     more than max_lag behind the last position a leader published, or
//     behind the most advanced candidate, is not eligible, nor is one whose
//     position is unknown (unless no member publishes a position at all).
//  3. This node not eligible for lag: it declines (no fence, no breadcrumb
//     write), backs off, and asks the best eligible candidate, if any.
//  4. Best: the highest priority, then the most advanced position (known
//     beats unknown), then this node, then the lowest node id.
//  5. Best is another node: this node hands over to it (a failover request
//     naming it) and ends its term without fencing or promoting.

// Failover request reasons (FailoverRequest.Reason) of a node's own
// requests; an operator's request has none.
const (
	reasonPreferredPriority = cluster.ReasonPreferredPriority
	reasonPreferredPosition = cluster.ReasonPreferredPosition
)

// Why a won term promotes nothing (failoverd_promotion_declined_total{reason}).
const (
	declineLagging   = "lagging"
	declineHandoff   = "handoff_preferred"
	defaultPreempt   = 10 * time.Second
	handoverFailHold = 10 * time.Minute
	// handoverFailHoldMax bounds the hold of a node that failed several
	// handovers in a row (it doubles per failure, see markFailed).
	handoverFailHoldMax = 8 * time.Hour
)

// DeclineReasons lists the reasons a won term can decline to promote, for
// metrics (every label exists from the first scrape).
var DeclineReasons = []string{declineLagging, declineHandoff}

// peer is one node as the rules see it.
type peer struct {
	ID       string
	Priority int
	Position *int64 // nil: unknown
	// Campaigning: in the election now (standby) with a healthy service.
	Campaigning bool
}

// peerOf is the peer a member record describes.
func peerOf(m cluster.Member) peer {
	p := peer{ID: m.NodeID, Priority: DefaultPriority, Position: memberPos(m)}
	if m.Priority != nil {
		p.Priority = *m.Priority
	}
	p.Campaigning = m.State == string(StateStandby) && m.Health == "healthy"
	return p
}

// memberPos is m's published position; a negative one (a record failoverd
// did not write: it publishes only non-negative positions) is unknown, so
// that the lag arithmetic cannot overflow.
func memberPos(m cluster.Member) *int64 {
	if m.Position == nil || *m.Position < 0 {
		return nil
	}
	return m.Position
}

// lagRule is election.max_lag applied to one set of candidates.
type lagRule struct {
	on     bool
	maxLag int64
	leader *int64 // the last position a leader published (nil: none)
	most   *int64 // the most advanced candidate's position (nil: none known)
}

// newLagRule builds the rule for candidates cands: off without max_lag, and
// off when no node of all (every member, candidate or not) publishes a
// position and no leader ever recorded one: no node runs a position
// command, or none ever worked, and the cluster then behaves as without
// positions rather than never promoting. Once a leader position is
// recorded the rule stays on although every position is unknown now (the
// commands time out on a loaded host, say): a node that cannot show it
// holds the data does not promote, it declines and tries again.
func newLagRule(maxLag *int64, leader *int64, cands, all []peer) lagRule {
	r := lagRule{leader: leader}
	for _, c := range cands {
		if c.Position != nil && (r.most == nil || *c.Position > *r.most) {
			v := *c.Position
			r.most = &v
		}
	}
	published := leader != nil || slices.ContainsFunc(all, func(p peer) bool { return p.Position != nil })
	if maxLag != nil && published {
		r.on, r.maxLag = true, *maxLag
	}
	return r
}

// check says why p may not lead under the rule ("": it may).
func (r lagRule) check(p peer) string {
	switch {
	case !r.on:
		return ""
	case p.Position == nil:
		return "its position is unknown while election.max_lag is set"
	case r.most == nil: // cannot happen: p's position is known
		return ""
	case r.leader != nil && *r.leader-*p.Position > r.maxLag:
		return fmt.Sprintf("position %d is %d behind the last leader position %d (election.max_lag %d)",
			*p.Position, *r.leader-*p.Position, *r.leader, r.maxLag)
	case *r.most-*p.Position > r.maxLag:
		return fmt.Sprintf("position %d is %d behind the most advanced candidate's %d (election.max_lag %d)",
			*p.Position, *r.most-*p.Position, *r.most, r.maxLag)
	}
	return ""
}

// winFacts is what the decision at a win looks at.
type winFacts struct {
	Self   peer
	Target bool // this node is the target of a standing failover request
	// NodeTarget: that request was written by a node (a handover, Reason
	// set), not by an operator: the lag rule still applies to this node.
	NodeTarget bool
	Others     []peer // the other members as read at the win
	// Failed are the nodes that recently failed a handover (not candidates).
	Failed    map[string]bool
	MaxLag    *int64 // election.max_lag (nil: no limit)
	LeaderPos *int64 // the last position a leader published (nil: none)
}

// winAction is what a won term does.
type winAction int

const (
	actPromote winAction = iota // take over as usual (fence, write, promote)
	actHandOff                  // ask To to take over; end the term
	actDecline                  // lagging: end the term, back off (and ask To, if any)
)

// winDecision is the outcome of decideAtWin.
type winDecision struct {
	Action winAction
	To     string // actHandOff, actDecline: the node to ask ("" for none)
	Reason string // the request's reason (reasonPreferred*)
	Why    string // for the log and last_error
}

// decideAtWin applies the rules at a win (see the top of this file).
func decideAtWin(f winFacts) winDecision {
	if f.Target && !f.NodeTarget {
		return winDecision{Action: actPromote, Why: "target of a standing failover request"}
	}
	cands := []peer{f.Self}
	for _, p := range f.Others {
		if p.ID != f.Self.ID && p.Campaigning && p.Priority > 0 && !f.Failed[p.ID] {
			cands = append(cands, p)
		}
	}
	rule := newLagRule(f.MaxLag, f.LeaderPos, cands, append(f.Others, f.Self))
	eligible := cands[:0:0]
	for _, p := range cands {
		if rule.check(p) == "" {
			eligible = append(eligible, p)
		}
	}
	best, ok := bestOf(eligible, f.Self.ID)
	if why := rule.check(f.Self); why != "" {
		d := winDecision{Action: actDecline, Why: "not promoting: this node is lagging: " + why}
		if ok && !f.Target {
			// The target of a node's handover asks nobody in turn: no
			// chains of requests; giving up deletes the one it got.
			d.To, d.Reason = best.ID, reasonPreferredPosition
		}
		return d
	}
	if f.Target {
		// A node handed over to this one: no preference (it already
		// chose), but the lag rule holds, as for any automatic promotion.
		return winDecision{Action: actPromote, Why: "target of a node's handover, within election.max_lag"}
	}
	if best.ID == f.Self.ID {
		return winDecision{Action: actPromote, Why: "best candidate"}
	}
	d := winDecision{Action: actHandOff, To: best.ID, Reason: reasonPreferredPosition}
	if best.Priority > f.Self.Priority {
		d.Reason = reasonPreferredPriority
		d.Why = fmt.Sprintf("%s has a higher priority (%d > %d)", best.ID, best.Priority, f.Self.Priority)
	} else {
		d.Why = fmt.Sprintf("%s is more advanced (position %s > %s)", best.ID, posString(best.Position), posString(f.Self.Position))
	}
	return d
}

// bestOf picks the best of cands (rule 4); self wins ties. false: none.
func bestOf(cands []peer, self string) (peer, bool) {
	if len(cands) == 0 {
		return peer{}, false
	}
	return slices.MinFunc(cands, func(a, b peer) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := comparePos(b.Position, a.Position); c != 0 {
			return c
		}
		if (a.ID == self) != (b.ID == self) {
			if a.ID == self {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	}), true
}

// comparePos orders positions, unknown before every known one.
func comparePos(a, b *int64) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return cmp.Compare(*a, *b)
}

func posString(p *int64) string {
	if p == nil {
		return "unknown"
	}
	return fmt.Sprint(*p)
}

// preemptFacts is what a promoted leader looks at to decide whether a
// standby should replace it.
type preemptFacts struct {
	Self   peer   // the leader (its own position as published)
	Others []peer // the other members
	Failed map[string]bool
	MaxLag *int64
}

// preemptCandidates lists the standbys that may replace the leader now: they
// campaign, have a strictly higher priority, did not recently fail a
// handover, and are eligible under max_lag against the leader's own
// position (a leader's position is the reference: more than max_lag behind
// it, or unknown while the leader's is known, is not eligible). Best first.
func preemptCandidates(f preemptFacts) []peer {
	var cands []peer
	for _, p := range f.Others {
		if p.ID != f.Self.ID && p.Campaigning && p.Priority > f.Self.Priority && !f.Failed[p.ID] {
			cands = append(cands, p)
		}
	}
	// Judged against the leader's own position alone: a candidate ahead
	// of the leader (positions are sampled at different times) is fine;
	// with the leader's position unknown, the rule cannot judge and no
	// standby is eligible (the leader keeps leading).
	rule := lagRule{on: f.MaxLag != nil, leader: f.Self.Position, most: f.Self.Position}
	if rule.on {
		rule.maxLag = *f.MaxLag
		if f.Self.Position == nil && !slices.ContainsFunc(f.Others, func(p peer) bool { return p.Position != nil }) {
			rule.on = false // nobody publishes positions
		} else if f.Self.Position == nil {
			return nil
		}
	}
	out := cands[:0:0]
	for _, p := range cands {
		if rule.check(p) == "" {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b peer) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := comparePos(b.Position, a.Position); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// choiceState is the loop's part of the rules: which nodes recently failed
// a handover, the failover request as last seen, and, while this node
// leads, the preemption candidates.
type choiceState struct {
	failed        map[string]failedHold    // node id: not a candidate until then
	standing      *cluster.FailoverRequest // the request as last seen (nil: none)
	standingUntil time.Time                // when this node's timer for it runs out
	doneKey       string                   // key of the last request seen done
	mine          map[string]bool          // keys of the requests this node wrote
	// unconfirmed is the key of the request this node wrote and acted on
	// before its failover watch reported any request since: a "none" the
	// watch reports meanwhile may have been read before the write.
	unconfirmed string
	// checking: a read that tells a stale "none" from a withdrawal of
	// the unconfirmed request runs (checkWithdrawal).
	checking bool
	// handed is the last handover of this node whose target took over
	// (its request seen done): if this node leads again soon after, the
	// handover did not hold (judgeHandover).
	handed *handover

	// While leading with PreemptAfter > 0 (the member watch runs then).
	members    []cluster.Member
	waiting    map[string]time.Time // preemption candidate: since when it was one, without a break
	preempting bool                 // a preemption request is being written
	retryAt    time.Time            // a failed preemption write is retried then
}

// handoverTimeout is how long a node's own failover request stands: the
// target must win the election within it. Two session timeouts cover a
// target whose session is dead (it goes, the next one is asked later) and
// the queue ahead of it (each such node gives the term back at once); the
// pre_promote and promote timeouts keep the others from rejoining (and
// calling the target failed) while it is still promoting. Others stand
// aside that long at most: a target that gives up deletes the request
// (dropOwnTargetRequest), and its promotion marks it done.
func (c *Controller) handoverTimeout(t cluster.Term) time.Duration {
	d := 2*t.SessionTimeout() + c.cfg.Promote.Timeout
	if p := c.cfg.PrePromote; p != nil {
		d += p.Timeout
	}
	return min(d, cluster.MaxFailoverTimeout)
}

// newRequest is a failover request of this node to id.
func (c *Controller) newRequest(to, reason string, timeout time.Duration) cluster.FailoverRequest {
	return cluster.FailoverRequest{To: to, Deadline: time.Now().Add(timeout).UTC(), TimeoutMS: timeout.Milliseconds(),
		ID: NewInstance(), By: c.cfg.NodeID, Reason: reason}
}

// failedHold keeps a node that failed a handover out of the candidates.
type failedHold struct {
	until time.Time // monotonic
	n     int       // handovers to it that failed in a row
	key   string    // the request of the last failure (counted once)
	why   string    // what failed, for status
}

// failedSet is a copy of the nodes that recently failed a handover, for a
// worker.
func (c *Controller) failedSet(now time.Time) map[string]bool {
	out := map[string]bool{}
	for id, h := range c.l.choice.failed {
		if now.Before(h.until) {
			out[id] = true
		}
	}
	return out
}

// markFailed keeps id out of the candidates for a while: a handover to it
// (request key) did not happen, and asking it again at every win would
// keep the cluster without a leader. The hold doubles with each failed
// request in a row (handoverFailHold up to handoverFailHoldMax), so that a
// preferred node that always fails its takeover (a vetoing pre_promote, a
// failing promote) does not cost the cluster a handover, and the leader a
// demote, every handoverFailHold forever; a handover to it that works
// ends the streak.
func (c *Controller) markFailed(id, key, why string) {
	ch := &c.l.choice
	if id == "" || id == c.cfg.NodeID {
		return
	}
	if ch.failed == nil {
		ch.failed = map[string]failedHold{}
	}
	h := ch.failed[id]
	if h.key == key && key != "" {
		return // this request's failure is counted already
	}
	h.n++
	h.key = key
	d := min(handoverFailHold<<min(h.n-1, 16), handoverFailHoldMax)
	h.until = time.Now().Add(d)
	h.why = why
	ch.failed[id] = h
	c.log.Warn("failover target did not take over: not preferring it for a while", "target", id, "why", why, "for", d.String(), "failures_in_a_row", h.n)
}

// noteRequest follows the failover request as the watch (or this node)
// saw it: whether one stands, and whether one to another node ended
// without its target being promoted.
func (c *Controller) noteRequest(r *cluster.FailoverRequest) {
	ch := &c.l.choice
	prev := ch.standing
	switch {
	case r == nil:
		if prev != nil && !prev.Done && prev.Reason != "" && prev.Key() != ch.doneKey {
			// A node's request deleted before done: its target gave
			// up (or the requester went).
			c.markFailed(prev.To, prev.Key(), "the request was deleted before the target was promoted")
		}
		ch.standing = nil
	case r.Done:
		ch.doneKey, ch.standing = r.Key(), r
		if !ch.mine[r.Key()] {
			delete(ch.failed, r.To) // it took over: a later failure starts a new streak
			break
		}
		delete(ch.mine, r.Key())
		c.withdraw(*r)
		ch.handed = &handover{to: r.To, key: r.Key(), at: time.Now()}
	case prev == nil || prev.Key() != r.Key():
		ch.standing, ch.standingUntil = r, time.Now().Add(max(r.StandFor(time.Now()), 0))
	}
}

// staleWithdrawal reports whether r, "no request" as the failover watch
// reports it, may predate a request this node wrote itself and already
// acts on (the watch reads, then waits for the loop): it must not end the
// stand-aside for it. The stand-aside stays bounded by the request's
// timeout.
func (c *Controller) staleWithdrawal(r *cluster.FailoverRequest) bool {
	ch := &c.l.choice
	if r != nil {
		ch.unconfirmed = ""
		return false
	}
	if ch.unconfirmed != "" {
		c.log.Debug("failover watch reports no request before reporting ours; reading it again", "ours", ch.unconfirmed)
		c.checkWithdrawal()
		return true
	}
	return false
}

// checkWithdrawal reads the request again after the failover watch
// reported none while this node's own request was unconfirmed: the read
// is issued after this node's write was answered, so it sees that write
// or a later state. Our request deleted already (its target gave up, or
// timed out, before the watch ever reported it) is then a withdrawal the
// loop acts on (withdrawalChecked), instead of standing aside until the
// request's timeout.
func (c *Controller) checkWithdrawal() {
	ch := &c.l.choice
	if ch.checking {
		return
	}
	ch.checking = true
	key := ch.unconfirmed
	go func() {
		ctx, cancel := context.WithTimeout(c.l.bg, 5*time.Second)
		defer cancel()
		r, err := c.rec.ReadFailover(ctx)
		c.send(withdrawalChecked{key: key, req: r, err: err})
	}()
}

// onWithdrawalChecked: the read started by checkWithdrawal is back.
func (c *Controller) onWithdrawalChecked(ev withdrawalChecked) {
	ch := &c.l.choice
	ch.checking = false
	switch {
	case ev.err != nil || ch.unconfirmed != ev.key:
		// A failed read leaves the stand-aside bounded by the request's
		// timeout; a report of the watch settled it meanwhile.
	case ev.req != nil && ev.req.Key() == ev.key:
		// Ours stands: the "none" predated it; the watch will report it.
	default:
		c.log.Info("our failover request is gone before the watch reported it", "ours", ev.key)
		ch.unconfirmed = ""
		c.onFailoverSeen(ev.req)
	}
}

// onRequestExpired: this node's timer for r ran out.
func (c *Controller) onRequestExpired(r cluster.FailoverRequest) {
	if r.Key() != c.l.choice.doneKey {
		c.markFailed(r.To, r.Key(), "the request timed out")
	}
}

// standingRequest reports whether a failover request stands (not done, and
// this node's timer for it has not run out).
func (c *Controller) standingRequest(now time.Time) bool {
	ch := &c.l.choice
	return ch.standing != nil && !ch.standing.Done && now.Before(ch.standingUntil)
}

// dropOwnTargetRequest deletes a node's request naming this node when this
// node gives up a takeover (it backs off): the others stand aside for it,
// and would wait for its timeout with nobody leading. An operator's
// request is left to its requester.
func (c *Controller) dropOwnTargetRequest() {
	r := c.l.choice.standing
	if r == nil || r.Done || r.To != c.cfg.NodeID || r.Reason == "" {
		return
	}
	c.log.Warn("giving up the takeover another node handed over: deleting its request so the others rejoin", "by", r.By, "reason", r.Reason)
	c.expireFailover(*r)
}

// withdrawDelay is how long a done request of this node stays before it
// is withdrawn: every node's watch must read it done first. One that reads
// only its deletion takes the handover for failed (noteRequest) and holds
// the new leader out of its preference.
const withdrawDelay = 2 * time.Second

// withdraw deletes r, a request of this node that is done, withdrawDelay
// after it was seen done.
func (c *Controller) withdraw(r cluster.FailoverRequest) {
	bg := c.l.bg
	go func() {
		sleepCtx(bg, withdrawDelay)
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		if err := c.rec.WithdrawFailover(ctx, r.Key()); err != nil {
			c.log.Debug("done failover request not withdrawn", "err", err)
		}
	}()
}

// requestFailover writes r unless a request that is not done stands
// (ProposeFailover: never over an operator's). Not under the term's context: the failover
// watch may report r, and the loop end the term for it, before the write's
// answer arrives, and a write that happened must not read as failed.
func (c *Controller) requestFailover(r cluster.FailoverRequest) error {
	ctx, cancel := context.WithTimeout(c.l.bg, 5*time.Second)
	defer cancel()
	return c.rec.ProposeFailover(ctx, r)
}

// ownRequest records r, a request this node wrote and acts on now.
func (c *Controller) ownRequest(r cluster.FailoverRequest) {
	ch := &c.l.choice
	if ch.mine == nil {
		ch.mine = map[string]bool{}
	}
	ch.mine[r.Key()] = true
	ch.unconfirmed = r.Key()
}

// winOutcome is the decision at a win, taken in the read step's worker,
// and the request it wrote (if any).
type winOutcome struct {
	d      winDecision
	label  string // metric label of a declined promotion ("": none)
	req    *cluster.FailoverRequest
	reqErr error
}

// choose applies the rules at a win to the term's first reads; nil means
// take over as usual. When another node should lead, it writes the
// failover request naming it before the term is given back, so that the
// next winner's first reads (issued after our znode went) see it.
func (c *Controller) choose(tm *term, r *termReads, failed map[string]bool) *winOutcome {
	maxLag := tm.set.maxLag
	self := peer{ID: c.cfg.NodeID, Priority: tm.set.priority, Campaigning: true}
	now := time.Now()
	f := winFacts{Self: self, Failed: failed, MaxLag: maxLag}
	if req := r.failover; req != nil && !req.Done && req.To == c.cfg.NodeID && req.StandFor(now) > 0 {
		f.Target, f.NodeTarget = true, req.Reason != ""
	}
	switch {
	case f.Target && (!f.NodeTarget || maxLag == nil):
	case r.membersErr != nil || (maxLag != nil && r.lpErr != nil):
		if maxLag == nil {
			c.log.Warn("cannot read the member records: taking over without looking for a better candidate", "err", r.membersErr)
			return nil
		}
		err := r.membersErr
		if err == nil {
			err = r.lpErr
		}
		return &winOutcome{d: winDecision{Action: actDecline, Why: "not promoting: cannot read the positions to apply election.max_lag: " + err.Error()}}
	default:
		if r.leaderPos != nil {
			v := r.leaderPos.Position
			f.LeaderPos = &v
		}
		for _, m := range r.members {
			if m.NodeID == c.cfg.NodeID {
				f.Self.Position = memberPos(m)
				continue
			}
			f.Others = append(f.Others, peerOf(m))
		}
	}
	d := decideAtWin(f)
	if d.Action == actPromote {
		return nil
	}
	o := &winOutcome{d: d, label: declineHandoff}
	if d.Action == actDecline {
		o.label = declineLagging
	}
	if d.To != "" {
		req := c.newRequest(d.To, d.Reason, tm.set.handover)
		o.req = &req
		o.reqErr = c.requestFailover(req)
	}
	return o
}

// onChoice acts on a decision at a win that was not to take over; false:
// take over after all (the request to the better node could not be
// written).
func (c *Controller) onChoice(tm *term, o *winOutcome) bool {
	d := o.d
	if o.reqErr != nil {
		c.log.Warn("could not ask another node to take over", "to", d.To, "err", o.reqErr)
		if d.Action == actHandOff {
			return false
		}
		o.req = nil
	}
	if o.label != "" {
		c.metrics.PromotionDeclined(o.label)
	}
	if o.req != nil {
		c.ownRequest(*o.req)
	}
	switch d.Action {
	case actHandOff:
		c.log.Info("elected while a better candidate waits: handing over without fencing or promoting",
			"to", d.To, "reason", d.Reason, "why", d.Why, "epoch", tm.epoch)
		c.onFailoverSeen(o.req) // stands aside for it, and gives the term back
	default:
		c.log.Warn("elected but not promoting", "why", d.Why, "epoch", tm.epoch, "asked", d.To)
		c.setErr(d.Why)
		if o.req != nil {
			c.onFailoverSeen(o.req)
		}
		c.backoff(cmp.Or(o.label, "positions_unreadable"))
	}
	tm.phase = phRelease
	return true
}

// watchMembers feeds the member records to the loop while this node leads
// (term epoch), for preemption; the backend's watch follows new sessions.
func (c *Controller) watchMembers(ctx context.Context, epoch int64) {
	for ctx.Err() == nil {
		err := c.rec.WatchMembers(ctx, func(ms []cluster.Member) { c.send(membersSeen{epoch: epoch, members: ms}) })
		if ctx.Err() == nil {
			c.log.Debug("member watch ended; watching again", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

func (c *Controller) onMembersSeen(ev membersSeen) {
	if tm := c.l.term; tm != nil && tm.epoch == ev.epoch && tm.phase == phLeader {
		c.l.choice.members = ev.members
	}
}

// leading reports whether this node is the promoted leader now.
func (c *Controller) leading() bool { return c.l.term != nil && c.l.term.phase == phLeader }

// operatorsChoice reports whether this node's term began as the target of
// an operator's failover request (failover --to): such a term is never
// preempted, so that moving the leadership off a node (to work on it) is
// not undone preempt_after later. Its next term is automatic again.
func (c *Controller) operatorsChoice() bool {
	tm := c.l.term
	return tm != nil && tm.request != nil && tm.request.Reason == ""
}

// handover is a request of this node whose target took over.
type handover struct {
	to, key string
	at      time.Time // when this node saw it done
}

// judgeHandover, once this node leads again after handing over, tells
// whether the handover held: it did once its target led for
// election.preempt_after (handoverFailHold without preemption). A target
// that lost its leadership sooner (its health flaps, say) counts as a
// failed handover, so that a preferred node whose health flaps is not
// handed the leadership again every preempt_after, each time at the cost
// of a demote and a promote; one that led longer and then crashed ends
// its streak and gets its leadership back preempt_after after it returns.
// This node cannot see when the target's term ended: up to a session
// timeout before this one began (a crash is noticed when its session
// expires), so it credits the target with the time between the takeover
// and this term's start less one session timeout.
func (c *Controller) judgeHandover(now time.Time) {
	ch := &c.l.choice
	h := ch.handed
	if h == nil || !c.leading() {
		return
	}
	ch.handed = nil
	if c.operatorsChoice() {
		return // an operator moved the leadership back: says nothing of the target
	}
	need := handoverFailHold
	if c.cfg.PreemptAfter > 0 {
		need = c.cfg.PreemptAfter
	}
	led := now.Sub(h.at) - c.l.term.t.SessionTimeout()
	if led < need {
		c.markFailed(h.to, "lost:"+h.key, fmt.Sprintf("it led for less than %s after taking over", need))
		return
	}
	delete(ch.failed, h.to)
}

// updateWaiting keeps, per preemption candidate, since when it has been
// one without a break (on this node's clock).
func (c *Controller) updateWaiting(now time.Time) []peer {
	ch := &c.l.choice
	c.judgeHandover(now)
	if !c.leading() || c.cfg.PreemptAfter <= 0 || c.operatorsChoice() {
		ch.members, ch.waiting = nil, nil
		return nil
	}
	f := preemptFacts{Self: peer{ID: c.cfg.NodeID, Priority: c.priority}, Failed: c.failedSet(now), MaxLag: c.cfg.MaxLag}
	for _, m := range ch.members {
		if m.NodeID == c.cfg.NodeID {
			f.Self.Position = m.Position
			continue
		}
		f.Others = append(f.Others, peerOf(m))
	}
	cands := preemptCandidates(f)
	next := map[string]time.Time{}
	for _, p := range cands {
		since, ok := ch.waiting[p.ID]
		if !ok {
			since = now
			c.log.Info("a standby of a higher priority waits: handing over to it if it stays eligible", "standby", p.ID, "priority", p.Priority, "after", c.cfg.PreemptAfter.String())
		}
		next[p.ID] = since
	}
	ch.waiting = next
	return cands
}

// preemptIfDue hands over to the best standby of a higher priority that
// has waited PreemptAfter, with the existing switchover: a failover
// request naming it, which this node then acts on (demote, graceful end,
// the target takes over). Not while the cluster is paused (maintenance:
// no automatic handover), while a request stands, or
// while the last write is in flight or failed recently.
func (c *Controller) preemptIfDue(now time.Time) {
	ch := &c.l.choice
	cands := c.updateWaiting(now)
	if len(cands) == 0 || ch.preempting || now.Before(ch.retryAt) || c.standingRequest(now) || c.paused() {
		return
	}
	for _, p := range cands {
		if now.Sub(ch.waiting[p.ID]) < c.cfg.PreemptAfter {
			continue
		}
		tm := c.l.term
		// This leader keeps its term through its graceful demote
		// (graceful.go): the request stands that much longer, so that
		// the target is not taken for failed meanwhile.
		req := c.newRequest(p.ID, reasonPreferredPriority, min(c.handoverTimeout(tm.t)+gracefulTimeout(c.cfg)+killGrace(c.cfg.Demote), cluster.MaxFailoverTimeout))
		ch.preempting = true
		// Ours before the write: the done report may come before the
		// write's answer (onPreemptWritten), and must find it ours.
		if ch.mine == nil {
			ch.mine = map[string]bool{}
		}
		ch.mine[req.Key()] = true
		c.log.Info("handing leadership over to a standby of a higher priority", "to", p.ID, "priority", p.Priority, "waited", now.Sub(ch.waiting[p.ID]).Round(time.Millisecond).String(), "epoch", tm.epoch)
		go func() { c.send(preemptWritten{epoch: tm.epoch, req: req, err: c.requestFailover(req)}) }()
		return
	}
}

func (c *Controller) onPreemptWritten(ev preemptWritten) {
	ch := &c.l.choice
	ch.preempting = false
	if ev.err != nil {
		c.log.Warn("could not ask the standby of a higher priority to take over; trying again", "to", ev.req.To, "err", ev.err)
		ch.retryAt = time.Now().Add(time.Second)
		delete(ch.mine, ev.req.Key())
		return
	}
	c.metrics.Preempted()
	if ev.req.Key() == ch.doneKey {
		return // the watch reported it, and its target took over, already
	}
	c.ownRequest(ev.req)
	req := ev.req
	c.onFailoverSeen(&req) // as the watch will report it: stand aside, hand over
}

// considerChoice adds the moments the rules wait for to the loop's timer.
func (c *Controller) considerChoice(consider func(time.Time)) {
	ch := &c.l.choice
	if c.leading() && c.cfg.PreemptAfter > 0 {
		for _, since := range ch.waiting {
			consider(since.Add(c.cfg.PreemptAfter))
		}
		consider(ch.retryAt)
	}
	for _, h := range ch.failed {
		consider(h.until) // a candidate again: preemption looks again
	}
}
