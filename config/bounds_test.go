package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/internal/secret"
)

// validConfig returns a built config that validates, for tests to break one
// value of.
func validConfig() *Config {
	cfg := Default()
	cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "c", "n", "h"
	cfg.ZooKeeper.Servers = []string{"z:2181"}
	cfg.Health.TCP = &TCPCheck{Address: "127.0.0.1:1"}
	cfg.Service.Promote.Command = []string{"promote"}
	cfg.Service.Demote.Command = []string{"demote"}
	cfg.Fencing.Methods = []FencingMethod{
		{RPC: &RPCFencing{TokenFile: "/t", Timeout: Duration(time.Second)}},
		{SSH: &SSHFencing{User: "u", Port: 22, UseAgent: true, InsecureIgnoreHostKey: true, KillPort: 1,
			ConnectTimeout: Duration(time.Second), Timeout: Duration(2 * time.Second)}},
		{Shell: &ShellFencing{Command: []string{"fence"}, Timeout: Duration(time.Second)}},
	}
	return cfg
}

func validateNoFiles(cfg *Config) error {
	return cfg.validate(LoadOptions{SkipFileChecks: true}, written{backend: true})
}

// TestDurationBounds checks every duration the daemon turns into a timer,
// ticker or deadline: zero, negative, too small and too large values are
// refused with their YAML path.
func TestDurationBounds(t *testing.T) {
	if err := validateNoFiles(validConfig()); err != nil {
		t.Fatalf("base config: %v", err)
	}
	fields := []struct {
		path   string
		set    func(c *Config, d Duration)
		min    time.Duration
		zeroOK bool // 0 means the using package's default
	}{
		{"node.shutdown_timeout", func(c *Config, d Duration) { c.Node.ShutdownTimeout = d }, MinTimeout, false},
		{"zookeeper.session_timeout", func(c *Config, d Duration) { c.ZooKeeper.SessionTimeout = d }, MinSessionTimeout, false},
		{"health.interval", func(c *Config, d Duration) { c.Health.Interval = d }, MinTimeout, false},
		{"health.timeout", func(c *Config, d Duration) { c.Health.Timeout = d }, MinTimeout, false},
		{"service.promote.timeout", func(c *Config, d Duration) { c.Service.Promote.Timeout = d }, MinTimeout, false},
		{"service.demote.timeout", func(c *Config, d Duration) { c.Service.Demote.Timeout = d }, MinTimeout, false},
		{"service.demote.graceful_timeout", func(c *Config, d Duration) {
			c.Service.Demote.Timeout, c.Service.Demote.GracefulTimeout = Duration(MinTimeout), &d
		}, MinTimeout, false},
		{"election.suspect_after", func(c *Config, d Duration) { c.Election.SuspectAfter = d }, MinTimeout, false},
		{"fencing.methods[0].rpc.timeout", func(c *Config, d Duration) { c.Fencing.Methods[0].RPC.Timeout = d }, MinTimeout, true},
		{"fencing.methods[1].ssh.connect_timeout", func(c *Config, d Duration) { c.Fencing.Methods[1].SSH.ConnectTimeout = d }, MinTimeout, true},
		{"fencing.methods[1].ssh.timeout", func(c *Config, d Duration) { c.Fencing.Methods[1].SSH.Timeout = d }, MinTimeout, false},
		{"fencing.methods[2].shell.timeout", func(c *Config, d Duration) { c.Fencing.Methods[2].Shell.Timeout = d }, MinTimeout, false},
	}
	for _, f := range fields {
		for _, tc := range []struct {
			d    time.Duration
			want string
		}{
			{0, "must be > 0, got 0s"},
			{-time.Second, "must be > 0, got -1s"},
			{time.Nanosecond, fmt.Sprintf("must be at least %s, got 1ns", fmtDur(f.min))},
			{f.min - time.Nanosecond, fmt.Sprintf("must be at least %s, got", fmtDur(f.min))},
			{MaxDuration + time.Nanosecond, "must be at most 24h0m0s, got 24h0m0s"},
			{1<<63 - 1, "must be at most 24h0m0s"},
		} {
			cfg := validConfig()
			f.set(cfg, Duration(tc.d))
			err := validateNoFiles(cfg)
			if tc.d == 0 && f.zeroOK {
				if err != nil {
					t.Errorf("%s: 0 (the default) refused: %v", f.path, err)
				}
				continue
			}
			if err == nil {
				t.Errorf("%s: %v: validates, want %q", f.path, tc.d, tc.want)
				continue
			}
			es := fieldErrors(t, err)
			if es[0].Path != f.path || !strings.Contains(es[0].Msg, tc.want) {
				t.Errorf("%s: %v: first error %q, want %s: %s (all: %v)", f.path, tc.d, es[0], f.path, tc.want, es)
			}
		}
		// The bounds themselves are accepted, as far as the other rules let
		// them (a session of 24h with the default lease, a demote of 10ms).
		for _, d := range []time.Duration{f.min, MaxDuration} {
			cfg := validConfig()
			cfg.Node.ShutdownTimeout = Duration(MaxDuration)
			f.set(cfg, Duration(d))
			for _, e := range fieldErrorsOrNil(validateNoFiles(cfg)) {
				if e.Path == f.path && strings.HasPrefix(e.Msg, "must be") {
					t.Errorf("%s: %v refused: %v", f.path, d, e)
				}
			}
		}
	}
}

