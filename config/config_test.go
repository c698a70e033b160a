package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestMain makes the secret files under testdata readable by their owner
// only, as validation requires: git records no such permissions, and a
// checkout leaves them 0644.
func TestMain(m *testing.M) {
	for _, name := range []string{"token", "zk.cred", "id_ed25519"} {
		if err := os.Chmod(filepath.Join("testdata", "secrets", name), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// fieldErrors extracts the ValidationErrors that err wraps.
func fieldErrors(t *testing.T, err error) ValidationErrors {
	t.Helper()
	var ve ValidationErrors
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) does not wrap ValidationErrors", err, err)
	}
	return ve
}

func mustLoad(t *testing.T, path string) *Config {
	t.Helper()
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%q) = %v", path, err)
	}
	return cfg
}

func testdataDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDefaults(t *testing.T) {
	got := mustLoad(t, "testdata/minimal.good.yaml")

	want := Default()
	want.Cluster = "orders"
	want.Node.ID = "node-a"
	want.Node.Host = "127.0.0.1"
	want.ZooKeeper.Servers = []string{"127.0.0.1:2181"}
	want.Health.HTTP = &HTTPCheck{URL: "http://127.0.0.1:8080/health"}
	want.Service.Promote.Command = []string{"/bin/true"}
	want.Service.Demote.Command = []string{"/bin/true"}
	want.Fencing.Methods = []FencingMethod{{Shell: &ShellFencing{Command: []string{"/bin/true"}, Timeout: Duration(30 * time.Second)}}}
	if !reflect.DeepEqual(got, want) {
		g, _ := yaml.Marshal(got)
		w, _ := yaml.Marshal(want)
		t.Fatalf("Load(minimal) =\n%s\nwant\n%s", g, w)
	}

	// The defaults themselves, as documented in configs/failoverd.yaml
	// (TestReferenceShowsTheDefaults compares the file with the code).
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"node.admin.listen", got.Node.Admin.Listen, "127.0.0.1:9101"},
		{"node.shutdown_timeout", got.Node.ShutdownTimeout, Duration(30 * time.Second)},
		{"zookeeper.root", got.ZooKeeper.Root, "/failoverd"},
		{"zookeeper.session_timeout", got.ZooKeeper.SessionTimeout, Duration(5 * time.Second)},
		{"zookeeper.auth", got.ZooKeeper.Auth, (*ZooKeeperAuth)(nil)},
		{"election.mode", got.Election.Mode, "fair"},
		{"election.lease", got.Election.Lease, Duration(0)},
		{"election.warm_standby", got.Election.WarmStandby, true},
		{"health.interval", got.Health.Interval, Duration(time.Second)},
		{"health.timeout", got.Health.Timeout, Duration(time.Second)},
		{"health.rise (healthcheck's default)", got.Health.Rise, 0},
		{"health.fall (healthcheck's default)", got.Health.Fall, 0},
		{"service.promote.timeout", got.Service.Promote.Timeout, Duration(30 * time.Second)},
		{"service.demote.timeout", got.Service.Demote.Timeout, Duration(time.Second)},
		{"service.follow", got.Service.Follow, (*FollowHook)(nil)},
		{"service.pre_promote", got.Service.PrePromote, (*Hook)(nil)},
		{"node.priority", got.Node.Priority, 1},
		{"node.service_address", got.Node.ServiceAddress, ""},
		{"fencing.allow_none", got.Fencing.AllowNone, false},
		{"log.format", got.Log.Format, "text"},
		{"log.level", got.Log.Level, "info"},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("default %s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestLoadFull(t *testing.T) {
	cfg := mustLoad(t, "testdata/full.good.yaml")
	dir := testdataDir(t)
	secret := func(name string) string { return filepath.Join(dir, "secrets", name) }

	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"cluster", cfg.Cluster, "orders.eu-1"},
		{"node.admin.token_file (relative to the config)", cfg.Node.Admin.TokenFile, secret("token")},
		{"zookeeper.servers", cfg.ZooKeeper.Servers, []string{"zk1:2181", "zk2.example.com:2182", "[::1]:2181"}},
		{"zookeeper.auth.scheme (default)", cfg.ZooKeeper.Auth.Scheme, "digest"},
		{"zookeeper.auth.credentials_file", cfg.ZooKeeper.Auth.CredentialsFile, secret("zk.cred")},
		{"election.mode", cfg.Election.Mode, ModeUnfair},
		{"election.lease", cfg.Election.Lease, Duration(5 * time.Second)},
		{"zookeeper.tick_time", cfg.ZooKeeper.TickTime, Duration(2 * time.Second)},
		{"health.interval", cfg.Health.Interval, Duration(500 * time.Millisecond)},
		{"health.tcp.address", cfg.Health.TCP.Address, "127.0.0.1:5432"},
		{"service.promote", cfg.Service.Promote, Hook{Command: []string{"/bin/true", "--promote"}, Timeout: Duration(time.Minute)}},
		{"node.service_address", cfg.Node.ServiceAddress, "db-b.example.com:5432"},
		{"service.follow", *cfg.Service.Follow, FollowHook{Command: []string{"/bin/true", "--follow"}, Timeout: Duration(45 * time.Second), NoLeaderAfter: ptr(Duration(0))}},
		{"service.follow.no_leader_after (0: never)", cfg.Service.Follow.NoLeaderWait(), time.Duration(0)},
		{"fencing.methods[0].rpc", *cfg.Fencing.Methods[0].RPC, RPCFencing{URL: "http://db-a.example.com:9201", TokenFile: "", Timeout: Duration(2 * time.Second), AllowInsecureHTTP: true}},
		{"fencing.methods[1].ssh", *cfg.Fencing.Methods[1].SSH, SSHFencing{
			User: "postgres", Port: 2222, IdentityFiles: []string{secret("id_ed25519")}, UseAgent: true,
			KnownHosts: secret("known_hosts"), ConnectTimeout: Duration(2 * time.Second), Timeout: Duration(8 * time.Second),
			Command: "pg_ctl stop -m immediate",
		}},
		{"fencing.methods[2].ssh (defaults)", *cfg.Fencing.Methods[2].SSH, SSHFencing{
			User: "root", Port: 0, IdentityFile: secret("id_ed25519"), InsecureIgnoreHostKey: true, // port, connect_timeout: fencer's defaults
			ConnectTimeout: 0, Timeout: Duration(10 * time.Second), KillPort: 5432,
		}},
		{"method names", []string{cfg.Fencing.Methods[0].Name(), cfg.Fencing.Methods[1].Name(), cfg.Fencing.Methods[3].Name()}, []string{"rpc", "ssh", "shell"}},
		{"log", cfg.Log, Log{Format: "json", Level: "debug"}},
		{"effective lease", effectiveLease(cfg), 5 * time.Second},
		{"AdminURL", cfg.AdminURL(), "http://db-b.example.com:9201"},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

