package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validate accepts a config that only warrants a warning (exit 0, "ok"),
// and says on stderr what to change.
func TestValidateWarnsWhenAReconnectCanEndLeadership(t *testing.T) {
	base := `cluster: orders
node: {id: node-a, host: 127.0.0.1}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`
	for _, tc := range []struct {
		zk, warn string
	}{
		{`zookeeper: {servers: ["127.0.0.1:2181"]}`, "warning: zookeeper.tick_time: "},
		{`zookeeper: {servers: ["127.0.0.1:2181"], tick_time: 2s}`, ""},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(base+tc.zk+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := cmdValidate([]string{"-c", path}, &out, &errb); code != exitOK || out.String() != "ok\n" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", tc.zk, code, out.String(), errb.String())
		}
		if got := errb.String(); tc.warn == "" && got != "" || tc.warn != "" && !strings.HasPrefix(got, tc.warn) {
			t.Errorf("%s: stderr %q, want prefix %q", tc.zk, got, tc.warn)
		}
	}
}

// validate warns, with the key, the figures and the lease_ttl that works,
// when an etcd lease leaves less than an etcd leader election after one
// renewal went unanswered: the PostgreSQL example's 3s demote timeout
// (budget 3.5s) at lease_ttl 5s and 6s lost its term when the etcd leader
// was killed; 7s keeps 2.15s.
func TestValidateWarnsWhenAnEtcdElectionCanEndLeadership(t *testing.T) {
	base := `cluster: orders
node: {id: node-a, host: 127.0.0.1}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true], timeout: 3s}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
coordination: {backend: etcd}
`
	for _, tc := range []struct {
		ttl, warn string
	}{
		{"5s", "warning: etcd.lease_ttl: 5s leaves 250ms after one renewal that went unanswered, less than an etcd leader election (about 2s): " +
			"the TTL 5s less the margin 250ms, the renew interval 1s and the demote budget 3.5s"},
		{"6s", "warning: etcd.lease_ttl: 6s leaves 1.2s after one renewal that went unanswered"},
		{"7s", ""},
		{"12s", ""},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		cfg := base + "etcd: {endpoints: [\"127.0.0.1:2379\"], lease_ttl: " + tc.ttl + "}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := cmdValidate([]string{"-c", path}, &out, &errb); code != exitOK || out.String() != "ok\n" {
			t.Fatalf("lease_ttl %s: exit %d, stdout %q, stderr %q", tc.ttl, code, out.String(), errb.String())
		}
		got := errb.String()
		if tc.warn == "" {
			if got != "" {
				t.Errorf("lease_ttl %s: stderr %q, want nothing", tc.ttl, got)
			}
			continue
		}
		if !strings.HasPrefix(got, tc.warn) || !strings.Contains(got, "lease_expired") || !strings.Contains(got, "7s rides an etcd election out") {
			t.Errorf("lease_ttl %s: stderr %q, want prefix %q naming lease_expired and 7s", tc.ttl, got, tc.warn)
		}
	}
}

// validate checks each backend's timing through the check the daemon
// wires into config (config imports no backend): a lease that does not
// leave the demote budget is refused with its YAML path, in the backend's
// words; with the check unwired it would pass.
func TestValidateChecksBackendTiming(t *testing.T) {
	base := `cluster: orders
node: {id: node-a, host: 127.0.0.1}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true], timeout: 3s}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`
	for _, tc := range []struct {
		backend, want string
	}{
		{`zookeeper: {servers: ["127.0.0.1:2181"]}`,
			"zookeeper.session_timeout: 5s is too short for service.demote.timeout 3s with zookeeper.tick_time unknown (assumed 2.5s, half the session timeout): " +
				"the session timeout minus the demote budget 3.5s (service.demote.timeout 3s plus the kill graces of a running promote and of the demote, 250ms each)"},
		{"coordination: {backend: etcd}\netcd: {endpoints: [\"127.0.0.1:2379\"], lease_ttl: 4s}",
			"etcd.lease_ttl: 4s is too short for service.demote.timeout 3s: a leader renews every 1s (a third of the TTL, at most 1s)"},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(base+tc.backend+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := cmdValidate([]string{"-c", path}, &out, &errb); code != exitUsage || out.String() != "" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want the timing refused", tc.backend, code, out.String(), errb.String())
		}
		if got := errb.String(); !strings.Contains(got, tc.want) {
			t.Errorf("%s: stderr %q, want %q", tc.backend, got, tc.want)
		}
	}
}

