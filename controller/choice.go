package controller

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// Who should lead (issue 13): the decision a node takes when it wins the
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
	p := peer{ID: m.NodeID, Priority: DefaultPriority, Position: m.Position}
	if m.Priority != nil {
		p.Priority = *m.Priority
	}
	p.Campaigning = m.State == string(StateStandby) && m.Health == "healthy"
	return p
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
// position: no node runs a position command, or none that works, and the
// cluster then behaves as without positions rather than never promoting.
func newLagRule(maxLag *int64, leader *int64, cands, all []peer) lagRule {
	r := lagRule{leader: leader}
	for _, c := range cands {
		if c.Position != nil && (r.most == nil || *c.Position > *r.most) {
			v := *c.Position
			r.most = &v
		}
	}
	published := slices.ContainsFunc(all, func(p peer) bool { return p.Position != nil })
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
	Target bool   // this node is the target of a standing failover request
	Others []peer // the other members as read at the win
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
	if f.Target {
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
		if ok {
			d.To, d.Reason = best.ID, reasonPreferredPosition
		}
		return d
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