func TestBadConfigs(t *testing.T) {
	dir := testdataDir(t)
	for _, tc := range []struct {
		file string
		want []string // one substring per expected problem, in order
	}{
		{"unknown_key", []string{
			"node.admin.tokn_file: unknown key; did you mean token_file? (line 7)",
			"node.colour: unknown key; known keys: id, host, service_address, priority, admin, shutdown_timeout, state_dir (line 8)",
		}},
		{"duration", []string{
			`zookeeper.session_timeout: invalid duration "5 sec": want a number with a unit, like "5s" or "250ms" (line 4)`,
			"health_: unknown key; did you mean health? (line 5)",
		}},
		{"bare_number_duration", []string{`health.interval: invalid duration "5"`}},
		{"wrong_types", []string{
			`zookeeper.servers: want a list of strings, got "127.0.0.1:2181" (line 4)`,
			"election.mode: want a string, got a list (line 5)",
		}},
		{"flow_style", []string{
			`health.interval: want a duration like "5s" or "250ms", got a list (line 5)`,
			`health.timeout: invalid duration "": want a number with a unit`,
			`health.fall: want an integer, got "x" (line 5)`,
			"health.tcp.zzz: unknown key; known keys: address (line 5)",
			"service.promote.timeout: want a duration like \"5s\" or \"250ms\", got a mapping (line 6)",
			`service.demote.command: want a list of strings, got "p" (line 6)`,
			`service.demote.timeout: invalid duration "12345678901s": out of range (line 6)`,
			`fencing.methods[0].ssh.port: want an integer, got "abcdefghijklmnop" (line 7)`,
			`fencing.methods[1].rpc.timeout: invalid duration "5"`,
			"fencing.methods[0].ssh.kill_port: want an integer, got 1.0 (line 7)",
		}},
		{"rise_not_int", []string{`health.rise: want an integer, got "many"`, "health.fall: want an integer, got 1.5"}},
		{"duplicate_key", []string{"cluster: duplicate key, first set on line 2 (line 3)"}},
		{"no_health", []string{"health: exactly one of http, tcp, exec must be set"}},
		{"two_health", []string{"health: exactly one of http, tcp, exec must be set"}},
		{"bad_url", []string{`health.http.url: "localhost:8080/health" is not an http or https URL`}},
		{"no_fencing", []string{"fencing.methods: no fencing method configured; set fencing.allow_none: true to run without fencing (unsafe)"}},
		{"method_two_kinds", []string{
			"fencing.methods[2]: exactly one of rpc, ssh, shell must be set",
			"fencing.methods[3]: exactly one of rpc, ssh, shell must be set",
		}},
		{"ssh_files", []string{
			"fencing.methods[1].ssh.identity_file: file not found: " + filepath.Join(dir, "secrets/missing_key"),
			"fencing.methods[1].ssh.known_hosts: file not found: " + filepath.Join(dir, "secrets/missing_known_hosts"),
		}},
		{"ssh_rules", []string{
			"fencing.methods[1].ssh.user: required",
			"fencing.methods[1].ssh.port: must be from 1 to 65535, got 70000",
			"fencing.methods[1].ssh: no authentication configured",
			"fencing.methods[1].ssh.known_hosts: required",
			"fencing.methods[1].ssh.connect_timeout: 20s exceeds fencing.methods[1].ssh.timeout (10s)",
			"fencing.methods[1].ssh: exactly one of command, kill_port must be set",
		}},
		{"ssh_insecure_and_known_hosts", []string{
			"fencing.methods[0].ssh: set known_hosts or insecure_ignore_host_key, not both",
			"fencing.methods[0].ssh.kill_port: must be from 1 to 65535, got 99999",
		}},
		{"rpc_no_token", []string{
			`fencing.methods[0].rpc.url: "ftp://db-a" is not an http or https URL`,
			"fencing.methods[0].rpc.token_file: required",
			"fencing.methods[0].rpc.timeout: must be > 0, got -1s",
		}},
		{"demote_too_long", []string{
			"zookeeper.session_timeout: 5s is too short for service.demote.timeout 10s with zookeeper.tick_time unknown (assumed 2.5s, half the session timeout): " +
				"the session timeout minus the demote budget 10.5s (service.demote.timeout 10s plus the kill graces of a running promote and of the demote, 250ms each) " +
				"minus a margin of 250ms leaves a lease of -5.75s, and a lease must be at least twice the renew interval (1.313s, tickTime/2 + 5%) plus 100ms = 2.725s to tolerate anything; " +
				"raise the session timeout, lower the demote timeout or set zookeeper.tick_time",
		}},
		{"demote_explicit_lease", []string{"zookeeper.session_timeout: 5s is too short for service.demote.timeout 3s with zookeeper.tick_time unknown"}},
		{"demote_kill_grace", []string{"election.lease: 3s is too long for zookeeper.session_timeout (5s) and service.demote.timeout (1.5s): " +
			"the lease plus the demote budget 2s (service.demote.timeout 1.5s plus the kill graces of a running promote and of the demote, 250ms each) plus a margin of 250ms (session/20) must fit in the session timeout, " +
			"so that the old leader has demoted before its session can expire; use at most 2.75s, or leave it unset for that"}},
		{"lease_too_long", []string{
			`election.mode: "random" is not one of fair, unfair`,
			"election.lease: 5s is too long for zookeeper.session_timeout (5s) and service.demote.timeout (1s)",
		}},
		{"lease_too_short", []string{
			"election.lease: 3ns is shorter than the minimum 200ms; a leader renews its lease with round trips to the ZooKeeper leader and could not keep a shorter one",
		}},
		{"servers", []string{
			`zookeeper.servers[0]: "zk1" is not host:port`,
			`zookeeper.servers[2]: "zk2:2181" repeats zookeeper.servers[1]`,
			`zookeeper.servers[3]: "zk3:http": port must be a number from 1 to 65535`,
			`zookeeper.servers[4]: "bad host:2181": "bad host" is not a host name or IP address`,
			`zookeeper.root: "/failoverd/" must not end with /`,
			"zookeeper.session_timeout: must be at least 1s, got 500ms",
		}},
		{"no_servers", []string{
			"zookeeper.servers: required",
			`zookeeper.root: "failoverd" must be an absolute znode path`,
		}},
		{"names", []string{
			`cluster: "orders/eu" is not a valid name`,
			`node.id: ".." is not a valid name`,
			`node.host: "db b" is not a host name or IP address`,
			`node.admin.listen: "localhost" is not host:port`,
		}},
		{"required", []string{"cluster: required", "node.id: required", "node.host: required", "node.admin.listen: required"}},
		{"commands", []string{
			"service.promote.command[0]: file not found: /bin/true --fast (the command is a list",
			"service.promote.timeout: must be > 0, got 0s",
			"service.demote.command: required",
		}},
		{"zk_auth", []string{
			`zookeeper.auth.scheme: "sasl" is not supported; use "digest"`,
			"zookeeper.auth.credentials_file: required when zookeeper.auth is set",
		}},
		{"log", []string{
			`log.format: "logfmt" is not one of text, json`,
			`log.level: "trace" is not one of debug, info, warn, error`,
		}},
		{"follow", []string{
			`node.service_address: "127.0.0.1:99999": port must be a number from 1 to 65535`,
			"service.follow.command: required",
			"service.follow.timeout: must be > 0, got -2s",
			"service.follow.no_leader_after: must not be negative (0 never runs the hook without a leader), got -1s",
		}},
		{"follow_address", []string{
			`node.service_address: "db b:6379": contains white space or control characters`,
			"service.follow.no_leader_after: must be at least 10ms, got 5ms",
		}},
		{"shutdown", []string{"node.shutdown_timeout: 500ms is shorter than service.demote.timeout plus its kill grace (1.25s)"}},
		{"graceful_short", []string{"service.demote.graceful_timeout: 500ms is shorter than service.demote.timeout (1s)"}},
		{"graceful_shutdown", []string{"node.shutdown_timeout: 30s (the default: the key is not set) is shorter than service.demote.graceful_timeout plus its kill grace (1m0.25s); a graceful stop must leave time to demote: set node.shutdown_timeout to at least 1m0.25s"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file+".bad.yaml")
			cfg, err := Load(path)
			if err == nil {
				t.Fatalf("Load(%q) = %+v, nil; want errors %q", path, cfg, tc.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("Load(%q) error does not name the file:\n%v", path, err)
			}
			checkErrors(t, fieldErrors(t, err), tc.want)
		})
	}
}

