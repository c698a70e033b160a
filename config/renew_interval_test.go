package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// election.renew_interval: 0 leaves the derived interval; otherwise from
// MinRenewInterval to the interval the backend derives, and on ZooKeeper
// only that (it renews no faster than tickTime/2 + 5%).
func TestValidateRenewIntervalZooKeeper(t *testing.T) {
	for _, tc := range []struct {
		tick, renew time.Duration
		want        string // "" valid
	}{
		{2 * time.Second, 0, ""},
		{2 * time.Second, -time.Millisecond, "election.renew_interval: must be 0 (the interval the backend derives) or positive, got -1ms"},
		{2 * time.Second, 40 * time.Millisecond, "election.renew_interval: 40ms is shorter than the minimum 50ms"},
		{2 * time.Second, 250 * time.Millisecond, "election.renew_interval: 250ms is shorter than ZooKeeper allows: a leader's renewals prove its session alive only when sent at least tickTime/2 + 5% apart (1.05s)"},
		{2 * time.Second, 1050 * time.Millisecond, ""},
		{2 * time.Second, 2 * time.Second, "election.renew_interval: 2s is longer than the renew interval the backend derives, 1.05s (ZooKeeper: tickTime/2 + 5%)"},
		// tickTime unknown, session 5s: tickTime 2.5s assumed.
		{0, 1312500 * time.Microsecond, ""},
		{0, time.Second, "election.renew_interval: 1s is shorter than ZooKeeper allows"},
	} {
		cfg := validConfig()
		cfg.ZooKeeper.TickTime, cfg.Election.RenewInterval = Duration(tc.tick), Duration(tc.renew)
		err := validateNoFiles(cfg)
		if tc.want == "" {
			if err != nil {
				t.Errorf("tick %v renew %v: %v", tc.tick, tc.renew, err)
			}
			continue
		}
		checkErrors(t, fieldErrorsOrNil(err), []string{tc.want})
	}
}

func TestValidateRenewIntervalEtcd(t *testing.T) {
	const block = `{endpoints: ["127.0.0.1:2379"], lease_ttl: 5s}`
	for _, tc := range []struct{ election, want string }{
		{"{renew_interval: 250ms}", ""},
		{"{renew_interval: 50ms}", ""},
		{"{renew_interval: 1s}", ""},
		{"{renew_interval: 49ms}", "election.renew_interval: 49ms is shorter than the minimum 50ms"},
		{"{renew_interval: 1001ms}", "election.renew_interval: 1.001s is longer than the renew interval the backend derives, 1s (etcd: min(etcd.lease_ttl/3, 1s)): " +
			"the lease arithmetic counts on renewals at least that often; set at most 1s, or 0 for the derived interval"},
	} {
		_, err := fenceFirstEtcd(t, block, tc.election, true)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.election, err)
			}
			continue
		}
		checkErrors(t, fieldErrorsOrNil(err), []string{tc.want})
	}
	// lease_ttl 3s: derived 1s.
	_, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"], lease_ttl: 3s}`, "{renew_interval: 1500ms}", true)
	checkErrors(t, fieldErrorsOrNil(err), []string{"election.renew_interval: 1.5s is longer than the renew interval the backend derives, 1s"})
}

// The suspect_after rule and FailoverArithmetic use the configured
// interval: with lease_ttl 3s, suspect_after 2.7s fits a 250ms interval
// (not the derived 1s).
func TestRenewIntervalReachesFenceFirst(t *testing.T) {
	const block = `{endpoints: ["127.0.0.1:2379"], lease_ttl: 3s}`
	_, err := fenceFirstEtcd(t, block, "{fence_first: true, suspect_after: 2700ms}", true)
	checkErrors(t, fieldErrorsOrNil(err), []string{"election.suspect_after: 2.7s plus the leader's renew interval 1s is 3.7s, not shorter than etcd.lease_ttl (3s)"})
	if _, err := fenceFirstEtcd(t, block, "{fence_first: true, suspect_after: 2700ms, renew_interval: 250ms}", true); err != nil {
		t.Errorf("suspect_after 2.7s with renew_interval 250ms and lease_ttl 3s refused: %v", err)
	}

	cfg, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"], lease_ttl: 5s}`, "{fence_first: true, renew_interval: 250ms}", true)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(cfg.FailoverArithmetic(), "\n")
	for _, want := range []string{
		"the heartbeat is overdue after the leader's renew interval 250ms + election.suspect_after 300ms",
		"heartbeat: the leader renews every 250ms and publishes that interval; its heartbeat counts as overdue once it stood still for 550ms " +
			"(renew interval 250ms + election.suspect_after 300ms), so a crashed leader is suspected 425ms after the crash on average",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("FailoverArithmetic lacks %q:\n%s", want, text)
		}
	}
	if tm := cfg.Timing(); tm.RenewInterval != 250*time.Millisecond {
		t.Errorf("Timing().RenewInterval = %v, want 250ms", tm.RenewInterval)
	}
}