// With election.fence_first, validate prints the failover arithmetic on
// stdout before "ok", with the renew interval of each backend as its
// elector computes it (wired into config here), and warns on stderr when
// suspect_after leaves a renewal no room to be late. Without the option
// it prints only "ok".
func TestValidatePrintsFenceFirstArithmetic(t *testing.T) {
	base := `cluster: orders
node: {id: node-a, host: 127.0.0.1}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing: {methods: [{rpc: {timeout: 2s, token_file: TOKEN}}]}
`
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base = strings.Replace(base, "TOKEN", token, 1)
	for _, tc := range []struct {
		name, doc string
		want      []string // in stdout, in order
		warn      string
	}{
		{"zookeeper", "zookeeper: {servers: [\"127.0.0.1:2181\"], tick_time: 2s}\nelection: {fence_first: true}\n", []string{
			"failover of a silent leader with election.fence_first",
			"the heartbeat is overdue after the leader's renew interval 1.05s + election.suspect_after 300ms, then a probe of the leader's admin API up to 300ms, " +
				"then the proving methods in order (fencing.methods[0] rpc 2s)",
			"won within 3.65s (1.05s + 300ms + 300ms + 2s)",
			"zookeeper.session_timeout 5s after the leader's last renewal",
			"within 3.65s (zookeeper.session_timeout 5s - renew interval 1.05s - election.suspect_after 300ms)",
			"its heartbeat counts as overdue once it stood still for 1.35s (renew interval 1.05s + election.suspect_after 300ms), " +
				"so a crashed leader is suspected 825ms after the crash on average",
			"ok\n",
		}, ""},
		{"etcd", "coordination: {backend: etcd}\netcd: {endpoints: [\"127.0.0.1:2379\"], lease_ttl: 6s}\nelection: {fence_first: true, suspect_after: 50ms}\n", []string{
			"overdue after the leader's renew interval 1s + election.suspect_after 50ms, then a probe of the leader's admin API up to 50ms",
			"won within 3.1s (1s + 50ms + 50ms + 2s)",
			"etcd.lease_ttl 6s after the leader's last renewal",
			"asks again every 500ms",
			"ok\n",
		}, "warning: election.suspect_after: 50ms is below 100ms"},
		{"off", "zookeeper: {servers: [\"127.0.0.1:2181\"], tick_time: 2s}\n", []string{"ok\n"}, ""},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(base+tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := cmdValidate([]string{"-c", path}, &out, &errb); code != exitOK {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", tc.name, code, out.String(), errb.String())
		}
		got := out.String()
		if !strings.HasSuffix(got, "\nok\n") && got != "ok\n" {
			t.Errorf("%s: stdout does not end with ok: %q", tc.name, got)
		}
		if tc.name == "off" && got != "ok\n" {
			t.Errorf("fence_first off: stdout %q, want only ok", got)
		}
		rest := got
		for _, w := range tc.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s: stdout does not say %q after what came before:\n%s", tc.name, w, got)
				continue
			}
			rest = rest[i+len(w):]
		}
		if e := errb.String(); tc.warn == "" && e != "" || tc.warn != "" && !strings.HasPrefix(e, tc.warn) {
			t.Errorf("%s: stderr %q, want prefix %q", tc.name, e, tc.warn)
		}
	}
}