func fieldErrorsOrNil(err error) ValidationErrors {
	var es ValidationErrors
	errors.As(err, &es)
	return es
}

// TestLeaseBounds pins the lease rule (lease.Compute, as the elector
// applies it to the granted session timeout): lease + demote budget +
// session/20 within the session timeout, and the lease at least twice the
// renew interval (tickTime/2 + 5%) plus 100ms; errors name the YAML path
// to change and say how.
func TestLeaseBounds(t *testing.T) {
	const s = time.Second
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		session, lease, tick, demote time.Duration
		path, want                   string // "" for valid
	}{
		// Defaults: session 5s, demote 1s (budget 1.5s), tick unknown
		// (assumed 2.5s, renew 1.3125s): lease 3.25s, at least 2.725s.
		{5 * s, 0, 0, s, "", ""},
		{5 * s, ms(3250), 0, s, "", ""},
		{5 * s, ms(3251), 0, s, "election.lease", "3.251s is too long for zookeeper.session_timeout (5s) and service.demote.timeout (1s): " +
			"the lease plus the demote budget 1.5s (service.demote.timeout 1s plus the kill graces of a running promote and of the demote, 250ms each) plus a margin of 250ms (session/20) must fit"},
		{5 * s, ms(2725), 0, s, "", ""},
		{5 * s, ms(2724), 0, s, "election.lease", "2.724s leaves no tolerance with zookeeper.tick_time unknown (assumed 2.5s, half the session timeout): a lease must be at least twice the renew interval (1.313s, tickTime/2 + 5%) plus 100ms = 2.725s"},
		{5 * s, ms(2724), 2 * s, s, "", ""}, // tick 2s: renew 1.05s, at least 2.2s
		{5 * s, 3 * time.Nanosecond, 0, s, "election.lease", "3ns is shorter than the minimum 200ms"},
		{5 * s, MinLease - 1, ms(40), ms(10), "election.lease", "shorter than the minimum 200ms"},
		{5 * s, MinLease, ms(40), ms(10), "", ""},
		{5 * s, MinLease, ms(200), ms(10), "election.lease", "200ms leaves no tolerance with zookeeper.tick_time 200ms: a lease must be at least twice the renew interval (105ms, tickTime/2 + 5%) plus 100ms = 310ms; raise it (at most 4.24s)"},
		{5 * s, -s, 0, s, "election.lease", "must be 0 (the longest that fits) or positive, got -1s"},
		{5 * s, time.Hour, 0, s, "election.lease", "too long"},
		// The test clusters: session 2s, tickTime 200ms, demote 600ms.
		{2 * s, 0, ms(200), ms(600), "", ""},
		{2 * s, 0, 0, ms(600), "zookeeper.session_timeout", "2s is too short for service.demote.timeout 600ms with zookeeper.tick_time unknown (assumed 1s, half the session timeout): " +
			"the session timeout minus the demote budget 1.1s"},
		{2 * s, 0, 0, s, "zookeeper.session_timeout", "raise the session timeout, lower the demote timeout or set zookeeper.tick_time"},
		{2 * s, ms(500), ms(200), s, "election.lease", "500ms is too long for zookeeper.session_timeout (2s) and service.demote.timeout (1s)"},
		{2 * s, ms(500), ms(200), ms(1200), "zookeeper.session_timeout", "2s is too short for service.demote.timeout 1.2s with zookeeper.tick_time 200ms: the session timeout minus the demote budget 1.7s"},
		{5 * s, 0, 0, 10 * s, "zookeeper.session_timeout", "leaves a lease of -5.75s"},
	} {
		cfg := validConfig()
		cfg.ZooKeeper.SessionTimeout, cfg.Election.Lease = Duration(tc.session), Duration(tc.lease)
		cfg.ZooKeeper.TickTime, cfg.Service.Demote.Timeout = Duration(tc.tick), Duration(tc.demote)
		es := fieldErrorsOrNil(validateNoFiles(cfg))
		name := fmt.Sprintf("session %v lease %v tick %v demote %v", tc.session, tc.lease, tc.tick, tc.demote)
		switch {
		case tc.want == "" && len(es) > 0:
			t.Errorf("%s: %v, want valid", name, es)
		case tc.want != "" && (len(es) != 1 || es[0].Path != tc.path || !strings.Contains(es[0].Msg, tc.want)):
			t.Errorf("%s: %v, want one %s error containing %q", name, es, tc.path, tc.want)
		}
		if tc.want == "" {
			// What validated, the elector accepts for the same timeout.
			if _, err := lease.Compute(tc.session, tc.tick, cfg.demoteBudget(), tc.lease, 0); err != nil {
				t.Errorf("%s: validated, but lease.Compute refuses it: %v", name, err)
			}
		}
	}
}