// Below RenewIntervalLow Warnings names the cost per candidate; at it and
// at 0 nothing is said, so the warnings of every config without the key
// stay as they were.
func TestRenewIntervalWarning(t *testing.T) {
	const block = `{endpoints: ["127.0.0.1:2379"], lease_ttl: 5s}`
	for _, tc := range []struct{ election, want string }{
		{"{fence_first: true}", ""},
		{"{fence_first: true, renew_interval: 200ms}", ""},
		{"{renew_interval: 100ms}", "election.renew_interval: 100ms is below 200ms: the backend renews at that rate " +
			"(two lease keepalives and a linearizable read per renewal: 30 requests/s per candidate)"},
		{"{fence_first: true, renew_interval: 100ms}", "election.renew_interval: 100ms is below 200ms: the backend renews at that rate " +
			"(two lease keepalives, a linearizable read and a heartbeat write (election.fence_first) per renewal: 40 requests/s per candidate)"},
	} {
		cfg, err := fenceFirstEtcd(t, block, tc.election, true)
		if err != nil {
			t.Fatalf("%s: %v", tc.election, err)
		}
		i := slices.IndexFunc(cfg.Warnings(), func(w string) bool { return strings.HasPrefix(w, "election.renew_interval") })
		switch {
		case tc.want == "" && i >= 0:
			t.Errorf("%s: warns %q", tc.election, cfg.Warnings()[i])
		case tc.want != "" && (i < 0 || !strings.HasPrefix(cfg.Warnings()[i], tc.want)):
			t.Errorf("%s: warnings %q, want one starting %q", tc.election, cfg.Warnings(), tc.want)
		}
	}
	// ZooKeeper with a short tickTime: 200ms renews every 105ms.
	cfg := validConfig()
	cfg.ZooKeeper.SessionTimeout, cfg.ZooKeeper.TickTime = Duration(2*time.Second), Duration(200*time.Millisecond)
	cfg.Service.Demote.Timeout = Duration(600 * time.Millisecond)
	cfg.Election.RenewInterval = Duration(105 * time.Millisecond)
	if err := validateNoFiles(cfg); err != nil {
		t.Fatal(err)
	}
	want := "election.renew_interval: 105ms is below 200ms: the backend renews at that rate (one ZooKeeper write per renewal by the leader and by each candidate that keeps a credit chain: 10 writes/s each)"
	if !slices.ContainsFunc(cfg.Warnings(), func(w string) bool { return strings.HasPrefix(w, want) }) {
		t.Errorf("warnings %q lack %q", cfg.Warnings(), want)
	}
}

// A reload cannot change it: the elector and its session renew at the
// interval they were built with.
func TestRenewIntervalNeedsRestart(t *testing.T) {
	if r, ok := ReloadRuleFor("election.renew_interval"); !ok || r.Reload != Restart {
		t.Fatalf("election.renew_interval: reload rule %+v (%v), want Restart", r, ok)
	}
	start := validConfig()
	next := validConfig()
	next.Election.RenewInterval = Duration(time.Second + 50*time.Millisecond)
	if got := Refused(CompareForReload(start, start, next)); len(got) != 1 || got[0].Path != "election.renew_interval" {
		t.Errorf("a reload changing election.renew_interval: refused %v", got)
	}
}