// checkErrors requires exactly one error per wanted substring, in order.
func checkErrors(t *testing.T, got ValidationErrors, want []string) {
	t.Helper()
	for i, w := range want {
		if i >= len(got) {
			t.Errorf("missing error %d: want %q", i, w)
			continue
		}
		if !strings.Contains(got[i].Error(), w) {
			t.Errorf("error %d = %q, want it to contain %q", i, got[i].Error(), w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(got), len(want), got)
	}
}

// TestManyProblems checks that validation reports every problem, not the first.
func TestManyProblems(t *testing.T) {
	_, err := Load("testdata/many_problems.bad.yaml")
	checkErrors(t, fieldErrors(t, err), []string{
		"cluster: required",
		`node.id: "a b" is not a valid name`,
		`node.admin.listen: "127.0.0.1:0": port must be a number from 1 to 65535`,
		`zookeeper.servers[0]: "zk1" is not host:port`,
		`zookeeper.root: must not be "/"`,
		`election.mode: "fastest" is not one of fair, unfair`,
		"election.lease: 10s is too long for zookeeper.session_timeout (5s)",
		"health.interval: must be > 0, got 0s",
		"health: exactly one of http, tcp, exec must be set",
		"service.promote.command: required",
		"service.demote.timeout: must be > 0, got 0s",
		"fencing.methods[0].ssh.known_hosts: required",
		"fencing.methods[0].ssh: exactly one of command, kill_port must be set",
		"fencing.methods[1]: exactly one of rpc, ssh, shell must be set",
		`log.format: "xml" is not one of text, json`,
		`log.level: "loud" is not one of debug, info, warn, error`,
	})
	// One problem per line, so `failoverd validate` can print them all.
	if lines := strings.Count(err.Error(), "\n"); lines != 16 {
		t.Errorf("error has %d newlines, want 16 (a header and one line per problem):\n%v", lines, err)
	}
}

func TestParseDocumentShape(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
	}{
		{"empty", "", "cfg.yaml: config file is empty"},
		{"comments only", "# nothing\n\n", "cfg.yaml: config file is empty"},
		{"null document", "---\n", "cfg.yaml: config file is empty"},
		{"explicit null", "~\n", "cfg.yaml: config file is empty"},
		{"two documents", "cluster: a\n---\ncluster: b\n", "cfg.yaml: more than one YAML document"},
		{"list", "- cluster: a\n", "cfg.yaml: line 1: the top level must be a mapping of keys, got a list"},
		{"scalar", "orders\n", "cfg.yaml: line 1: the top level must be a mapping of keys, got a scalar"},
		{"syntax", "cluster: [orders\n", "parsing cfg.yaml: yaml: line 1"},
		{"tab indent", "node:\n\tid: a\n", "parsing cfg.yaml: yaml: line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.data), "cfg.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, %v; want error containing %q", tc.data, cfg, err, tc.want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("Load(missing) = %v, want a *fs.PathError naming the file", err)
	}
}

func TestSkipFileChecks(t *testing.T) {
	const path = "testdata/ssh_files.bad.yaml"
	if _, err := (LoadOptions{SkipFileChecks: true}).Load(path); err != nil {
		t.Fatalf("Load(%q) with SkipFileChecks = %v, want nil", path, err)
	}
}

func TestFileChecks(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	script := write("not-executable", 0o644)
	yml := fmt.Sprintf(`cluster: c
node: {id: n, host: h, admin: {token_file: %q}}
zookeeper: {servers: ["z:1"]}
health: {exec: {command: [%q]}}
service: {promote: {command: [./missing/promote]}, demote: {command: [demote]}}
fencing: {allow_none: true}
`, dir, script)
	path := filepath.Join(dir, "c.yaml")
	_, err := Parse([]byte(yml), path)
	checkErrors(t, fieldErrors(t, err), []string{
		"node.admin.token_file: is a directory: " + dir,
		"health.exec.command[0]: is not executable: " + script,
		"service.promote.command[0]: file not found: " + filepath.Join(dir, "missing/promote"),
		// demote is a bare name, looked up in $PATH when it runs.
	})
}

func TestValidateBuiltConfig(t *testing.T) {
	cfg := Default()
	cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "c", "n", "h"
	cfg.ZooKeeper.Servers = []string{"z:2181"}
	cfg.Health.TCP = &TCPCheck{Address: "127.0.0.1:1"}
	cfg.Service.Promote.Command = []string{"promote"}
	cfg.Service.Demote.Command = []string{"demote"}
	cfg.Fencing.AllowNone = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	cfg.Health.TCP.Address = "nowhere"
	err := cfg.Validate()
	checkErrors(t, fieldErrors(t, err), []string{`health.tcp.address: "nowhere" is not host:port`})

	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "health.tcp.address" {
		t.Errorf("errors.As(%v, *FieldError) = %+v, want path health.tcp.address", err, fe)
	}
}

func TestDuration(t *testing.T) {
	type doc struct {
		D Duration `yaml:"d"`
	}
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{in: "d: 5s", want: 5 * time.Second},
		{in: "d: 250ms", want: 250 * time.Millisecond},
		{in: "d: 1m30s", want: 90 * time.Second},
		{in: "d: 1h", want: time.Hour},
		{in: "d: 0", want: 0},
		{in: "d: 0s", want: 0},
		{in: `d: "10s"`, want: 10 * time.Second},
		{in: "d: -1s", want: -time.Second}, // sign is for validation to judge
		{in: "d: ~", want: 42},             // null keeps what was there (the default)
		{in: "d: 5", wantErr: `line 1, column 4: invalid duration "5": want a number with a unit, like "5s" or "250ms"`},
		{in: "d: 5 sec", wantErr: `invalid duration "5 sec"`},
		{in: `d: ""`, wantErr: `invalid duration ""`},
		{in: "d: 1.5", wantErr: `invalid duration "1.5": want a number with a unit`},
		{in: "d: 3000000h", wantErr: `invalid duration "3000000h": out of range`},
		{in: "d: 1h5", wantErr: `invalid duration "1h5": want a number with a unit`},
		{in: "d: [5s]", wantErr: `line 1, column 4: want a duration like "5s" or "250ms", got a list`},
		{in: "d: {s: 5}", wantErr: "got a mapping"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got := doc{D: 42}
			err := yaml.Unmarshal([]byte(tc.in), &got)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Unmarshal(%q) = %v, want error containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil || time.Duration(got.D) != tc.want {
				t.Fatalf("Unmarshal(%q) = %v, %v; want %v", tc.in, time.Duration(got.D), err, tc.want)
			}
		})
	}

	out, err := yaml.Marshal(doc{D: Duration(1500 * time.Millisecond)})
	if err != nil || string(out) != "d: 1.5s\n" {
		t.Errorf("Marshal(1.5s) = %q, %v; want %q", out, err, "d: 1.5s\n")
	}
	if got := Duration(90 * time.Second).String(); got != "1m30s" {
		t.Errorf("Duration.String() = %q, want 1m30s", got)
	}
}

