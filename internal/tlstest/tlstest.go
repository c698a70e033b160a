// Package tlstest makes a throwaway certificate authority and a server
// certificate for loopback, for tests of failoverd's HTTPS admin API. Keys are
// generated per test: no key or certificate is ever stored in the repository.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA and one server certificate it signed, valid for 127.0.0.1,
// ::1 and localhost, with their PEM files in a test's temporary directory.
type PKI struct {
	// CAFile is the CA certificate (PEM), for a client's ca_file.
	CAFile string
	// CertFile and KeyFile are the server certificate and its private key
	// (PEM, mode 0600), for node.admin.tls.
	CertFile, KeyFile string
	// CAPool holds the CA certificate.
	CAPool *x509.CertPool
	// Cert is the server certificate with its key, for a tls.Config.
	Cert tls.Certificate

	dir    string
	caKey  *ecdsa.PrivateKey
	caCert *x509.Certificate
}

// New generates a PKI named name (the CA's common name) for t.
func New(t testing.TB, name string) *PKI {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()

	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name + " test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("tlstest: creating CA: %v", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("tlstest: parsing CA: %v", err)
	}

	srvKey := newKey(t)
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("tlstest: creating server certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatalf("tlstest: encoding key: %v", err)
	}

	p := &PKI{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "admin.crt"),
		KeyFile:  filepath.Join(dir, "admin.key"),
		CAPool:   x509.NewCertPool(),
		dir:      dir,
		caKey:    caKey,
		caCert:   caCert,
	}
	p.CAPool.AddCert(caCert)
	writePEM(t, p.CAFile, "CERTIFICATE", caDER, 0o644)
	writePEM(t, p.CertFile, "CERTIFICATE", srvDER, 0o644)
	writePEM(t, p.KeyFile, "PRIVATE KEY", keyDER, 0o600)
	p.Cert, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatalf("tlstest: loading the pair back: %v", err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("tlstest: generating key: %v", err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		t.Fatalf("tlstest: serial: %v", err)
	}
	return n
}

func writePEM(t testing.TB, name, typ string, der []byte, mode os.FileMode) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(name, data, mode); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	// WriteFile's mode is filtered by the umask; make it exact.
	if err := os.Chmod(name, mode); err != nil {
		t.Fatalf("tlstest: %v", err)
	}
}

// Client issues a client certificate for name, signed by the CA, and
// returns its PEM files: the certificate and its key (mode 0600).
func (p *PKI) Client(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatalf("tlstest: creating client certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("tlstest: encoding key: %v", err)
	}
	certFile = filepath.Join(p.dir, name+".crt")
	keyFile = filepath.Join(p.dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der, 0o644)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER, 0o600)
	return certFile, keyFile
}
