package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// zkTLSConfig is a valid config on ZooKeeper with zookeeper.tls tls (a YAML
// flow mapping).
func zkTLSConfig(tls string) string {
	return `cluster: orders
node: {id: node-a, host: 127.0.0.1}
zookeeper: {servers: ["zk1:2281"], tls: ` + tls + `}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing:
  methods:
    - shell: {command: [/bin/true]}
`
}

// zookeeper.tls loads into a client TLS configuration; its problems are
// named with their YAML paths: a key others may read, a certificate without
// its key, a CA file without a certificate.
func TestZooKeeperTLS(t *testing.T) {
	f := newTLSFixture(t)
	cfg, err := Parse([]byte(zkTLSConfig(fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s}", f.pki.CAFile, f.pki.CertFile, f.pki.KeyFile))),
		filepath.Join(f.dir, "failoverd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := cfg.ZooKeeper.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	if tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Fatalf("ClientTLS() = %+v; want the CA pool and one client certificate", tc)
	}

	// Without the block: plain TCP.
	plain := strings.Replace(zkTLSConfig("{}"), ", tls: {}", "", 1)
	cfg, err = Parse([]byte(plain), "")
	if err != nil {
		t.Fatal(err)
	}
	if tc, err := cfg.ZooKeeper.ClientTLS(); tc != nil || err != nil {
		t.Fatalf("ClientTLS() without zookeeper.tls = %+v, %v; want nil, nil", tc, err)
	}

	notCA := f.write(t, "not-a-ca.pem", "hello\n", 0o644)
	open := f.write(t, "open.key", "key\n", 0o644)
	_, err = Parse([]byte(zkTLSConfig(fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s}", notCA, f.pki.CertFile, open))), "")
	checkErrors(t, fieldErrors(t, err), []string{
		"zookeeper.tls.ca_file: " + notCA + " holds no PEM certificate",
		"zookeeper.tls.key_file: ",
	})
	_, err = Parse([]byte(zkTLSConfig(fmt.Sprintf("{cert_file: %s}", f.pki.CertFile))), "")
	checkErrors(t, fieldErrors(t, err), []string{"zookeeper.tls.key_file: required with zookeeper.tls.cert_file"})
}
