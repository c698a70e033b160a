package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// fenceFirstEtcd is etcdConfig with election block election, and its one
// shell method marked proves: true when proves.
func fenceFirstEtcd(t *testing.T, etcd, election string, proves bool) (*Config, error) {
	t.Helper()
	doc := etcdConfig(etcd, "1s") + "election: " + election + "\n"
	if proves {
		doc = strings.Replace(doc, "- shell: {command: [/bin/true]}", "- shell: {command: [/bin/true]}\n      proves: true", 1)
	}
	return Parse([]byte(doc), "")
}

// Which fencing methods prove: rpc unless proves: false, ssh and shell
// only with proves: true; the key reaches FencingMethod.Proves.
func TestFencingMethodProving(t *testing.T) {
	yes, no := ptr(true), ptr(false)
	for _, tc := range []struct {
		m    FencingMethod
		want bool
	}{
		{FencingMethod{RPC: &RPCFencing{}}, true},
		{FencingMethod{RPC: &RPCFencing{}, Proves: no}, false},
		{FencingMethod{RPC: &RPCFencing{}, Proves: yes}, true},
		{FencingMethod{SSH: &SSHFencing{}}, false},
		{FencingMethod{SSH: &SSHFencing{}, Proves: yes}, true},
		{FencingMethod{Shell: &ShellFencing{}}, false},
		{FencingMethod{Shell: &ShellFencing{}, Proves: yes}, true},
		{FencingMethod{Shell: &ShellFencing{}, Proves: no}, false},
	} {
		if got := tc.m.Proving(); got != tc.want {
			proves := "unset"
			if tc.m.Proves != nil {
				proves = map[bool]string{true: "true", false: "false"}[*tc.m.Proves]
			}
			t.Errorf("%s with proves %s: Proving() = %v, want %v", tc.m.Name(), proves, got, tc.want)
		}
	}

	cfg, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"]}`, "{fence_first: true}", true)
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Fencing.Methods[0]; m.Proves == nil || !*m.Proves || !m.Proving() {
		t.Errorf("proves: true did not reach the shell method: %+v", m)
	}
}

// The step timeouts the failover arithmetic adds up are those the daemon
// gives its fencing chain.
func TestFencingMethodStepTimeout(t *testing.T) {
	cfg := validConfig()
	cfg.Fencing.Methods[0].RPC.Timeout = 0
	want := []time.Duration{5 * time.Second, 2 * time.Second, time.Second + 2*time.Second + time.Second}
	for i, m := range cfg.Fencing.Methods {
		if got := m.StepTimeout(); got != want[i] {
			t.Errorf("fencing.methods[%d] %s: StepTimeout() = %v, want %v", i, m.Name(), got, want[i])
		}
	}
	if got := (FencingMethod{}).StepTimeout(); got != 0 {
		t.Errorf("no method: StepTimeout() = %v, want 0", got)
	}
}

