package controllertest

import (
	"context"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// Fencing first, then taking over (cluster.FenceFirst), in the world: with
// SetFenceFirst every entry of the node renews, and so heartbeats, every
// BeatInterval, by the clock alone (no goroutine: the version is a
// function of the time); StopRenewals makes a leader's heartbeat stand
// still, ResumeRenewals moves it again. The candidate next in line times
// the leader's heartbeat from the instant it first saw its version, and
// once a version is overdue by SuspectAfter (it stood still for
// BeatInterval plus SuspectAfter) it calls ProveOut, in its Campaign's
// goroutine, and again RetryProveOut after each refusal while that version
// stands; when ProveOut returns nil it ends the leader's term with EndTerm
// and wins through the normal path.

// BeatInterval is how often a renewing entry's heartbeat moves.
const BeatInterval = 100 * time.Millisecond

// RetryProveOut is how long after a refused ProveOut the candidate asks
// again while the same heartbeat stands, as the real electors do.
func RetryProveOut(ff cluster.FenceFirst) time.Duration {
	return max(ff.SuspectAfter, 500*time.Millisecond)
}

// SetFenceFirst configures the node's elector for fencing first with ff
// (ProveOut nil: off), for the entries it creates from now on: set it
// before Campaign. It panics when ff.SuspectAfter is not positive.
func (n *Node) SetFenceFirst(ff cluster.FenceFirst) {
	if ff.On() && ff.SuspectAfter <= 0 {
		panic(fmt.Sprintf("controllertest: SuspectAfter %v: want a positive one", ff.SuspectAfter))
	}
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.ff = ff
}

// heartbeat returns e's heartbeat version at now and the instant it took
// that version. Call with w.mu held.
func (e *entry) heartbeat(now time.Time, every time.Duration) (int64, time.Time) {
	if e.stood || !now.After(e.beatAt) {
		return e.beat, e.beatAt
	}
	k := now.Sub(e.beatAt) / every
	return e.beat + int64(k), e.beatAt.Add(k * every)
}

// stand makes e's heartbeat stand still at its version now. Call with
// w.mu held.
func (e *entry) stand(now time.Time, every time.Duration) {
	if !e.stood {
		e.beat, e.beatAt = e.heartbeat(now, every)
		e.stood = true
	}
}

// ResumeRenewals renews node id's term again after StopRenewals, as for a
// leader whose connection came back before its term ended: its Expiry lies
// the guarantee ahead again (a term that ended already stays over), and
// its heartbeat moves at once and then every BeatInterval. A node that
// holds no term any more has nothing to resume.
func (w *World) ResumeRenewals(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var t *Term
	for _, e := range w.queue {
		if e.node.id == id && e.term != nil {
			t = e.term
		}
	}
	if t == nil {
		return
	}
	t.frozen = time.Time{}
	now := time.Now()
	if e := t.e; e.stood {
		e.beat, e.beatAt, e.stood = e.beat+1, now, false
	}
	w.bump() // wakes the candidates that wait for the heartbeat to move
}

// Guarantee is how far ahead of now a renewed term's Expiry lies (for terms
// won from now on).
func (w *World) Guarantee() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.guarantee
}

// EndTerm ends the term b names (cluster.TermEnder) if its entry is still
// in the election, of that key, session and epoch, and its heartbeat is
// still at b.Version: the term ends at once, as one whose entry was
// deleted, and the next candidate wins. Otherwise it removes nothing:
// cluster.ErrEntryChanged, or cluster.ErrBeatMoved (wrapped), also for an
// entry that publishes no heartbeat.
func (n *Node) EndTerm(ctx context.Context, b cluster.Beat) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := n.w
	w.mu.Lock()
	for _, x := range w.queue {
		if x.key != b.Entry.Key || x.session != b.Entry.Owner || x.term == nil || x.term.epoch != b.Entry.Created {
			continue
		}
		if !x.beats {
			w.mu.Unlock()
			return fmt.Errorf("%w: %s publishes no heartbeat", cluster.ErrBeatMoved, b.Entry)
		}
		if v, _ := x.heartbeat(time.Now(), w.beatEvery); v != b.Version {
			w.mu.Unlock()
			return fmt.Errorf("%w: %s is at heartbeat %d, not %d", cluster.ErrBeatMoved, b.Entry, v, b.Version)
		}
		t := x.term
		w.remove(x)
		cause := cluster.Reason(cluster.ErrEntryDeleted, "controllertest: the term was ended by a candidate that proved it out")
		t.invalid = cause
		w.mu.Unlock()
		t.cancel(cause)
		return nil
	}
	w.mu.Unlock()
	return fmt.Errorf("%w: %s", cluster.ErrEntryChanged, b.Entry)
}

// suspicion is what a waiting candidate knows of the leader it times.
type suspicion struct {
	leader *entry    // the leader's entry being timed (nil: none)
	since  time.Time // when this candidate began to time it
	tried  int64     // the heartbeat version ProveOut refused last,
	asked  bool      // if any,
	again  time.Time // and when to ask again while it stands
}

// look returns the suspect e's node calls ProveOut for now (nil: none), or
// when to look again (zero: on the next change of the world). Only the
// candidate next in line behind a leader that heartbeats suspects. Call
// with w.mu held.
func (s *suspicion) look(w *World, e *entry, ff cluster.FenceFirst, now time.Time) (*cluster.Suspect, time.Time) {
	if !ff.On() || len(w.queue) < 2 || w.queue[1] != e || w.queue[0].term == nil || !w.queue[0].beats {
		s.leader = nil
		return nil, time.Time{}
	}
	l := w.queue[0]
	if s.leader != l {
		*s = suspicion{leader: l, since: now}
	}
	v, at := l.heartbeat(now, w.beatEvery)
	seen := at
	if seen.Before(s.since) {
		seen = s.since
	}
	overdue := seen.Add(w.beatEvery + ff.SuspectAfter)
	switch {
	case s.asked && s.tried == v && now.Before(s.again):
		return nil, s.again // refused for this version: until it moves, or again
	case now.Before(overdue):
		return nil, overdue
	}
	t := l.term
	return &cluster.Suspect{
		Beat:  cluster.Beat{NodeID: l.node.id, Entry: cluster.Entry{Key: l.key, Owner: l.session, Created: t.epoch}, Version: v},
		Stood: now.Sub(seen),
	}, time.Time{}
}

// awaitTurn waits until e is first in line (true) or ctx ends (false).
// With fencing first, the candidate next in line suspects a leader whose
// heartbeat stood still, asks ProveOut, and ends its term once proved out.
func (n *Node) awaitTurn(ctx context.Context, e *entry) bool {
	w := n.w
	var s suspicion
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		w.mu.Lock()
		ff := n.ff
		if !e.beats {
			ff = cluster.FenceFirst{} // configured after this entry joined
		}
		suspect, due := s.look(w, e, ff, time.Now())
		var ch chan struct{} // without fencing first only the turn matters
		if ff.On() {
			ch = w.changed
		}
		w.mu.Unlock()
		if suspect != nil {
			if ff.ProveOut(ctx, *suspect) == nil {
				_ = n.EndTerm(ctx, suspect.Beat) // refused: the heartbeat moved, or the entry went
				continue
			}
			s.tried, s.asked, s.again = suspect.Beat.Version, true, time.Now().Add(RetryProveOut(ff))
			continue
		}
		var fire <-chan time.Time
		if !due.IsZero() {
			timer.Reset(time.Until(due))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return false
		case <-e.turn:
			return true
		case <-ch:
		case <-fire:
		}
		timer.Stop()
	}
}
