package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Security makes a cluster secure as operators run it: TLS on the client
// ports with client certificates required (--client-cert-auth,
// --trusted-ca-file), signed by a CA the test generates, and etcd's auth
// enabled with a root user and a user for failoverd whose role may read
// and write only under Prefix. Peer traffic stays plain (the fault
// proxies read it). Make one with NewSecurity and pass it in
// Options.Security; every file lives in the test's temporary directory.
type Security struct {
	// Prefix is the key range the failoverd user's role may read and write
	// (every key that starts with it).
	Prefix string
	// CAFile is the CA that signed the servers' and the clients'
	// certificates (PEM): a client's etcd.tls.ca_file.
	CAFile string
	// OtherCAFile is a CA that signed nothing etcd serves: a wrong
	// etcd.tls.ca_file.
	OtherCAFile string
	// CertFile and KeyFile are a client certificate for failoverd (its
	// common name names no etcd user, so it grants nothing by itself: the
	// user and password do).
	CertFile, KeyFile string
	// User is failoverd's etcd user; Password its password, also in
	// PasswordFile (mode 0600).
	User, Password, PasswordFile string

	serverCert, serverKey string
	// rootCert authenticates the cluster's own clients (Client) as etcd's
	// root user: with client certificates required and auth on, etcd takes
	// a certificate's common name as the user when no token is sent.
	rootCert tls.Certificate
	caPool   *x509.CertPool
}

// NewSecurity generates a CA, a server certificate for 127.0.0.1, client
// certificates and a password for a failoverd user limited to prefix.
func NewSecurity(t testing.TB, prefix string) *Security {
	t.Helper()
	dir := t.TempDir()
	s := &Security{Prefix: prefix, User: "failoverd", Password: "etcd-test-" + randHex(t)}
	ca, caKey := newCA(t, "etcdtest CA")
	s.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	other, _ := newCA(t, "etcdtest other CA")
	s.OtherCAFile = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	s.caPool = x509.NewCertPool()
	s.caPool.AddCert(ca)

	srv := leaf(t, ca, caKey, "etcd server", true)
	s.serverCert, s.serverKey = srv.write(t, dir, "server")
	cl := leaf(t, ca, caKey, "failoverd-client", false)
	s.CertFile, s.KeyFile = cl.write(t, dir, "client")
	root := leaf(t, ca, caKey, "root", false)
	c, k := root.write(t, dir, "root")
	var err error
	if s.rootCert, err = tls.LoadX509KeyPair(c, k); err != nil {
		t.Fatalf("etcdtest: loading the root client certificate: %v", err)
	}
	s.PasswordFile = filepath.Join(dir, "etcd.password")
	if err := os.WriteFile(s.PasswordFile, []byte(s.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// ClientTLS is a TLS setup with the CA and failoverd's client certificate.
func (s *Security) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: s.caPool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// scheme is the client URLs' scheme of a cluster with security sec.
func scheme(sec *Security) string {
	if sec == nil {
		return "http"
	}
	return "https"
}

// serverArgs are the etcd flags of client TLS with client certificates.
func (s *Security) serverArgs() []string {
	if s == nil {
		return nil
	}
	return []string{"--cert-file", s.serverCert, "--key-file", s.serverKey,
		"--client-cert-auth", "--trusted-ca-file", s.CAFile}
}

// rootTLS is the TLS setup of the cluster's own clients (etcd's root).
func (s *Security) rootTLS() *tls.Config {
	if s == nil {
		return nil
	}
	return &tls.Config{RootCAs: s.caPool, Certificates: []tls.Certificate{s.rootCert}, MinVersion: tls.VersionTLS12}
}

// enableAuth creates the root user and role, the failoverd role (read
// and write under Prefix) and user, and turns auth on, through member 0.
func (c *Cluster) enableAuth() {
	c.t.Helper()
	s := c.opts.Security
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := c.Client(0).Auth
	steps := []struct {
		what string
		do   func() error
	}{
		{"adding the root role", func() error { _, err := a.RoleAdd(ctx, "root"); return err }},
		{"adding the root user", func() error { _, err := a.UserAdd(ctx, "root", "root-"+s.Password); return err }},
		{"granting root", func() error { _, err := a.UserGrantRole(ctx, "root", "root"); return err }},
		{"adding the failoverd role", func() error { _, err := a.RoleAdd(ctx, "failoverd"); return err }},
		{"granting the prefix", func() error {
			_, err := a.RoleGrantPermission(ctx, "failoverd", s.Prefix, clientv3.GetPrefixRangeEnd(s.Prefix),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"adding the failoverd user", func() error { _, err := a.UserAdd(ctx, s.User, s.Password); return err }},
		{"granting the failoverd role", func() error { _, err := a.UserGrantRole(ctx, s.User, "failoverd"); return err }},
		{"enabling auth", func() error { _, err := a.AuthEnable(ctx); return err }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			c.t.Fatalf("etcdtest: %s: %v", st.what, err)
		}
	}
}

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func (p keyPair) write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(p.key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", p.cert.Raw), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", der)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func randHex(t testing.TB) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("etcdtest: creating a CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// leaf signs a certificate named cn; a server's is valid for 127.0.0.1
// and localhost (etcd also dials itself with it, so it serves both ends).
func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, server bool) keyPair {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("etcdtest: signing %s: %v", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{cert, key}
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