// Fencing first needs fair mode on both backends, a fencing method that
// proves, and a suspect_after below the expiry it must beat; every
// problem is listed, each under its YAML path.
func TestFenceFirstRules(t *testing.T) {
	cfg := validConfig()
	cfg.Election.FenceFirst = true
	if err := validateNoFiles(cfg); err != nil {
		t.Fatalf("fair mode with an rpc method refused: %v", err)
	}

	cfg.Election.Mode = ModeUnfair
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(cfg)), []string{"election.fence_first: needs election.mode fair"})

	// Every problem at once: unfair mode, and no method that proves.
	cfg.Fencing.Methods[0].Proves = ptr(false)
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(cfg)), []string{
		"election.fence_first: needs election.mode fair",
		"election.fence_first: needs a fencing method that proves the leader cannot act (fencing.methods[N].proves)",
	})
	cfg.Election.Mode = ModeFair
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(cfg)), []string{"none of the 3 configured does"})

	// A shell or ssh method proves once the operator says so.
	for _, i := range []int{1, 2} {
		cfg := validConfig()
		cfg.Election.FenceFirst = true
		cfg.Fencing.Methods[0].Proves = ptr(false)
		cfg.Fencing.Methods[i].Proves = ptr(true)
		if err := validateNoFiles(cfg); err != nil {
			t.Errorf("fencing.methods[%d] %s with proves: true refused: %v", i, cfg.Fencing.Methods[i].Name(), err)
		}
	}

	cfg = validConfig()
	cfg.Election.FenceFirst = true
	cfg.Fencing.Methods, cfg.Fencing.AllowNone = nil, true
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(cfg)), []string{"election.fence_first: needs a fencing method that proves the leader cannot act, and fencing.allow_none runs without any"})
	cfg.Fencing.AllowNone = false
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(cfg)), []string{
		"election.fence_first: needs a fencing method that proves the leader cannot act (fencing.methods[N].proves): an rpc method proves unless proves: false, an ssh or shell method only with proves: true, which its command earns by verifying the target is stopped before it exits 0; no fencing method is configured",
		"fencing.methods: no fencing method configured",
	})

	// The leader's renew interval plus suspect_after must be shorter than
	// the session timeout: tickTime unknown, session 5s, renew 1.3125s.
	cfg = validConfig()
	cfg.Election.FenceFirst = true
	renew := 1312500 * time.Microsecond
	cfg.Election.SuspectAfter = cfg.ZooKeeper.SessionTimeout - Duration(renew)
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(cfg)), []string{
		"election.suspect_after: 3.688s plus the leader's renew interval 1.313s is 5s, not shorter than zookeeper.session_timeout (5s): " +
			"expiry would end a silent leader's term before its heartbeat is overdue, so fencing first could never act; set election.suspect_after below 3.688s"})
	cfg.Election.SuspectAfter -= Duration(time.Millisecond)
	if err := validateNoFiles(cfg); err != nil {
		t.Errorf("renew interval + suspect_after just below the session timeout refused: %v", err)
	}
	// A tickTime whose renew interval alone outlasts the session is the
	// timing check's to refuse; suspect_after is not blamed for it.
	cfg.Election.SuspectAfter = Duration(DefaultSuspectAfter)
	cfg.ZooKeeper.TickTime = Duration(10 * time.Second)
	err := validateNoFiles(cfg)
	if err == nil || strings.Contains(err.Error(), "election.suspect_after") {
		t.Errorf("tick_time 10s with a 5s session: %v, want it refused, and not for election.suspect_after", err)
	}
	cfg.ZooKeeper.TickTime = 0
	// Without fencing first, suspect_after is checked for its range only.
	cfg.Election.FenceFirst, cfg.Election.SuspectAfter = false, Duration(time.Minute)
	if err := validateNoFiles(cfg); err != nil {
		t.Errorf("fence_first off: a long suspect_after refused: %v", err)
	}

}

// The unfair-mode refusal and the expiry bound hold on etcd too, where
// the expiry is the lease TTL.
func TestFenceFirstRulesEtcd(t *testing.T) {
	if _, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"]}`, "{fence_first: true}", true); err != nil {
		t.Fatalf("etcd, fair mode, a proving shell method: %v", err)
	}
	_, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"]}`, "{fence_first: true, mode: unfair}", true)
	checkErrors(t, fieldErrorsOrNil(err), []string{"election.fence_first: needs election.mode fair"})

	// lease_ttl 5s: renew 1s.
	_, err = fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"], lease_ttl: 5s}`, "{fence_first: true, suspect_after: 4s}", true)
	checkErrors(t, fieldErrorsOrNil(err), []string{"election.suspect_after: 4s plus the leader's renew interval 1s is 5s, not shorter than etcd.lease_ttl (5s)"})
	if _, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"], lease_ttl: 5s}`, "{fence_first: true, suspect_after: 3999ms}", true); err != nil {
		t.Errorf("renew interval + suspect_after just below the lease TTL refused: %v", err)
	}

	_, err = fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"]}`, "{fence_first: true}", false)
	checkErrors(t, fieldErrorsOrNil(err), []string{"election.fence_first: needs a fencing method that proves"})

	// The default suspect_after fits a short lease TTL: 3s, renewed every
	// 1s.
	if _, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"], lease_ttl: 3s}`, "{fence_first: true}", true); err != nil {
		t.Errorf("the default suspect_after with lease_ttl 3s refused: %v", err)
	}
}

