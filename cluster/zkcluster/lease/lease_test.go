package lease

import (
	"errors"
	"testing"
	"time"
)

// The numbers docs/safety.md quotes, and the rule's edges.
func TestCompute(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name                                string
		session, tick, budget, lease        time.Duration
		wantLease, wantRenew, wantTolerance time.Duration
		wantErr, wantClamped, wantTickKnown bool
	}{
		{"5s, tick unknown, demote 1s", 5 * time.Second, 0, ms(1500), 0,
			ms(3250), 1312500 * time.Microsecond, ms(625), false, false, false},
		{"5s, tick 2s, demote 1s", 5 * time.Second, 2 * time.Second, ms(1500), 0,
			ms(3250), ms(1050), ms(1150), false, false, true},
		{"test clusters", 2 * time.Second, ms(200), ms(1100), 0,
			ms(800), ms(105), ms(590), false, false, true},
		{"2s, tick unknown: no lease fits", 2 * time.Second, 0, ms(1100), 0,
			ms(800), ms(525), ms(800) - ms(1050), true, false, false},
		{"configured lease too long: clamped", 5 * time.Second, 0, ms(1500), 4 * time.Second,
			ms(3250), 1312500 * time.Microsecond, ms(625), false, true, false},
		{"configured lease below 2R+100ms", 5 * time.Second, 0, ms(1500), ms(2724),
			ms(2724), 1312500 * time.Microsecond, ms(2724) - 2625*time.Millisecond, true, false, false},
		{"tiny tick: renew floor", time.Second, time.Microsecond, 0, 0,
			ms(950), MinRenewInterval, ms(930), false, false, true},
	} {
		tm, err := Compute(tc.session, tc.tick, tc.budget, tc.lease, 0)
		if (err != nil) != tc.wantErr || err != nil && !errors.Is(err, ErrTooShort) {
			t.Errorf("%s: err %v, want error %v", tc.name, err, tc.wantErr)
		}
		if tm.Lease != tc.wantLease || tm.Renew != tc.wantRenew || tm.Tolerance() != tc.wantTolerance ||
			tm.Clamped != tc.wantClamped || tm.TickKnown != tc.wantTickKnown {
			t.Errorf("%s: %+v (tolerance %v), want lease %v renew %v tolerance %v clamped %v", tc.name, tm, tm.Tolerance(),
				tc.wantLease, tc.wantRenew, tc.wantTolerance, tc.wantClamped)
		}
		if err == nil && (tm.Lease+tm.Budget+tm.Margin > tc.session || tm.Grace() < tm.Budget) {
			t.Errorf("%s: lease %v + budget %v + margin %v exceeds the session", tc.name, tm.Lease, tm.Budget, tm.Margin)
		}
	}
	// A configured renew interval only ever lengthens the gap.
	if tm, _ := Compute(5*time.Second, 2*time.Second, 0, 0, time.Millisecond); tm.Renew != ms(1050) {
		t.Errorf("renew 1ms: %v, want the gap 1.05s", tm.Renew)
	}
}

// Whether a leader keeps its lease through a move to another ZooKeeper
// server, with the numbers of docs/safety.md: the default 5s session rides it out
// only when tick_time is known.
func TestReconnectSlack(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	budget := ms(1500)
	for _, tc := range []struct {
		name          string
		session, tick time.Duration
		want          time.Duration
		rides         bool
	}{
		{"5s, tick unknown", 5 * time.Second, 0, ms(625) - 1312500*time.Microsecond, false},
		{"5s, tick 2s", 5 * time.Second, 2 * time.Second, ms(100), true},
		{"10s, tick unknown", 10 * time.Second, 0, ms(8000) - 3*2625*time.Millisecond, true},
		{"4s, tick 2s", 4 * time.Second, 2 * time.Second, ms(2300) - ms(3150), false},
	} {
		tm, err := Compute(tc.session, tc.tick, budget, 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := tm.ReconnectSlack(); got != tc.want || tm.RidesOutReconnect() != tc.rides {
			t.Errorf("%s: slack %v rides %v, want %v %v", tc.name, got, tm.RidesOutReconnect(), tc.want, tc.rides)
		}
	}
	for _, tc := range []struct {
		tick, want time.Duration
	}{{0, 10 * time.Second}, {2 * time.Second, 5 * time.Second}, {ms(200), 3 * time.Second}, {time.Minute, 0}} {
		if got := SessionForReconnect(tc.tick, budget); got != tc.want {
			t.Errorf("SessionForReconnect(tick %v): %v, want %v", tc.tick, got, tc.want)
		}
		if tc.want > 0 {
			if tm, _ := Compute(tc.want, tc.tick, budget, 0, 0); !tm.RidesOutReconnect() {
				t.Errorf("tick %v: %v does not ride out a reconnect", tc.tick, tc.want)
			}
			if tm, err := Compute(tc.want-time.Second, tc.tick, budget, 0, 0); err == nil && tm.RidesOutReconnect() {
				t.Errorf("tick %v: %v already rides out a reconnect", tc.tick, tc.want-time.Second)
			}
		}
	}
}