// TestDemoteBudgetDerivesTheLease pins the demote budget validation checks
// with (controller.DemoteBudget, with the controller's KillGrace for the
// promote and the demote) and the default lease derived from it.
func TestDemoteBudgetDerivesTheLease(t *testing.T) {
	cfg := validConfig()
	if got, want := cfg.demoteBudget(), time.Second+2*controller.KillGrace; got != want {
		t.Errorf("DemoteBudget with defaults = %v, want %v", got, want)
	}
	if got, want := effectiveLease(cfg), 5*time.Second-1500*time.Millisecond-250*time.Millisecond; got != want {
		t.Errorf("EffectiveLease with defaults = %v, want %v", got, want)
	}
	cfg.Service.Demote.Timeout = Duration(2 * time.Second)
	if got, want := effectiveLease(cfg), 5*time.Second-2500*time.Millisecond-250*time.Millisecond; got != want {
		t.Errorf("EffectiveLease with a 2s demote = %v, want %v", got, want)
	}
	cfg.Election.Lease = Duration(time.Second)
	if got := effectiveLease(cfg); got != time.Second {
		t.Errorf("EffectiveLease with lease 1s = %v", got)
	}
}

// TestSecretFilePermissions checks that validation names every secret file
// that group or others may access, and that the readers refuse it.
func TestSecretFilePermissions(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // not filtered by the umask
			t.Fatal(err)
		}
		return p
	}
	config := func(token, cred, key1, key2 string) string {
		return fmt.Sprintf(`cluster: c
node: {id: n, host: h, admin: {token_file: %s}}
zookeeper: {servers: ["z:1"], auth: {credentials_file: %s}}
health: {tcp: {address: "127.0.0.1:1"}}
service: {promote: {command: [promote]}, demote: {command: [demote]}}
fencing:
  methods:
    - rpc: {}
    - ssh: {user: u, identity_files: [%s, %s], insecure_ignore_host_key: true, kill_port: 1}
`, token, cred, key1, key2)
	}

	good := []string{write("token", 0o600, "t"), write("cred", 0o400, "u:p"), write("key1", 0o600, "k"), write("key2", 0o600, "k")}
	cfg, err := Parse([]byte(config(good[0], good[1], good[2], good[3])), filepath.Join(dir, "good.yaml"))
	if err != nil {
		t.Fatalf("secret files 0600/0400: %v", err)
	}
	if _, err := cfg.ReadToken(); err != nil {
		t.Errorf("ReadToken() of a 0600 file: %v", err)
	}
	if _, err := cfg.ReadCredentials(); err != nil {
		t.Errorf("ReadCredentials() of a 0400 file: %v", err)
	}

	token, cred, key := write("token.644", 0o644, "t"), write("cred.640", 0o640, "u:p"), write("key.604", 0o604, "k")
	_, err = Parse([]byte(config(token, cred, good[2], key)), filepath.Join(dir, "bad.yaml"))
	msg := func(p string, mode string) string {
		return fmt.Sprintf("secret file %s is accessible by group or others (mode %s); it must be readable by its owner only: run chmod 600 %s", p, mode, p)
	}
	checkErrors(t, fieldErrors(t, err), []string{
		"node.admin.token_file: " + msg(token, "0644"),
		"zookeeper.auth.credentials_file: " + msg(cred, "0640"),
		"fencing.methods[1].ssh.identity_files[1]: " + msg(key, "0604"),
	})

	// The readers refuse them too, whatever validation said.
	cfg.Node.Admin.TokenFile, cfg.ZooKeeper.Auth.CredentialsFile = token, cred
	var pe *secret.PermissionError
	if _, err := cfg.ReadToken(); !errors.As(err, &pe) || !strings.Contains(err.Error(), msg(token, "0644")) {
		t.Errorf("ReadToken() of a 0644 file = %v, want %q", err, msg(token, "0644"))
	}
	if _, err := cfg.ReadCredentials(); !errors.As(err, &pe) || !strings.Contains(err.Error(), "chmod 600 "+cred) {
		t.Errorf("ReadCredentials() of a 0640 file = %v, want a *secret.PermissionError", err)
	}
	if _, err := cfg.RPCToken(0); !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "node.admin.token_file: ") {
		t.Errorf("RPCToken(0) of an inherited 0644 file = %v, want a *secret.PermissionError naming node.admin.token_file", err)
	}

	// known_hosts is public: any mode will do.
	kh := write("known_hosts", 0o644, "h ssh-ed25519 AAAA\n")
	yml := strings.Replace(config(good[0], good[1], good[2], good[3]), "insecure_ignore_host_key: true", "known_hosts: "+kh, 1)
	if _, err := Parse([]byte(yml), filepath.Join(dir, "kh.yaml")); err != nil {
		t.Errorf("a 0644 known_hosts file: %v", err)
	}
}