func TestSecret(t *testing.T) {
	const raw = "hunter2"
	s := Secret(raw)
	holder := struct {
		Token Secret `yaml:"token" json:"token"`
	}{s}

	y, err := yaml.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]string
	if err := json.Unmarshal(j, &decoded); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("token", "token", s)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("token", "token", s)

	for name, out := range map[string]string{
		"%v": fmt.Sprintf("%v", s), "%s": fmt.Sprintf("%s", s), "%q": fmt.Sprintf("%q", s),
		"%#v": fmt.Sprintf("%#v", s), "%+v struct": fmt.Sprintf("%+v", holder),
		"yaml": string(y), "json": decoded["token"], "slog": logged.String(),
	} {
		if strings.Contains(out, raw) || !strings.Contains(out, "<secret>") {
			t.Errorf("%s of a Secret = %q, want <secret> and no secret", name, out)
		}
	}
	if s.Reveal() != raw {
		t.Errorf("Reveal() = %q, want %q", s.Reveal(), raw)
	}
}

func TestReadSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	cfg := Default()
	if tok, err := cfg.ReadToken(); tok != "" || err != nil {
		t.Errorf("ReadToken() without token_file = %q, %v; want empty, nil", tok.Reveal(), err)
	}
	if cred, err := cfg.ReadCredentials(); cred != "" || err != nil {
		t.Errorf("ReadCredentials() without auth = %q, %v; want empty, nil", cred.Reveal(), err)
	}

	cfg.Node.Admin.TokenFile = write("token", "  t0ken\n\n")
	if tok, err := cfg.ReadToken(); tok.Reveal() != "t0ken" || err != nil {
		t.Errorf("ReadToken() = %q, %v; want t0ken, nil", tok.Reveal(), err)
	}
	cfg.Node.Admin.TokenFile = write("empty", " \n")
	if _, err := cfg.ReadToken(); err == nil || !strings.Contains(err.Error(), "file is empty") {
		t.Errorf("ReadToken() of a blank file = %v, want a 'file is empty' error", err)
	}
	cfg.Node.Admin.TokenFile = filepath.Join(dir, "missing")
	if _, err := cfg.ReadToken(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadToken() of a missing file = %v, want fs.ErrNotExist", err)
	}

	cfg.ZooKeeper.Auth = &ZooKeeperAuth{Scheme: "digest", CredentialsFile: write("cred", "failoverd:pw\n")}
	if cred, err := cfg.ReadCredentials(); cred.Reveal() != "failoverd:pw" || err != nil {
		t.Errorf("ReadCredentials() = %q, %v; want failoverd:pw, nil", cred.Reveal(), err)
	}
	cfg.ZooKeeper.Auth.CredentialsFile = write("badcred", "justapassword\n")
	if _, err := cfg.ReadCredentials(); err == nil || !strings.Contains(err.Error(), "want user:password") || strings.Contains(err.Error(), "justapassword") {
		t.Errorf("ReadCredentials() without a colon = %v, want a 'want user:password' error that hides the content", err)
	}

	cfg.Node.Admin.TokenFile = write("token", "t0ken")
	cfg.Fencing.Methods = []FencingMethod{{RPC: &RPCFencing{TokenFile: write("rpc", "abc")}}, {RPC: &RPCFencing{}}, {Shell: &ShellFencing{}}}
	if tok, err := cfg.RPCToken(0); tok.Reveal() != "abc" || err != nil {
		t.Errorf("RPCToken(0) with its own token_file = %q, %v; want abc, nil", tok.Reveal(), err)
	}
	if tok, err := cfg.RPCToken(1); tok.Reveal() != "t0ken" || err != nil {
		t.Errorf("RPCToken(1) without token_file = %q, %v; want node.admin's t0ken, nil", tok.Reveal(), err)
	}
	if _, err := cfg.RPCToken(2); err == nil {
		t.Errorf("RPCToken of a shell method = nil error, want one")
	}
	cfg.Node.Admin.TokenFile = ""
	if _, err := cfg.RPCToken(1); err == nil || !strings.Contains(err.Error(), "no token_file") {
		t.Errorf("RPCToken(1) with no token file anywhere = %v, want a 'no token_file' error", err)
	}
}

