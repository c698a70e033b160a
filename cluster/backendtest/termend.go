package backendtest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// Silencer is what the TermEnd obligation needs of a Backend; every
// backend must be one (the obligation fails otherwise).
type Silencer interface {
	// Silence stops node id's renewals for the rest of the test: its
	// connection to the coordination service is held (as Disconnect's),
	// for longer than its lease; a backend without connections stops
	// renewing the node's term. id holds a term.
	Silence(t *testing.T, id string)
	// DemoteBudget is the demote budget the backend's electors were
	// configured with (the daemon gives them the controller's).
	DemoteBudget() time.Duration
}

func init() {
	obligations = append(obligations, obligation{"TermEnd/RenewalsStopped", testTermEndRenewalsStopped})
}

// TermEnd: once a term's renewals stop, its context ends, with a lease or
// session expiry, no later than its Expiry less the demote budget the
// elector was configured with; Expiry fails from then on. A leader at rest
// stops only when its term's context ends, and its demote needs that
// budget before a successor may begin. Node a leads; its renewals stop;
// its Expiry is watched until the term's context ends, which must come by
// the latest Expiry a's term reported less the budget (with half the
// budget of slack for the machine's scheduling).
func testTermEndRenewalsStopped(t *testing.T, b Backend) {
	s, ok := b.(Silencer)
	if !ok {
		t.Fatalf("backendtest: %T is no Silencer, which the TermEnd obligation needs", b)
	}
	budget := s.DemoteBudget()
	ar := newArena(t, b)
	ar.campaign("a")
	ha := ar.nextBy(t, "a")
	time.Sleep(hold) // a few renewals

	var (
		mu     sync.Mutex
		latest time.Time // the latest instant a's Expiry reported
	)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ha.Ctx.Err() == nil {
			exp, err := ha.Term.Expiry()
			if err == nil && ha.Ctx.Err() == nil {
				mu.Lock()
				if exp.After(latest) {
					latest = exp
				}
				mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	silenced := time.Now()
	s.Silence(t, "a")
	cause := ha.waitEnded(t)
	ended := time.Now()
	<-polled
	mu.Lock()
	defer mu.Unlock()
	if latest.IsZero() {
		t.Fatal("a's Expiry never reported an instant")
	}
	t.Logf("renewals stopped; the term ended %v later, at its latest Expiry%+v (demote budget %v): %v",
		ended.Sub(silenced).Round(time.Millisecond), ended.Sub(latest).Round(time.Millisecond), budget, cause)
	if late := ended.Sub(latest.Add(-budget)); late > budget/2 {
		t.Errorf("a's term ended %v after its latest Expiry less the demote budget %v (at Expiry%+v)", late.Round(time.Millisecond), budget, ended.Sub(latest).Round(time.Millisecond))
	}
	if !errors.Is(cause, cluster.ErrLeaseExpired) && !errors.Is(cause, cluster.ErrSessionExpired) {
		t.Errorf("a's term ended with %v; want a cause wrapping %v or %v", cause, cluster.ErrLeaseExpired, cluster.ErrSessionExpired)
	}
	if exp, err := ha.Term.Expiry(); err == nil {
		t.Errorf("a's term ended (%v), yet Expiry reports %v ahead and no error", cause, time.Until(exp).Round(time.Millisecond))
	}
}
