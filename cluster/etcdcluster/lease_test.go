package etcdcluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The lease arithmetic: the default 5s lease, renewed every second (a
// third of it, capped at MaxRenewInterval), holds a demote budget of up
// to 3.65s (5 - 0.25 - 1 - 0.1), not more; renewed every third it would
// hold 2.98s.
func TestLeaseFits(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		ttl, renew, budget time.Duration
		ok                 bool
	}{
		{5 * s, 0, 3650 * time.Millisecond, true},
		{5 * s, 0, 3660 * time.Millisecond, false},
		{5 * s, 5 * s / 3, 3 * s, false},
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

// The confirmation rule: a renewal counts only when both keepalive
// answers (one member) and the read sent after them carry one raft term.
// Each refused case is a way a stale etcd leader's renewal would look.
func TestRenewalConfirmation(t *testing.T) {
	h := func(member, term uint64) *pb.ResponseHeader {
		return &pb.ResponseHeader{MemberId: member, RaftTerm: term}
	}
	for _, tc := range []struct {
		name                string
		first, second, read *pb.ResponseHeader
		ok                  bool
	}{
		{"one term throughout", h(1, 7), h(1, 7), h(2, 7), true},
		{"the read through the renewing member", h(1, 7), h(1, 7), h(1, 7), true},
		// The member that renewed had not applied an entry of the term the
		// read saw: an isolated etcd leader renews locally while the
		// majority elects a new leader, whose term the read shows.
		{"read in a later term", h(1, 7), h(1, 7), h(2, 8), false},
		// The member applied a newer term only between the two answers:
		// the second renewal may have been decided by a stale lessor.
		{"term moved between the keepalives", h(1, 7), h(1, 8), h(2, 8), false},
		{"term moved before the read", h(1, 6), h(1, 6), h(1, 7), false},
		{"two members", h(1, 7), h(2, 7), h(2, 7), false},
		{"no term", h(1, 0), h(1, 0), h(1, 0), false},
		{"no header", h(1, 7), nil, h(1, 7), false},
	} {
		err := confirm(tc.first, tc.second, tc.read)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, errUnconfirmed) {
			t.Errorf("%s: confirm = %v; want ok %t", tc.name, err, tc.ok)
		}
	}
}

// Which server versions get the pre-vote warning: every release before
// 3.5, where pre-vote is off unless --pre-vote is given.
func TestPreVoteWarning(t *testing.T) {
	for v, warn := range map[string]bool{
		"3.4.23": true, "3.4.0": true, "3.3.27": true, "v3.4.31": true, "2.3.8": true,
		"3.5.0": false, "3.5.17": false, "3.6.5": false, "3.7.3": false, "4.0.0": false,
		"": false, "unknown": false,
	} {
		w := PreVoteWarning(v)
		if (w != "") != warn {
			t.Errorf("PreVoteWarning(%q) = %q; want a warning: %t", v, w, warn)
		}
		if w != "" && !strings.Contains(w, "--pre-vote") {
			t.Errorf("PreVoteWarning(%q) = %q: it does not name --pre-vote", v, w)
		}
	}
}
