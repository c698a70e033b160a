package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/internal/tlstest"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// writeEtcdConfig writes a CLI's config on the etcd backend.
func writeEtcdConfig(t *testing.T, endpoints []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.yaml")
	q := make([]string, len(endpoints))
	for i, e := range endpoints {
		q[i] = fmt.Sprintf("%q", e)
	}
	cfg := fmt.Sprintf(`cluster: ec
node: {id: cli, host: 127.0.0.1}
coordination: {backend: etcd}
etcd: {endpoints: [%s], prefix: /failoverd-cli, lease_ttl: 5s, dial_timeout: 2s}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`, strings.Join(q, ", "))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The operator commands run on the etcd backend as on ZooKeeper: status,
// pause and resume, history, leader, breadcrumb show and clear, and
// failover's refusal of a node that is not a member, against a real etcd
// cluster.
func TestOperatorCommandsOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	conf := writeEtcdConfig(t, c.Endpoints())
	cli := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(append(args[:1:1], append([]string{"-c", conf}, args[1:]...)...), &out, &errb)
		return out.String(), errb.String(), code
	}
	out, errs, code := cli("status")
	if code != exitOK || !strings.Contains(out, "Cluster: ec") || !strings.Contains(out, "Breadcrumb: none") {
		t.Fatalf("status: exit %d, %q, %q", code, out, errs)
	}
	if out, errs, code := cli("pause", "--reason", "etcd upgrade"); code != exitOK || !strings.Contains(out, "paused") {
		t.Fatalf("pause: exit %d, %q, %q", code, out, errs)
	}
	out, _, _ = cli("status", "--json")
	var v clusterView
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Pause == nil || v.Pause.Reason != "etcd upgrade" {
		t.Fatalf("status --json while paused: %v, %+v\n%s", err, v.Pause, out)
	}
	if out, errs, code := cli("resume"); code != exitOK || !strings.Contains(out, "resumed") {
		t.Fatalf("resume: exit %d, %q, %q", code, out, errs)
	}
	if out, errs, code := cli("history"); code != exitOK {
		t.Fatalf("history: exit %d, %q, %q", code, out, errs)
	}
	if out, errs, code := cli("leader"); code != exitNoLeader || out != "no leader\n" {
		t.Fatalf("leader: exit %d, %q, %q; want no leader, exit %d", code, out, errs, exitNoLeader)
	}
	if out, errs, code := cli("breadcrumb", "show"); code != exitOK || !strings.Contains(out, "no breadcrumb") {
		t.Fatalf("breadcrumb show: exit %d, %q, %q", code, out, errs)
	}
	if out, errs, code := cli("breadcrumb", "clear"); code != exitOK || !strings.Contains(out, "no breadcrumb") {
		t.Fatalf("breadcrumb clear: exit %d, %q, %q", code, out, errs)
	}
	if out, errs, code := cli("failover", "--to", "nobody"); code != exitRuntime || !strings.Contains(errs, `"nobody" is not a member of cluster ec`) {
		t.Fatalf("failover --to nobody: exit %d, %q, %q", code, out, errs)
	}
}

// Without etcd, a command fails with exit 1 and names the endpoints,
// within a bounded time.
func TestOperatorCommandWithoutEtcd(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	conf := writeEtcdConfig(t, []string{"http://" + addr})
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"status", "-c", conf}, &out, &errb)
	took := time.Since(start)
	if code != exitRuntime || !strings.Contains(errb.String(), "cannot reach etcd [http://"+addr+"]") {
		t.Fatalf("status without etcd: exit %d, %q, %q", code, out.String(), errb.String())
	}
	if took > 30*time.Second {
		t.Errorf("status without etcd took %v, want the 10s bound", took)
	}
}

// The daemon's etcd client gets etcd.tls (CA pool, client certificate)
// and the user's password read from its file; a password file others may
// read is refused when the daemon reads it, as at validation.
func TestEtcdDialFromConfig(t *testing.T) {
	dir := t.TempDir()
	pki := tlstest.New(t, "etcd")
	pass := filepath.Join(dir, "etcd.password")
	if err := os.WriteFile(pass, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c.yaml")
	write := func(etcd string) {
		t.Helper()
		cfg := `cluster: ec
node: {id: n1, host: 127.0.0.1}
coordination: {backend: etcd}
etcd: ` + etcd + `
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf(`{endpoints: ["https://127.0.0.1:2379"], dial_timeout: 3s, username: fo, password_file: %s,
  tls: {ca_file: %s, cert_file: %s, key_file: %s}}`, pass, pki.CAFile, pki.CertFile, pki.KeyFile))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := etcdDial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if dc.Username != "fo" || dc.Password != "hunter2" || dc.DialTimeout != 3*time.Second || dc.TLS == nil ||
		dc.TLS.RootCAs == nil || len(dc.TLS.Certificates) != 1 || len(dc.Endpoints) != 1 {
		t.Errorf("dial config %+v", dc)
	}
	if l := layoutOf(cfg); l.Root != "/failoverd" || l.Cluster != "ec" {
		t.Errorf("layout %+v, want the etcd prefix", l)
	}

	// Loosened after validation: the daemon's read refuses it too.
	if err := os.Chmod(pass, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdDial(cfg); err == nil || !strings.Contains(err.Error(), "etcd.password_file") {
		t.Errorf("etcdDial with a password file others may read: %v; want it refused, naming etcd.password_file", err)
	}

	// Plain endpoints without a tls block: no TLS, no user.
	write(`{endpoints: ["127.0.0.1:2379"]}`)
	if cfg, err = config.Load(path); err != nil {
		t.Fatal(err)
	}
	if dc, err := etcdDial(cfg); err != nil || dc.TLS != nil || dc.Username != "" || dc.Password != "" {
		t.Errorf("plain dial config %+v, %v", dc, err)
	}
}