// TestRPCTokenReadErrorReported: when an rpc method's own token_file cannot
// be read (it changed after validation), the error is returned and names
// that key; the daemon used to fall back to node.admin.token_file silently
// and send a token the operator did not choose for the method.
func TestRPCTokenReadErrorReported(t *testing.T) {
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(admin, []byte("admin-t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Node.Admin.TokenFile = admin
	cfg.Fencing.Methods = []FencingMethod{{RPC: &RPCFencing{TokenFile: filepath.Join(dir, "gone")}}}
	tok, err := cfg.RPCToken(0)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "fencing.methods[0].rpc.token_file: ") {
		t.Fatalf("RPCToken(0) of a missing own token file = %v, want fs.ErrNotExist naming fencing.methods[0].rpc.token_file", err)
	}
	if tok.Reveal() != "" {
		t.Errorf("RPCToken(0) returned a token (%d bytes) with its error", len(tok.Reveal()))
	}
}

func TestAdminURL(t *testing.T) {
	for _, tc := range []struct {
		listen, advertise, want string
	}{
		{"127.0.0.1:9101", "", "http://127.0.0.1:9101"},
		{":9101", "", "http://10.0.0.11:9101"},
		{"0.0.0.0:9101", "", "http://10.0.0.11:9101"},
		{"[::]:9101", "", "http://10.0.0.11:9101"},
		{"[::1]:9101", "", "http://[::1]:9101"},
		{"127.0.0.1:9101", "https://db-a.example.com:8443/", "https://db-a.example.com:8443"},
	} {
		cfg := Default()
		cfg.Node.Host = "10.0.0.11"
		cfg.Node.Admin.Listen, cfg.Node.Admin.AdvertiseURL = tc.listen, tc.advertise
		if got := cfg.AdminURL(); got != tc.want {
			t.Errorf("AdminURL() with listen %q, advertise_url %q = %q, want %q", tc.listen, tc.advertise, got, tc.want)
		}
	}
}

// shippedConfigs lists every YAML file under configs/ and examples/.
func shippedConfigs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../configs/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no configs/*.yaml found; the reference config must ship")
	}
	err = filepath.WalkDir("../examples", func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return fs.SkipAll // examples/ may not exist yet
		}
		if err != nil {
			return err
		}
		if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestShippedConfigs validates every shipped YAML file. They name files of
// the machine they are written for, so file checks are skipped.
func TestShippedConfigs(t *testing.T) {
	for _, path := range shippedConfigs(t) {
		t.Run(path, func(t *testing.T) {
			if _, err := (LoadOptions{SkipFileChecks: true}).Load(path); err != nil {
				t.Errorf("shipped config does not validate:\n%v", err)
			}
		})
	}
}

// TestReferenceDocumentsEveryKey requires configs/failoverd.yaml to mention
// every key of the Config tree (set, or commented out).
func TestReferenceDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../configs/failoverd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, ks := range knownKeys {
		keys = append(keys, ks...)
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		if !regexp.MustCompile(`(?m)^[ \t#-]*` + regexp.QuoteMeta(k) + `:`).Match(data) {
			t.Errorf("configs/failoverd.yaml does not document key %q", k)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// node.priority: default 1, 0 allowed (never leads), negative refused with
// its YAML path; a pre_promote block with only a command gets the 30s
// timeout, and a bad one is reported under service.pre_promote.
func TestPriorityAndPrePromote(t *testing.T) {
	doc := func(node, svc string) string {
		return `cluster: orders
node: {id: node-a, host: 127.0.0.1` + node + `}
zookeeper: {servers: ["127.0.0.1:2181"]}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
` + svc + `
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`
	}
	cfg, err := Parse([]byte(doc(", priority: 0", "  pre_promote: {command: [/bin/true]}")), "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.Priority != 0 || cfg.Service.PrePromote == nil || cfg.Service.PrePromote.Timeout != Duration(30*time.Second) {
		t.Errorf("priority %d, pre_promote %+v; want 0 and a 30s timeout", cfg.Node.Priority, cfg.Service.PrePromote)
	}
	for _, tc := range []struct{ node, svc, want string }{
		{", priority: -1", "", "node.priority: must be >= 0"},
		{", priority: high", "", "node.priority"},
		{"", "  pre_promote: {timeout: 5s}", "service.pre_promote.command: required"},
		{"", "  pre_promote: {command: [/bin/true], timeout: 1ms}", "service.pre_promote.timeout"},
	} {
		_, err := Parse([]byte(doc(tc.node, tc.svc)), "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %q: err %v, want %q", tc.node, tc.svc, err, tc.want)
		}
	}
}

// A follow block with only a command gets the documented defaults.
func TestFollowDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`cluster: orders
node: {id: node-a, host: 127.0.0.1, service_address: "[::1]:6379"}
zookeeper: {servers: ["127.0.0.1:2181"]}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
  follow: {command: [/bin/true]}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.Service.Follow
	if f.Timeout != Duration(30*time.Second) || f.NoLeaderWait() != 30*time.Second || cfg.Node.ServiceAddress != "[::1]:6379" {
		t.Errorf("follow %+v (no_leader_after %v), service address %q; want the 30s defaults", f, f.NoLeaderWait(), cfg.Node.ServiceAddress)
	}
}

// Hook programs given relative to the config file (with a '/') are resolved
// against its directory, the follow hook's like the others (the Redis
// example's templates name hooks/follow.sh).
func TestRelativeHookPathsResolved(t *testing.T) {
	dir := t.TempDir()
	cfg, err := (LoadOptions{SkipFileChecks: true}).Parse([]byte(`cluster: orders
node: {id: node-a, host: 127.0.0.1}
zookeeper: {servers: ["127.0.0.1:2181"]}
health: {exec: {command: [hooks/health.sh]}}
service:
  promote: {command: [hooks/promote.sh]}
  demote: {command: [hooks/demote.sh]}
  follow: {command: [hooks/follow.sh, 127.0.0.1:6379]}
fencing: {methods: [{shell: {command: [hooks/fence.sh]}}]}
`), filepath.Join(dir, "node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, cmd := range map[string][]string{
		"health.exec":     cfg.Health.Exec.Command,
		"service.promote": cfg.Service.Promote.Command,
		"service.demote":  cfg.Service.Demote.Command,
		"service.follow":  cfg.Service.Follow.Command,
		"fencing shell":   cfg.Fencing.Methods[0].Shell.Command,
	} {
		if want := filepath.Join(dir, "hooks"); filepath.Dir(cmd[0]) != want {
			t.Errorf("%s: program %q, want it in %s", name, cmd[0], want)
		}
	}
}
