package etcdcluster

import (
	"strings"
	"testing"
	"time"
)

// Leases are renewed every third of the TTL, at most every second.
func TestDefaultRenewInterval(t *testing.T) {
	for _, tc := range []struct{ ttl, want time.Duration }{
		{2 * time.Second, 2 * time.Second / 3},
		{3 * time.Second, time.Second},
		{6 * time.Second, time.Second},
		{30 * time.Second, time.Second},
	} {
		if got := DefaultRenewInterval(tc.ttl); got != tc.want {
			t.Errorf("DefaultRenewInterval(%v) = %v, want %v", tc.ttl, got, tc.want)
		}
	}
}

// CheckTiming refuses a lease that cannot hold the demote budget, warns
// of one that leaves less than an etcd leader election after one renewal
// went unanswered (naming the key, the figures and the TTL that rides the
// election out), and says nothing of one that rides it out.
func TestCheckTimingWarnsOfAnEtcdElection(t *testing.T) {
	const budget = 3500 * time.Millisecond // the PostgreSQL example's: demote 3s and two kill graces
	for _, tc := range []struct {
		ttl        time.Duration
		fail, warn string
	}{
		{4 * time.Second, "4s is too short for service.demote.timeout 3s", ""},
		{5 * time.Second, "", "5s leaves 250ms after one renewal that went unanswered, less than an etcd leader election (about 2s)"},
		{6 * time.Second, "", "6s leaves 1.2s after one renewal that went unanswered"},
		{7 * time.Second, "", ""},
		{9 * time.Second, "", ""},
	} {
		var fails, warns []string
		CheckTiming(TimingConfig{LeaseTTL: tc.ttl, DemoteTimeout: 3 * time.Second, DemoteBudget: budget},
			func(path, msg string) { fails = append(fails, path+": "+msg) },
			func(path, msg string) { warns = append(warns, path+": "+msg) })
		check := func(what string, got []string, want string) {
			switch {
			case want == "" && len(got) != 0:
				t.Errorf("lease_ttl %v: %s %q, want none", tc.ttl, what, got)
			case want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], "etcd.lease_ttl: "+want)):
				t.Errorf("lease_ttl %v: %s %q, want one starting %q", tc.ttl, what, got, "etcd.lease_ttl: "+want)
			}
		}
		check("failures", fails, tc.fail)
		check("warnings", warns, tc.warn)
		if tc.warn != "" && len(warns) == 1 && !strings.HasSuffix(warns[0], "7s rides an etcd election out") {
			t.Errorf("lease_ttl %v: warning %q does not name 7s", tc.ttl, warns[0])
		}
	}
}

// RidesElection is the shortest whole-second TTL that leaves EtcdElection
// after one renewal went unanswered.
func TestRidesElection(t *testing.T) {
	for _, tc := range []struct{ budget, want time.Duration }{
		{1500 * time.Millisecond, 5 * time.Second}, // the default demote timeout 1s: 5 - 0.25 - 1 - 1.5 = 2.25s
		{2700 * time.Millisecond, 6 * time.Second}, // 6 - 0.3 - 1 - 2.7 = 2s
		{3500 * time.Millisecond, 7 * time.Second}, // 7 - 0.35 - 1 - 3.5 = 2.15s
	} {
		got := RidesElection(tc.budget)
		if got != tc.want {
			t.Errorf("RidesElection(%v) = %v, want %v", tc.budget, got, tc.want)
		}
		if r := electionRoom(got, tc.budget); r < EtcdElection {
			t.Errorf("RidesElection(%v) = %v leaves %v", tc.budget, got, r)
		}
		if r := electionRoom(got-time.Second, tc.budget); r >= EtcdElection {
			t.Errorf("RidesElection(%v) = %v, but a second less leaves %v", tc.budget, got, r)
		}
	}
}