// Without the backends' renew intervals (a program that does not wire
// them), suspect_after alone is compared with the expiry.
func TestFenceFirstRulesRenewUnknown(t *testing.T) {
	unwireRenewIntervals(t)
	cfg := validConfig()
	cfg.Election.FenceFirst = true
	cfg.Election.SuspectAfter = cfg.ZooKeeper.SessionTimeout
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(cfg)), []string{"election.suspect_after: 5s is not shorter than zookeeper.session_timeout (5s)"})
	cfg.Election.SuspectAfter -= Duration(time.Millisecond)
	if err := validateNoFiles(cfg); err != nil {
		t.Errorf("suspect_after just below the session timeout refused with the renew interval unknown: %v", err)
	}
}

// unwireRenewIntervals leaves the backends' renew intervals unwired until
// t ends.
func unwireRenewIntervals(t *testing.T) {
	renewIntervals.Lock()
	was := renewIntervals.byBackend
	renewIntervals.byBackend = nil
	renewIntervals.Unlock()
	t.Cleanup(func() {
		renewIntervals.Lock()
		renewIntervals.byBackend = was
		renewIntervals.Unlock()
	})
}

// A reload is validated as a start is: a file that leaves fencing first
// without a proving method does not load, so a reload of it is refused
// and the daemon keeps the config it runs.
func TestFenceFirstReloadLosingItsProvingMethod(t *testing.T) {
	if _, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"]}`, "{fence_first: true}", true); err != nil {
		t.Fatal(err)
	}
	cur, next := validConfig(), validConfig()
	cur.Election.FenceFirst, next.Election.FenceFirst = true, true
	next.Fencing.Methods[0].Proves = ptr(false)
	changes := CompareForReload(cur, cur, next)
	if len(changes) != 1 || changes[0].Path != "fencing.methods[0].proves" || changes[0].Refused != "" {
		t.Errorf("changes %v, want fencing.methods[0].proves, reloadable", changes)
	}
	checkErrors(t, fieldErrorsOrNil(validateNoFiles(next)), []string{"election.fence_first: needs a fencing method that proves"})

	for _, key := range []string{"election.fence_first", "election.suspect_after"} {
		if r, ok := ReloadRuleFor(key); !ok || r.Reload != Restart {
			t.Errorf("%s: reload rule %+v, want Restart", key, r)
		}
	}
}

// Warnings: a suspect_after below 100ms, which leaves a slow renewal no
// room to be late, and a proving rpc method allowed over plain http;
// nothing with fencing first off.
func TestFenceFirstWarnings(t *testing.T) {
	has := func(ws []string, s string) bool {
		return slices.ContainsFunc(ws, func(w string) bool { return strings.Contains(w, s) })
	}
	cfg := validConfig()
	cfg.Election.FenceFirst = true
	if ws := cfg.Warnings(); has(ws, "election.suspect_after") {
		t.Errorf("the default suspect_after warned about: %q", ws)
	}
	cfg.Election.SuspectAfter = Duration(SuspectAfterLow)
	if ws := cfg.Warnings(); has(ws, "election.suspect_after") {
		t.Errorf("suspect_after %v warned about: %q", SuspectAfterLow, ws)
	}
	cfg.Election.SuspectAfter = Duration(99 * time.Millisecond)
	if ws := cfg.Warnings(); !has(ws, "election.suspect_after: 99ms is below 100ms: it is how late a heartbeat may be beyond the leader's renew interval") {
		t.Errorf("no warning for a suspect_after below 100ms: %q", ws)
	}
	cfg.Election.FenceFirst = false
	if ws := cfg.Warnings(); has(ws, "election.suspect_after") {
		t.Errorf("fence_first off: warned %q", ws)
	}

	etcd, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"], lease_ttl: 6s}`, "{fence_first: true, suspect_after: 50ms}", true)
	if err != nil {
		t.Fatal(err)
	}
	if ws := etcd.Warnings(); !has(ws, "election.suspect_after: 50ms is below 100ms") {
		t.Errorf("etcd: no warning for a suspect_after below 100ms: %q", ws)
	}
	// Two renew intervals are no longer asked for: 1.5s, with a renew
	// interval of 1s, is fine.
	etcd, err = fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"], lease_ttl: 6s}`, "{fence_first: true, suspect_after: 1500ms}", true)
	if err != nil {
		t.Fatal(err)
	}
	if ws := etcd.Warnings(); has(ws, "election.suspect_after") {
		t.Errorf("etcd: suspect_after 1.5s warned about: %q", ws)
	}

	cfg = validConfig()
	cfg.Election.FenceFirst = true
	cfg.Fencing.Methods[0].RPC.AllowInsecureHTTP = true
	if ws := cfg.Warnings(); !has(ws, "fencing.methods[0].proves: this rpc method proves") {
		t.Errorf("no warning for a proving rpc method over plain http: %q", ws)
	}
	cfg.Fencing.Methods[0].Proves = ptr(false)
	cfg.Fencing.Methods[2].Proves = ptr(true)
	if ws := cfg.Warnings(); has(ws, "fencing.methods[0].proves") {
		t.Errorf("an rpc method that does not prove warned about: %q", ws)
	}
}

