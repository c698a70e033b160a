package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

func validateNoFiles(cfg *Config) error { return cfg.validate(LoadOptions{SkipFileChecks: true}) }

// TestDurationBounds checks every duration the daemon turns into a timer,
// ticker or deadline: zero, negative, too small and too large values are
// refused with their YAML path.
func TestDurationBounds(t *testing.T) {
	if err := validateNoFiles(validConfig()); err != nil {
		t.Fatalf("base config: %v", err)
	}
	fields := []struct {
		path string
		set  func(c *Config, d Duration)
		min  time.Duration
	}{
		{"node.shutdown_timeout", func(c *Config, d Duration) { c.Node.ShutdownTimeout = d }, MinTimeout},
		{"zookeeper.session_timeout", func(c *Config, d Duration) { c.ZooKeeper.SessionTimeout = d }, MinSessionTimeout},
		{"health.interval", func(c *Config, d Duration) { c.Health.Interval = d }, MinTimeout},
		{"health.timeout", func(c *Config, d Duration) { c.Health.Timeout = d }, MinTimeout},
		{"service.promote.timeout", func(c *Config, d Duration) { c.Service.Promote.Timeout = d }, MinTimeout},
		{"service.demote.timeout", func(c *Config, d Duration) { c.Service.Demote.Timeout = d }, MinTimeout},
		{"fencing.methods[0].rpc.timeout", func(c *Config, d Duration) { c.Fencing.Methods[0].RPC.Timeout = d }, MinTimeout},
		{"fencing.methods[1].ssh.connect_timeout", func(c *Config, d Duration) { c.Fencing.Methods[1].SSH.ConnectTimeout = d }, MinTimeout},
		{"fencing.methods[1].ssh.timeout", func(c *Config, d Duration) { c.Fencing.Methods[1].SSH.Timeout = d }, MinTimeout},
		{"fencing.methods[2].shell.timeout", func(c *Config, d Duration) { c.Fencing.Methods[2].Shell.Timeout = d }, MinTimeout},
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

// TestLeaseBounds pins the lease rule: at least MinLease, and lease +
// max(lease/4, session/4) + session/20 within the session timeout (at most
// 70 % of it), as the elector requires of the negotiated timeout.
func TestLeaseBounds(t *testing.T) {
	for _, tc := range []struct {
		session, lease time.Duration
		want           string // "" for valid
	}{
		{5 * time.Second, 0, ""},
		{time.Second, 0, ""}, // 666ms: the smallest default
		{5 * time.Second, 3 * time.Nanosecond, "3ns is shorter than the minimum 200ms"},
		{5 * time.Second, time.Nanosecond, "shorter than the minimum 200ms"},
		{5 * time.Second, MinLease - 1, "shorter than the minimum 200ms"},
		{5 * time.Second, MinLease, ""},
		{5 * time.Second, -time.Second, "must be 0 (2/3 of the session timeout) or positive, got -1s"},
		{5 * time.Second, 3500 * time.Millisecond, ""},
		{5 * time.Second, 3501 * time.Millisecond, "3.501s is too long for zookeeper.session_timeout (5s)"},
		{5 * time.Second, 4 * time.Second, "use at most 3.5s (70% of the session timeout)"},
		{5 * time.Second, 5 * time.Second, "too long"},
		{5 * time.Second, time.Hour, "too long"},
		{9 * time.Second, 6 * time.Second, ""},
		{2 * time.Second, time.Second, ""},
		{time.Second, 700 * time.Millisecond, ""},
		{time.Second, 701 * time.Millisecond, "use at most 700ms"},
	} {
		cfg := validConfig()
		cfg.ZooKeeper.SessionTimeout, cfg.Election.Lease = Duration(tc.session), Duration(tc.lease)
		cfg.Service.Demote.Timeout = Duration(10 * time.Millisecond) // keep the demote budget out of it
		es := fieldErrorsOrNil(validateNoFiles(cfg))
		switch {
		case tc.want == "" && len(es) > 0:
			t.Errorf("session %v, lease %v: %v, want valid", tc.session, tc.lease, es)
		case tc.want != "" && (len(es) != 1 || es[0].Path != "election.lease" || !strings.Contains(es[0].Msg, tc.want)):
			t.Errorf("session %v, lease %v: %v, want one election.lease error containing %q", tc.session, tc.lease, es, tc.want)
		}
	}
}

// TestMaxLeaseFor checks that MaxLeaseFor is the longest lease that fits.
func TestMaxLeaseFor(t *testing.T) {
	for _, s := range []time.Duration{MinSessionTimeout, 1001 * time.Millisecond, 2 * time.Second, 5 * time.Second, 9*time.Second + 7, 40 * time.Second, MaxDuration} {
		l := MaxLeaseFor(s)
		if LeaseRoom(l, s) > s || LeaseRoom(l+1, s) <= s && LeaseRoom(l+2, s) <= s {
			t.Errorf("MaxLeaseFor(%v) = %v: room %v, and %v would fit too", s, l, LeaseRoom(l, s), l+2)
		}
		if d := (Election{}).LeaseFor(s); LeaseRoom(d, s) > s {
			t.Errorf("the default lease %v does not fit session %v", d, s)
		}
	}
}

// TestDemoteBudget pins that the demote hook must fit, with a kill grace
// of at least MinDemoteKillGrace, in the session timeout minus the lease.
func TestDemoteBudget(t *testing.T) {
	ms := func(n int) Duration { return Duration(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name           string
		session, lease Duration
		demote         Duration
		want           string
	}{
		{"defaults", ms(5000), 0, ms(1000), ""},
		{"room for the least kill grace", ms(5000), 0, ms(1616), ""}, // 1.616s + 50ms <= 1.667s
		{"no room for the least kill grace", ms(5000), 0, ms(1617), "1.617s plus a kill grace of at least 50ms exceeds zookeeper.session_timeout (5s) minus the lease (3.333s, 2/3 of the session timeout) = 1.667s"},
		{"demote alone fits, not with the kill grace", ms(5000), 0, ms(1650), "exceeds"},
		{"explicit lease", ms(2000), ms(1000), ms(950), ""},
		{"explicit lease, over", ms(2000), ms(1000), ms(951), "minus election.lease (1s) = 1s"},
	} {
		cfg := validConfig()
		cfg.ZooKeeper.SessionTimeout, cfg.Election.Lease, cfg.Service.Demote.Timeout = tc.session, tc.lease, tc.demote
		es := fieldErrorsOrNil(validateNoFiles(cfg))
		switch {
		case tc.want == "" && len(es) > 0:
			t.Errorf("%s: %v, want valid", tc.name, es)
		case tc.want != "" && (len(es) != 1 || es[0].Path != "service.demote.timeout" || !strings.Contains(es[0].Msg, tc.want) ||
			!strings.Contains(es[0].Msg, "against the session timeout ZooKeeper grants")):
			t.Errorf("%s: %v, want one service.demote.timeout error containing %q", tc.name, es, tc.want)
		}
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
		"fencing.methods[0].rpc.token_file: " + msg(token, "0644"), // inherited from node.admin.token_file
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
	if _, err := (&RPCFencing{TokenFile: token}).ReadToken(); !errors.As(err, &pe) {
		t.Errorf("RPCFencing.ReadToken() of a 0644 file = %v, want a *secret.PermissionError", err)
	}

	// known_hosts is public: any mode will do.
	kh := write("known_hosts", 0o644, "h ssh-ed25519 AAAA\n")
	yml := strings.Replace(config(good[0], good[1], good[2], good[3]), "insecure_ignore_host_key: true", "known_hosts: "+kh, 1)
	if _, err := Parse([]byte(yml), filepath.Join(dir, "kh.yaml")); err != nil {
		t.Errorf("a 0644 known_hosts file: %v", err)
	}
}
