package etcdcluster

import (
	"errors"
	"testing"
	"time"
)

// The lease arithmetic: the default 5s lease renewed every third holds a
// demote budget of up to 2.98s (5 - 0.25 - 1.67 - 0.1), not more.
func TestLeaseFits(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		ttl, renew, budget time.Duration
		ok                 bool
	}{
		{5 * s, 0, 2900 * time.Millisecond, true},
		{5 * s, 0, 3 * s, false},
		{5 * s, s, 3500 * time.Millisecond, true},
		{2 * s, 0, 1200 * time.Millisecond, false}, // 2 - 0.1 - 0.67 - 0.1 = 1.13s
		{3 * s, 0, 500 * time.Millisecond, true},
	} {
		err := LeaseFits(tc.ttl, tc.renew, tc.budget)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrLeaseTooShort) {
			t.Errorf("LeaseFits(%v, %v, %v) = %v; want ok %t", tc.ttl, tc.renew, tc.budget, err, tc.ok)
		}
	}
}

// The deadline is the send time of the newest answered renewal plus the
// granted TTL less TTL/RateDiv; an older answer arriving late never moves
// it back.
func TestSessionDeadline(t *testing.T) {
	s := &Session{done: make(chan struct{})}
	t0 := time.Now()
	s.renewed(t0, 5*time.Second)
	if got, want := s.Deadline(), t0.Add(4750*time.Millisecond); !got.Equal(want) {
		t.Errorf("Deadline = %v after t0, want %v", got.Sub(t0), want.Sub(t0))
	}
	s.renewed(t0.Add(-time.Second), 5*time.Second) // an earlier send answered late
	if got := s.Deadline(); !got.Equal(t0.Add(4750 * time.Millisecond)) {
		t.Errorf("a late answer to an earlier renewal moved the deadline to %v after t0", got.Sub(t0))
	}
}