// FailoverArithmetic: nothing with fencing first off; else the fencing
// first path (renew interval + suspect_after until the heartbeat is
// overdue, the probe, the proving methods' step timeouts), the expiry
// path beside it, and the promote path after either.
func TestFailoverArithmetic(t *testing.T) {
	cfg := validConfig()
	if got := cfg.FailoverArithmetic(); got != nil {
		t.Errorf("fence_first off: %q, want nil", got)
	}
	cfg.Election.FenceFirst = true
	cfg.Fencing.Methods[2].Proves = ptr(true) // shell: 1s + kill grace 2s + reap wait 1s
	cfg.Service.PrePromote = &Hook{Command: []string{"check"}, Timeout: Duration(10 * time.Second)}
	if err := validateNoFiles(cfg); err != nil {
		t.Fatal(err)
	}
	// tickTime unknown, session 5s: renew 1.3125s; suspect_after 300ms,
	// so the probe is bounded by 300ms.
	text := strings.Join(cfg.FailoverArithmetic(), "\n")
	for _, want := range []string{
		"fencing first: the heartbeat is overdue after the leader's renew interval 1.313s + election.suspect_after 300ms, " +
			"then a probe of the leader's admin API up to 300ms, then the proving methods in order (fencing.methods[0] rpc 1s, fencing.methods[2] shell 4s)",
		"won within 6.913s (1.313s + 300ms + 300ms + 5s) when a proving method succeeds",
		"by expiry, when no proving method succeeded: zookeeper.session_timeout 5s",
		"the winner then fences the leader the breadcrumb names: every method in order, up to 7s (fencing.methods[0] rpc 1s, fencing.methods[1] ssh 2s, fencing.methods[2] shell 4s)",
		"when probe and proving fence are done within 3.388s (zookeeper.session_timeout 5s - renew interval 1.313s - election.suspect_after 300ms)",
		"then, either way: service.pre_promote.timeout 10s, service.promote.timeout 30s; up to 40s",
		"heartbeat: the leader renews every 1.313s and publishes that interval; its heartbeat counts as overdue once it stood still for 1.613s " +
			"(renew interval 1.313s + election.suspect_after 300ms), so a crashed leader is suspected 956ms after the crash on average",
		"while that heartbeat stands the candidate asks again every 500ms",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("arithmetic does not say %q:\n%s", want, text)
		}
	}

	cfg.Election.TakeOverAtDeadline = true
	if text := strings.Join(cfg.FailoverArithmetic(), "\n"); !strings.Contains(text, "by the leader's own deadline") {
		t.Errorf("take_over_at_deadline: the expiry path is not the leader's deadline:\n%s", text)
	}

	etcd, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"], lease_ttl: 6s}`, "{fence_first: true, suspect_after: 2500ms}", true)
	if err != nil {
		t.Fatal(err)
	}
	text = strings.Join(etcd.FailoverArithmetic(), "\n")
	for _, want := range []string{
		"overdue after the leader's renew interval 1s + election.suspect_after 2.5s, then a probe of the leader's admin API up to 1s, " +
			"then the proving methods in order (fencing.methods[0] shell 33s)",
		"won within 37.5s (1s + 2.5s + 1s + 33s)",
		"etcd.lease_ttl 6s after the leader's last renewal",
		"within 2.5s (etcd.lease_ttl 6s - renew interval 1s - election.suspect_after 2.5s)",
		"the leader renews every 1s and publishes that interval; its heartbeat counts as overdue once it stood still for 3.5s",
		"suspected 3s after the crash on average",
		"asks again every 2.5s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("etcd arithmetic does not say %q:\n%s", want, text)
		}
	}
}

