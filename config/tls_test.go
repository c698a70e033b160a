package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/failoverd/failoverd/internal/tlstest"
)

// tlsFixture holds a CA, a certificate and key made for the test, and a
// token, in a temporary directory that the configs below refer to.
type tlsFixture struct {
	dir   string
	pki   *tlstest.PKI
	token string
}

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	f := &tlsFixture{dir: t.TempDir(), pki: tlstest.New(t, "config")}
	f.token = f.write(t, "token", "s3cret\n", 0o600)
	return f
}

func (f *tlsFixture) write(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// config returns a valid config whose node.admin block is admin and whose
// only fencing method is the rpc block rpc, both YAML flow mappings.
func (f *tlsFixture) config(admin, rpc string) string {
	return `cluster: orders
node: {id: node-a, host: 10.0.0.11, admin: ` + admin + `}
zookeeper: {servers: ["127.0.0.1:2181"]}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing:
  methods:
    - rpc: ` + rpc + `
`
}

func TestAdminTLSConfig(t *testing.T) {
	f := newTLSFixture(t)
	admin := `{listen: "0.0.0.0:9101", token_file: ` + f.token + `, tls: {cert_file: ` + f.pki.CertFile + `, key_file: ` + f.pki.KeyFile + `}}`
	cfg, err := Parse([]byte(f.config(admin, `{ca_file: `+f.pki.CAFile+`}`)), filepath.Join(f.dir, "failoverd.yaml"))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if got, want := cfg.AdminURL(), "https://10.0.0.11:9101"; got != want {
		t.Errorf("AdminURL() = %q, want %q (https by default with tls)", got, want)
	}
	rpc := cfg.Fencing.Methods[0].RPC
	if rpc.CAFile != f.pki.CAFile || rpc.AllowInsecureHTTP {
		t.Errorf("rpc = %+v, want ca_file %s and allow_insecure_http false", rpc, f.pki.CAFile)
	}
	cert, err := cfg.Node.Admin.TLS.LoadCertificate()
	if err != nil || len(cert.Certificate) == 0 {
		t.Errorf("LoadCertificate = %v, %v", cert, err)
	}

	// Relative names are relative to the config file.
	pkiDir := filepath.Dir(f.pki.CAFile)
	if err := os.WriteFile(filepath.Join(pkiDir, "token"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin = `{token_file: token, tls: {cert_file: admin.crt, key_file: admin.key}}`
	cfg, err = Parse([]byte(f.config(admin, `{ca_file: ca.pem}`)), filepath.Join(pkiDir, "failoverd.yaml"))
	if err != nil {
		t.Fatalf("Parse with relative names = %v", err)
	}
	if got := cfg.Node.Admin.TLS; got.CertFile != f.pki.CertFile || got.KeyFile != f.pki.KeyFile {
		t.Errorf("node.admin.tls = %+v, want %s and %s", got, f.pki.CertFile, f.pki.KeyFile)
	}
	if got := cfg.Fencing.Methods[0].RPC.CAFile; got != f.pki.CAFile {
		t.Errorf("ca_file = %s, want %s", got, f.pki.CAFile)
	}
}

func TestAdminTLSLoadCertificateRefusesOpenKey(t *testing.T) {
	f := newTLSFixture(t)
	if err := os.Chmod(f.pki.KeyFile, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err := (&AdminTLS{CertFile: f.pki.CertFile, KeyFile: f.pki.KeyFile}).LoadCertificate()
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+f.pki.KeyFile) {
		t.Fatalf("LoadCertificate with a group-readable key = %v, want a permission error", err)
	}
}

func TestAdminTLSValidation(t *testing.T) {
	f := newTLSFixture(t)
	other := tlstest.New(t, "other")
	garbage := f.write(t, "garbage.pem", "not PEM at all\n", 0o600)
	openKey := f.write(t, "open.key", string(mustRead(t, f.pki.KeyFile)), 0o644)
	missing := filepath.Join(f.dir, "missing.pem")
	tlsBlock := func(cert, key string) string {
		return `{listen: "0.0.0.0:9101", token_file: ` + f.token + `, tls: {cert_file: ` + cert + `, key_file: ` + key + `}}`
	}
	plainAdmin := `{listen: "0.0.0.0:9101", token_file: ` + f.token + `}`
	goodTLS := tlsBlock(f.pki.CertFile, f.pki.KeyFile)

	for _, tc := range []struct {
		name, admin, rpc string
		want             []string // one substring per problem, in order; none: valid
	}{
		{"tls", goodTLS, `{}`, nil},
		{"tls with ca_file", goodTLS, `{ca_file: ` + f.pki.CAFile + `}`, nil},
		{"cert without key", `{token_file: ` + f.token + `, tls: {cert_file: ` + f.pki.CertFile + `}}`, `{}`,
			[]string{"node.admin.tls.key_file: required when node.admin.tls is set"}},
		{"key without cert", `{token_file: ` + f.token + `, tls: {key_file: ` + f.pki.KeyFile + `}}`, `{}`,
			[]string{"node.admin.tls.cert_file: required when node.admin.tls is set"}},
		{"empty tls block", `{token_file: ` + f.token + `, tls: {}}`, `{}`,
			[]string{"node.admin.tls.cert_file: required", "node.admin.tls.key_file: required"}},
		{"missing files", tlsBlock(missing, missing+".key"), `{}`,
			[]string{"node.admin.tls.cert_file: file not found: " + missing, "node.admin.tls.key_file: "}},
		{"key readable by others", tlsBlock(f.pki.CertFile, openKey), `{}`,
			[]string{"node.admin.tls.key_file: ", "chmod 600 " + openKey}},
		{"cert not PEM", tlsBlock(garbage, f.pki.KeyFile), `{}`,
			[]string{"node.admin.tls: admin certificate " + garbage}},
		{"key of another certificate", tlsBlock(f.pki.CertFile, other.KeyFile), `{}`,
			[]string{"node.admin.tls: admin certificate", "private key does not match public key"}},
		{"http advertise_url with tls",
			`{token_file: ` + f.token + `, advertise_url: "http://10.0.0.11:9101", tls: {cert_file: ` + f.pki.CertFile + `, key_file: ` + f.pki.KeyFile + `}}`, `{}`,
			[]string{`node.admin.advertise_url: peers would reach this admin API at http://10.0.0.11:9101, plain http, but node.admin.tls makes it serve https only`}},
		{"https advertise_url with tls",
			`{token_file: ` + f.token + `, advertise_url: "https://db-a.example.com:9101", tls: {cert_file: ` + f.pki.CertFile + `, key_file: ` + f.pki.KeyFile + `}}`, `{}`, nil},
		{"plain http admin url with rpc fencing", plainAdmin, `{}`,
			[]string{"node.admin.listen: peers reach this admin API at http://10.0.0.11:9101, plain http to a host that is not loopback"}},
		{"plain http advertise_url with rpc fencing", `{token_file: ` + f.token + `, advertise_url: "http://db-a.example.com:9101"}`, `{}`,
			[]string{"node.admin.advertise_url: peers reach this admin API at http://db-a.example.com:9101"}},
		{"plain http admin url, insecure allowed", plainAdmin, `{allow_insecure_http: true}`, nil},
		{"plain http on loopback", `{listen: "127.0.0.1:9101", token_file: ` + f.token + `}`, `{}`, nil},
		{"rpc url plain http", goodTLS, `{url: "http://10.0.0.12:9101"}`,
			[]string{`fencing.methods[0].rpc.url: "http://10.0.0.12:9101" is plain http to a host that is not loopback`}},
		{"rpc url plain http, insecure allowed", goodTLS, `{url: "http://10.0.0.12:9101", allow_insecure_http: true}`, nil},
		{"rpc url plain http on loopback", goodTLS, `{url: "http://localhost:9101"}`, nil},
		{"ca_file not PEM", goodTLS, `{ca_file: ` + garbage + `}`,
			[]string{"fencing.methods[0].rpc.ca_file: " + garbage + " holds no PEM certificate"}},
		{"ca_file missing", goodTLS, `{ca_file: ` + missing + `}`,
			[]string{"fencing.methods[0].rpc.ca_file: file not found: " + missing}},
		{"every problem at once", `{token_file: ` + f.token + `, advertise_url: "http://10.0.0.11:9101", tls: {cert_file: ` + garbage + `}}`,
			`{url: "http://10.0.0.12:9101", ca_file: ` + garbage + `}`,
			[]string{"node.admin.tls.key_file: required", "node.admin.advertise_url: peers would reach", "fencing.methods[0].rpc.ca_file:", "fencing.methods[0].rpc.url:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(f.config(tc.admin, tc.rpc)), filepath.Join(f.dir, "failoverd.yaml"))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Parse = %v, want nil", err)
				}
				return
			}
			var verrs ValidationErrors
			if !errors.As(err, &verrs) {
				t.Fatalf("Parse = %v, want ValidationErrors", err)
			}
			msg := verrs.Error()
			rest := msg
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("problems do not contain %q (in order):\n%s", w, msg)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestAdminTLSSkipFileChecks(t *testing.T) {
	f := newTLSFixture(t)
	admin := `{token_file: /nonexistent/token, tls: {cert_file: /nonexistent/admin.crt, key_file: /nonexistent/admin.key}}`
	_, err := (LoadOptions{SkipFileChecks: true}).Parse([]byte(f.config(admin, `{ca_file: /nonexistent/ca.pem}`)), "")
	if err != nil {
		t.Fatalf("Parse with SkipFileChecks = %v, want nil", err)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
