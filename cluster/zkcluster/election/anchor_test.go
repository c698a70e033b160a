package election

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
)

var t0 = time.Unix(1_700_000_000, 0)

// ack is an answered write over connection 1, times in ms after t0.
func ack(sent, answered int) zk.Ack { return ackOn(1, sent, answered) }

func ackOn(conn uint64, sent, answered int) zk.Ack {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	return zk.Ack{Sent: ms(sent), Answered: ms(answered), Conn: conn}
}

func anchorMs(acks []zk.Ack, gap time.Duration) int {
	a := Anchor(acks, gap)
	if a.IsZero() {
		return -1
	}
	return int(a.Sub(t0) / time.Millisecond)
}

// The credit chain rule on hand-made histories.
func TestAnchor(t *testing.T) {
	const gap = 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		acks []zk.Ack
		want int // ms after t0; -1: no anchor
	}{
		{"none", nil, -1},
		{"one write", []zk.Ack{ack(0, 10)}, -1},
		{"X too soon after Z", []zk.Ack{ack(0, 10), ack(400, 410), ack(410, 420)}, -1},
		{"no Y after X", []zk.Ack{ack(0, 10), ack(510, 520)}, -1},
		{"Y sent before X's answer", []zk.Ack{ack(0, 10), ack(510, 530), ack(520, 540)}, -1},
		{"Z X Y", []zk.Ack{ack(0, 10), ack(510, 520), ack(520, 530)}, 0},
		// Steady state: pairs every 500ms after the previous answer; the
		// anchor is the Y of the pair before last.
		{"steady", []zk.Ack{ack(0, 10), ack(510, 520), ack(520, 530), ack(1030, 1040), ack(1040, 1050), ack(1550, 1560), ack(1560, 1570)}, 1040},
		// The reviewer's trigger: renewal A (sent 1000) hangs until 3000, B
		// (sent 1050) is answered behind it. The anchor must not be B's send
		// time, nor A's: only W (0) has a chain (X = A, Y = C).
		{"stalled renewal", []zk.Ack{ack(0, 10), ack(1000, 3000), ack(1050, 3000)}, -1},
		{"stalled renewal then C", []zk.Ack{ack(0, 10), ack(1000, 3000), ack(1050, 3000), ack(3000, 3010)}, 0},
		// The chain must stay on one connection (one server F).
		{"Z on another connection", []zk.Ack{ackOn(1, 0, 10), ackOn(2, 510, 520), ackOn(2, 520, 530)}, -1},
		{"Y on another connection", []zk.Ack{ackOn(1, 0, 10), ackOn(1, 510, 520), ackOn(2, 520, 530)}, -1},
		// After a reconnect (restart of the chain on connection 2) the
		// newest chain of any connection counts.
		{"reconnect", []zk.Ack{ack(0, 10), ack(510, 520), ack(520, 530), ackOn(2, 2000, 2010), ackOn(2, 2510, 2520), ackOn(2, 2520, 2530)}, 2000},
		{"reconnect, new chain incomplete", []zk.Ack{ack(0, 10), ack(510, 520), ack(520, 530), ackOn(2, 2000, 2010), ackOn(2, 2510, 2520)}, 0},
	} {
		if got := anchorMs(tc.acks, gap); got != tc.want {
			t.Errorf("%s: anchor %d ms, want %d", tc.name, got, tc.want)
		}
	}
}

// The gap depends on tickTime: known 2s gives 1.05s, unknown (session 5s)
// assumes 2.5s and gives 1.3125s; X sent 1.1s after Z's answer completes a
// chain only with the known tick.
func TestAnchorTickKnownOrNot(t *testing.T) {
	const T = 5 * time.Second
	if g := lease.Gap(T, 2*time.Second); g != 1050*time.Millisecond {
		t.Errorf("gap with tick 2s = %v, want 1.05s", g)
	}
	if g := lease.Gap(T, 0); g != 1312500*time.Microsecond {
		t.Errorf("gap with tick unknown = %v, want 1.3125s", g)
	}
	acks := []zk.Ack{ack(0, 10), ack(1110, 1120), ack(1120, 1130)}
	if got := anchorMs(acks, lease.Gap(T, 2*time.Second)); got != 0 {
		t.Errorf("tick 2s: anchor %d, want 0", got)
	}
	if got := anchorMs(acks, lease.Gap(T, 0)); got != -1 {
		t.Errorf("tick unknown: anchor %d, want none", got)
	}
}

// A simulated leader renewing by renewNow's rule keeps its anchor within
// two renew intervals plus round trips of now, and never ahead of any send
// that lacks a chain.
func TestRenewalScheduleKeepsAnchorWithinTwoIntervals(t *testing.T) {
	for _, tc := range []struct{ renew, rtt time.Duration }{
		{105 * time.Millisecond, 2 * time.Millisecond},
		{1050 * time.Millisecond, 30 * time.Millisecond},
	} {
		gap := tc.renew
		var acks []zk.Ack
		now := t0
		worst := time.Duration(0)
		for i := 0; i < 200; i++ {
			a := zk.Ack{Sent: now, Answered: now.Add(tc.rtt), Conn: 1}
			acks = append(acks, a)
			if len(acks) > 32 {
				acks = acks[1:]
			}
			now = a.Answered
			next := now
			if !renewNow(acks, gap, now) {
				next = a.Answered.Add(tc.renew)
			}
			// Just before the next renewal's answer: the anchor's age.
			if anchor := Anchor(acks, gap); i > 4 {
				if anchor.IsZero() {
					t.Fatalf("renew %v: no anchor after %d writes", tc.renew, i)
				}
				worst = max(worst, next.Add(tc.rtt).Sub(anchor))
			}
			now = next
		}
		if limit := 2*tc.renew + 6*tc.rtt; worst > limit {
			t.Errorf("renew %v rtt %v: the anchor lagged up to %v, want <= %v", tc.renew, tc.rtt, worst, limit)
		}
		t.Logf("renew %v rtt %v: anchor lag at most %v", tc.renew, tc.rtt, worst)
	}
}
