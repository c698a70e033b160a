package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/etcdcluster"
)

// etcdConfig is a valid config on the etcd backend with etcd block etcd
// (a YAML flow mapping) and service.demote.timeout demote.
func etcdConfig(etcd, demote string) string {
	return `cluster: orders
node: {id: node-a, host: 127.0.0.1}
coordination: {backend: etcd}
etcd: ` + etcd + `
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true], timeout: ` + demote + `}
fencing:
  methods:
    - shell: {command: [/bin/true]}
`
}

// A full etcd block loads, its TLS and password reach the client, and
// nothing is warned about.
func TestEtcdBackendLoads(t *testing.T) {
	f := newTLSFixture(t)
	pass := f.write(t, "etcd.password", "hunter2\n", 0o600)
	block := fmt.Sprintf(`{endpoints: [https://etcd1:2379, "https://[::1]:2379", "etcd3.example:2379"], prefix: /ha/failoverd, lease_ttl: 6s, dial_timeout: 2s,
  tls: {ca_file: %s, cert_file: %s, key_file: %s}, username: failoverd, password_file: %s}`, f.pki.CAFile, f.pki.CertFile, f.pki.KeyFile, pass)
	cfg, err := Parse([]byte(etcdConfig(block, "1s")), filepath.Join(f.dir, "failoverd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Etcd
	if cfg.Coordination.Backend != BackendEtcd || e.Prefix != "/ha/failoverd" || e.LeaseTTL.Std() != 6*time.Second || e.DialTimeout.Std() != 2*time.Second {
		t.Errorf("backend %q, etcd block %+v", cfg.Coordination.Backend, e)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("Warnings() = %q, want none", w)
	}
	tc, err := e.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	if tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Errorf("ClientTLS() = %+v; want the CA pool and one client certificate", tc)
	}
	if p, err := e.ReadPassword(); err != nil || p.Reveal() != "hunter2" {
		t.Errorf("ReadPassword() = %q, %v; want hunter2", p.Reveal(), err)
	}

	// Without a tls block: plain endpoints use no TLS, https ones the
	// system roots.
	for _, tc := range []struct {
		endpoint string
		tls      bool
	}{{"http://127.0.0.1:2379", false}, {"127.0.0.1:2379", false}, {"https://etcd1:2379", true}} {
		c, err := Parse([]byte(etcdConfig(`{endpoints: ["`+tc.endpoint+`"]}`, "1s")), "")
		if err != nil {
			t.Fatalf("%s: %v", tc.endpoint, err)
		}
		got, err := c.Etcd.ClientTLS()
		if err != nil || (got != nil) != tc.tls || (got != nil && got.RootCAs != nil) {
			t.Errorf("%s: ClientTLS() = %+v, %v; want TLS %t with the system roots", tc.endpoint, got, err, tc.tls)
		}
		if p, err := c.Etcd.ReadPassword(); err != nil || p != "" {
			t.Errorf("%s: ReadPassword() = %q, %v; want none", tc.endpoint, p.Reveal(), err)
		}
	}
}

// The client key and the password file are secrets: group or others
// having access is refused, as for every other secret in the config, and
// every problem of the block is listed with its path.
func TestEtcdSecretsChecked(t *testing.T) {
	f := newTLSFixture(t)
	pass := f.write(t, "etcd.password", "hunter2\n", 0o644)
	if err := os.Chmod(f.pki.KeyFile, 0o640); err != nil {
		t.Fatal(err)
	}
	notCA := f.write(t, "not-ca.pem", "not a certificate\n", 0o644)
	block := fmt.Sprintf(`{endpoints: [https://etcd1:2379], tls: {ca_file: %s, cert_file: %s, key_file: %s}, username: failoverd, password_file: %s}`,
		notCA, f.pki.CertFile, f.pki.KeyFile, pass)
	_, err := Parse([]byte(etcdConfig(block, "1s")), filepath.Join(f.dir, "failoverd.yaml"))
	if err == nil {
		t.Fatal("Parse = nil error; want the secrets refused")
	}
	errs := fieldErrors(t, err)
	checkErrors(t, errs, []string{
		"etcd.tls.ca_file: " + notCA + " holds no PEM certificate",
		"etcd.tls.key_file: ",
		"etcd.password_file: ",
	})
	for _, e := range errs[1:] {
		if !strings.Contains(e.Msg, "group or others") && !strings.Contains(e.Msg, "0640") && !strings.Contains(e.Msg, "0644") {
			t.Errorf("%s: want the permission problem named", e)
		}
	}

	// A key that does not match the certificate is named too.
	if err := os.Chmod(f.pki.KeyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	other := newTLSFixture(t)
	block = fmt.Sprintf(`{endpoints: [https://etcd1:2379], tls: {cert_file: %s, key_file: %s}}`, other.pki.CertFile, f.pki.KeyFile)
	_, err = Parse([]byte(etcdConfig(block, "1s")), "")
	checkErrors(t, fieldErrors(t, err), []string{"etcd.tls: client certificate " + other.pki.CertFile + " and key " + f.pki.KeyFile})
}

// etcd.lease_ttl: refused below what etcd grants, in fractions of a
// second, and when etcdcluster.LeaseFits refuses it for the demote
// budget; warned about below etcd's advice, and when it leaves less than
// an etcd leader election after one renewal went unanswered (elect).
func TestEtcdLeaseTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl, demote string
		err, warn   string
		elect       bool
	}{
		{"5s", "1s", "", "", false},
		{"1s", "100ms", "etcd.lease_ttl: 1s is shorter than etcd grants", "", false},
		{"500ms", "100ms", "etcd.lease_ttl: 500ms is shorter than etcd grants", "", false},
		{"2500ms", "100ms", "etcd.lease_ttl: 2.5s is not a whole number of seconds", "", false},
		{"2s", "100ms", "", "etcd.lease_ttl: 2s is below the 5s etcd's maintainers advise", true},
		{"3s", "1s", "", "etcd.lease_ttl: 3s is below the 5s", true},
		// 2s - 100ms - 667ms - 100ms leaves 1.133s < 1.5s (1s + 2 × 250ms).
		{"2s", "1s", "etcd.lease_ttl: 2s is too short for service.demote.timeout 1s", "", false},
		// 4s - 200ms - 1s - 100ms leaves 2.7s < 3.5s.
		{"4s", "3s", "etcd.lease_ttl: 4s is too short for service.demote.timeout 3s", "", false},
		// 5s - 250ms - 1s - 100ms leaves 3.65s ≥ 3.5s; after one missed
		// renewal, 5s - 250ms - 1s - 3.5s = 250ms, short of an election.
		{"5s", "3s", "", "etcd.lease_ttl: 5s leaves 250ms after one renewal that went unanswered", false},
		{"7s", "3s", "", "", false},
		{"10s", "3s", "", "", false},
		{"48h", "1s", "etcd.lease_ttl: must be at most 24h0m0s", "", false},
	} {
		t.Run(tc.ttl+"/"+tc.demote, func(t *testing.T) {
			cfg, err := Parse([]byte(etcdConfig(`{endpoints: ["127.0.0.1:2379"], lease_ttl: `+tc.ttl+`}`, tc.demote)), "")
			if tc.err != "" {
				checkErrors(t, fieldErrors(t, err), []string{tc.err})
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The rule is LeaseFits itself, on the TTL asked for.
			if err := etcdcluster.LeaseFits(cfg.Etcd.LeaseTTL.Std(), 0, cfg.demoteBudget()); err != nil {
				t.Errorf("config accepted what LeaseFits refuses: %v", err)
			}
			w := cfg.Warnings()
			if tc.elect {
				if len(w) != 2 || !strings.HasPrefix(w[0], "etcd.lease_ttl: "+tc.ttl+" leaves ") {
					t.Errorf("Warnings() = %q, want one on the etcd election first", w)
				}
				w = w[min(len(w), 1):]
			}
			switch {
			case tc.warn == "" && len(w) != 0:
				t.Errorf("Warnings() = %q, want none", w)
			case tc.warn != "" && (len(w) != 1 || !strings.HasPrefix(w[0], tc.warn)):
				t.Errorf("Warnings() = %q, want one starting %q", w, tc.warn)
			}
		})
	}
}

// Endpoints, prefix and dial_timeout, each problem with its path.
func TestEtcdBlockErrors(t *testing.T) {
	for _, tc := range []struct {
		block string
		want  []string
	}{
		{`{endpoints: []}`, []string{"etcd.endpoints: required"}},
		{`{endpoints: ["http://etcd1"]}`, []string{`etcd.endpoints[0]: "http://etcd1" has no port`}},
		{`{endpoints: ["ftp://etcd1:2379"]}`, []string{`etcd.endpoints[0]: "ftp://etcd1:2379" is not host:port or an http(s)://host:port URL`}},
		{`{endpoints: ["http://etcd1:2379/v3"]}`, []string{`etcd.endpoints[0]: "http://etcd1:2379/v3" is not host:port or an http(s)://host:port URL`}},
		{`{endpoints: ["http://etcd1:99999"]}`, []string{`etcd.endpoints[0]: "etcd1:99999": port must be a number from 1 to 65535`}},
		{`{endpoints: [""]}`, []string{`etcd.endpoints[0]: required`}},
		{`{endpoints: ["127.0.0.1:2379"], prefix: /}`, []string{`etcd.prefix: must not be "/"`}},
		{`{endpoints: ["127.0.0.1:2379"], prefix: /a//b}`, []string{`etcd.prefix: "/a//b" is not a valid key prefix`}},
		{`{endpoints: ["127.0.0.1:2379"], prefix: /a/}`, []string{`etcd.prefix: "/a/" must not end with /`}},
		{`{endpoints: ["127.0.0.1:2379"], dial_timeout: 1ms}`, []string{`etcd.dial_timeout: must be at least 10ms`}},
		{`{endpoints: ["127.0.0.1:2379"], password_file: /nonexistent/etcd.password}`, []string{`etcd.username: required with etcd.password_file`}},
		{`{endpoints: ["127.0.0.1:2379"], username: u, password_file: /nonexistent/etcd.password}`, []string{`etcd.password_file: file not found: /nonexistent/etcd.password`}},
		{`{endpoints: ["https://127.0.0.1:2379"], tls: {cert_file: /nonexistent/c.pem}}`, []string{`etcd.tls.key_file: required with etcd.tls.cert_file`}},
	} {
		t.Run(tc.block, func(t *testing.T) {
			_, err := Parse([]byte(etcdConfig(tc.block, "1s")), "")
			if err == nil {
				t.Fatalf("Parse = nil error; want %q", tc.want)
			}
			checkErrors(t, fieldErrors(t, err), tc.want)
		})
	}
}

// With etcd, no warning speaks of ZooKeeper's session.
func TestEtcdNoZooKeeperWarnings(t *testing.T) {
	cfg, err := Parse([]byte(etcdConfig(`{endpoints: ["127.0.0.1:2379"]}`, "1s")), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Warnings() {
		if strings.Contains(w, "zookeeper") {
			t.Errorf("warning about ZooKeeper on the etcd backend: %s", w)
		}
	}
}

// A password over plain http to a host off loopback is warned about; over
// https, with a tls block, or on loopback it is not.
func TestEtcdPasswordInClearWarning(t *testing.T) {
	pass := filepath.Join(t.TempDir(), "etcd.password")
	if err := os.WriteFile(pass, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		endpoints string
		user      bool
		warn      bool
	}{
		{`["etcd1:2379", "etcd2:2379"]`, true, true},
		{`["http://127.0.0.1:2379", "http://etcd2:2379"]`, true, true},
		{`["http://127.0.0.1:2379", "[::1]:2379"]`, true, false},
		{`["https://etcd1:2379"]`, true, false},
		{`["http://etcd1:2379"]`, false, false},
	} {
		t.Run(tc.endpoints, func(t *testing.T) {
			block := `{endpoints: ` + tc.endpoints
			if tc.user {
				block += `, username: failoverd, password_file: ` + pass
			}
			cfg, err := Parse([]byte(etcdConfig(block+`}`, "1s")), "")
			if err != nil {
				t.Fatal(err)
			}
			w := cfg.Warnings()
			got := len(w) == 1 && strings.HasPrefix(w[0], "etcd.username: the endpoints are plain http")
			if got != tc.warn || (!tc.warn && len(w) != 0) {
				t.Errorf("Warnings() = %q, want the password warning: %v", w, tc.warn)
			}
		})
	}
}
