// Package lease is the one place that computes a ZooKeeper leadership's
// timing from the session timeout T, the ensemble's tickTime and the demote
// budget D: the default lease, the renew interval and what is left as
// tolerance. It is the ZooKeeper backend's arithmetic: the elector applies
// it to the timeout ZooKeeper negotiated, and zkcluster's timing check
// (which config validation calls through the daemon's wiring) to the
// configured values, so the two cannot disagree. D itself is the
// controller's (controller.DemoteBudget).
//
// The argument (the election package's doc comment has it in full): a lease
// runs from an anchor, the send time of a write whose touch of the session
// the ZooKeeper leader provably credited (the "credit chain"), and the
// session cannot expire before anchor + T. A leader stops acting at
// anchor + Lease and needs D more to demote, killed if need be; Margin
// (T/20) absorbs clock rate differences and scheduling. So
// Lease + D + Margin <= T.
package lease

import (
	"errors"
	"fmt"
	"time"
)

// MinTolerance is the least a lease must leave beyond two renew intervals
// (the anchor's steady-state lag): the round trips of the renewals and
// scheduling. A lease below 2 × renew + MinTolerance would end on every
// slow renewal, or before a leadership could even start.
const MinTolerance = 100 * time.Millisecond

// MinRenewInterval floors the renew interval: a ticker needs a positive
// period, and renewing faster only loads ZooKeeper.
const MinRenewInterval = 10 * time.Millisecond

// MarginDiv: Margin is T/MarginDiv. RateDiv: clock rates (this host against
// the ZooKeeper leader) are assumed within 1/RateDiv of each other.
const (
	MarginDiv = 20
	RateDiv   = 20
)

// Margin is kept free between Lease + D and the session timeout.
func Margin(session time.Duration) time.Duration { return session / MarginDiv }

// Tick returns the tickTime the arithmetic assumes: tick when known (> 0),
// else session/2, the largest ZooKeeper's default minSessionTimeout (two
// ticks) allows for a negotiated timeout of session.
func Tick(session, tick time.Duration) (assumed time.Duration, known bool) {
	if tick > 0 {
		return tick, true
	}
	return session / 2, false
}

// Gap is the least time between the answer to one write and the sending of
// a later one for the credit chain: the ZooKeeper leader pings every
// follower every tick/2 (by its clock), plus the clock rate margin.
func Gap(session, tick time.Duration) time.Duration {
	t, _ := Tick(session, tick)
	half := t / 2
	return max(half+half/RateDiv, MinRenewInterval)
}

// Timing is a leadership's timing for one session timeout.
type Timing struct {
	Session   time.Duration // T
	Tick      time.Duration // tickTime assumed (TickKnown: configured)
	TickKnown bool
	Budget    time.Duration // D
	Margin    time.Duration // T/20
	Renew     time.Duration // renew interval: at least Gap
	Max       time.Duration // longest lease: T - D - Margin
	Lease     time.Duration // the lease used
	Derived   bool          // Lease is the default (Max)
	Clamped   bool          // a configured lease above Max was shortened
}

// Grace is how long after the lease ended no successor can be elected yet:
// T - Lease - Margin, at least Budget.
func (t Timing) Grace() time.Duration { return t.Session - t.Lease - t.Margin }

// Tolerance is how long, in steady state, a leader keeps its lease without
// an answered renewal: the lease minus the anchor's lag (two renew
// intervals; the renewals' round trips come off it too).
func (t Timing) Tolerance() time.Duration { return t.Lease - 2*t.Renew }

// ReconnectSlack is what the lease leaves, in the worst case, after a
// leader moves to another ZooKeeper server (its server restarted, or a
// connection reset): the anchor may already lag by two renew intervals when
// the connection breaks, and a new connection must build a credit chain of
// its own (one renew interval plus round trips) before the anchor moves
// again. Negative or below MinTolerance: such a move can end the leadership
// (and cause a failover) even though the session survives.
func (t Timing) ReconnectSlack() time.Duration { return t.Tolerance() - t.Renew }

// RidesOutReconnect reports whether a leader keeps its leadership through a
// prompt reconnect to another server at any point of its renewal cycle.
func (t Timing) RidesOutReconnect() bool { return t.ReconnectSlack() >= MinTolerance }

// SessionForReconnect returns the shortest session timeout, in whole
// seconds up to a minute, whose default lease rides out a reconnect
// (RidesOutReconnect) with this tickTime (0: unknown) and demote budget;
// 0 when none does.
func SessionForReconnect(tick, budget time.Duration) time.Duration {
	for s := time.Second; s <= time.Minute; s += time.Second {
		if t, err := Compute(s, tick, budget, 0, 0); err == nil && t.RidesOutReconnect() {
			return s
		}
	}
	return 0
}

// MinLease is the shortest lease this timing accepts: 2 × Renew + MinTolerance.
func (t Timing) MinLease() time.Duration { return 2*t.Renew + MinTolerance }

// ErrTooShort: the lease that fits does not leave a positive tolerance.
var ErrTooShort = errors.New("lease too short")

// Compute derives the timing for a session timeout (as negotiated, or as
// configured for validation), a tickTime (0: unknown), a demote budget, a
// configured lease (0: the default, Max) and a configured renew interval
// (0: Gap; never below Gap). A configured lease above Max is clamped to it.
// It fails with ErrTooShort (the Timing filled in) when the lease is below
// MinLease or Max is.
func Compute(session, tick, budget, lease, renew time.Duration) (Timing, error) {
	t := Timing{Session: session, Budget: budget, Margin: Margin(session)}
	t.Tick, t.TickKnown = Tick(session, tick)
	t.Renew = max(renew, Gap(session, tick))
	t.Max = session - budget - t.Margin
	switch {
	case lease <= 0:
		t.Lease, t.Derived = t.Max, true
	case lease > t.Max:
		t.Lease, t.Clamped = t.Max, true
	default:
		t.Lease = lease
	}
	if t.Lease < t.MinLease() {
		return t, fmt.Errorf("%w: %s", ErrTooShort, t.Explain())
	}
	return t, nil
}

// Explain states the arithmetic, for errors and logs.
func (t Timing) Explain() string {
	tick := "tickTime " + t.Tick.String()
	if !t.TickKnown {
		tick = "tickTime unknown, assumed " + t.Tick.String() + " (half the session timeout)"
	}
	return fmt.Sprintf("session timeout %v - demote budget %v - margin %v leaves at most %v for the lease; "+
		"the lease (%v) must be at least 2 × renew interval %v (%s) + %v = %v",
		t.Session, t.Budget, t.Margin, t.Max, t.Lease, t.Renew, tick, MinTolerance, t.MinLease())
}