// Without the backends' renew intervals the lines name the renew interval
// without a figure.
func TestFailoverArithmeticRenewUnknown(t *testing.T) {
	unwireRenewIntervals(t)
	cfg := validConfig()
	cfg.Election.FenceFirst = true
	text := strings.Join(cfg.FailoverArithmetic(), "\n")
	for _, want := range []string{
		"the heartbeat is overdue after the leader's renew interval + election.suspect_after 300ms, then a probe",
		"won within the leader's renew interval + 1.6s (300ms + 300ms + 1s)",
		"done within 5s less the leader's renew interval and election.suspect_after 300ms",
		"heartbeat: it counts as overdue once it stood still for the renew interval the leader publishes + election.suspect_after 300ms",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("arithmetic does not say %q:\n%s", want, text)
		}
	}
}

// The probe is bounded by suspect_after, at most SuspectProbeMax, as the
// daemon bounds it; a Config built without Default gets the default
// suspect_after.
func TestFailoverArithmeticProbeBound(t *testing.T) {
	cfg := validConfig()
	cfg.Election.FenceFirst = true
	for _, tc := range []struct {
		suspect time.Duration
		want    string
	}{
		{400 * time.Millisecond, "won within 3.113s (1.313s + 400ms + 400ms + 1s)"},
		{2 * time.Second, "won within 5.313s (1.313s + 2s + 1s + 1s)"},
	} {
		cfg.Election.SuspectAfter = Duration(tc.suspect)
		if text := strings.Join(cfg.FailoverArithmetic(), "\n"); !strings.Contains(text, tc.want) {
			t.Errorf("suspect_after %v: the arithmetic does not say %q:\n%s", tc.suspect, tc.want, text)
		}
	}
	if SuspectProbeMax != time.Second {
		t.Errorf("SuspectProbeMax = %v, want 1s", SuspectProbeMax)
	}
	if DefaultSuspectAfter != 300*time.Millisecond {
		t.Errorf("DefaultSuspectAfter = %v, want 300ms", DefaultSuspectAfter)
	}
	if got := (Election{}).SuspectAfterOrDefault(); got != DefaultSuspectAfter {
		t.Errorf("SuspectAfterOrDefault() of a zero Election = %v, want %v", got, DefaultSuspectAfter)
	}
	cfg.Election.SuspectAfter = Duration(400 * time.Millisecond)
	if got := cfg.Election.SuspectAfterOrDefault(); got != 400*time.Millisecond {
		t.Errorf("SuspectAfterOrDefault() = %v, want 400ms", got)
	}
}

// Every ssh or shell method marked proves gets a warning with fence_first:
// its command must stop the whole old node, not the service alone.
func TestFenceFirstWarnsOfCommandProofs(t *testing.T) {
	has := func(ws []string, s string) bool {
		return slices.ContainsFunc(ws, func(w string) bool { return strings.Contains(w, s) })
	}
	cfg, err := fenceFirstEtcd(t, `{endpoints: ["127.0.0.1:2379"]}`, "{fence_first: true}", true)
	if err != nil {
		t.Fatal(err)
	}
	want := "fencing.methods[0].proves: with election.fence_first a success of this shell method is taken as proof that the old node can no longer act"
	if ws := cfg.Warnings(); !has(ws, want) {
		t.Errorf("no warning for a shell method marked proves: %q", ws)
	}
	cfg.Fencing.Methods[0].Proves = nil
	if ws := cfg.Warnings(); has(ws, "fencing.methods[0].proves") {
		t.Errorf("a warning for a shell method that does not prove: %q", ws)
	}
}
