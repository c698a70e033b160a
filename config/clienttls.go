package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/failoverd/failoverd/internal/secret"
)

// ClientTLS is a client's TLS settings towards a coordination service
// (zookeeper.tls, etcd.tls).
type ClientTLS struct {
	// CAFile is a PEM bundle of the CA certificates that verify the
	// servers. Default: the system roots.
	CAFile string `yaml:"ca_file,omitempty"`
	// CertFile is the PEM client certificate, for client authentication.
	CertFile string `yaml:"cert_file,omitempty"`
	// KeyFile is CertFile's PEM private key (a secret file).
	KeyFile string `yaml:"key_file,omitempty"`
}

// clientTLS checks the TLS block at YAML path p: the CA bundle holds
// certificates, the client certificate and key come together, and the key
// is a secret file.
func (v *validator) clientTLS(p string, t *ClientTLS) {
	if t.CAFile != "" && v.fileOK(p+".ca_file", t.CAFile) && !v.opts.SkipFileChecks {
		pem, err := os.ReadFile(t.CAFile)
		switch {
		case err != nil:
			v.add(p+".ca_file", "%s", fileErr(err))
		case !x509.NewCertPool().AppendCertsFromPEM(pem):
			v.add(p+".ca_file", "%s holds no PEM certificate", t.CAFile)
		}
	}
	switch {
	case t.CertFile == "" && t.KeyFile == "":
		return
	case t.CertFile == "":
		v.add(p+".cert_file", "required with %s.key_file: the PEM client certificate", p)
		return
	case t.KeyFile == "":
		v.add(p+".key_file", "required with %s.cert_file: the PEM private key of the client certificate", p)
		return
	}
	filesOK := v.fileOK(p+".cert_file", t.CertFile)
	n := len(v.errs)
	v.secretFile(p+".key_file", t.KeyFile)
	filesOK = filesOK && len(v.errs) == n
	if filesOK && !v.opts.SkipFileChecks {
		if _, err := t.loadKeyPair(); err != nil {
			v.add(p, "%v", err)
		}
	}
}

func (t *ClientTLS) loadKeyPair() (tls.Certificate, error) {
	certPEM, err := os.ReadFile(t.CertFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("reading client certificate: %w", err)
	}
	keyPEM, err := secret.ReadFile(t.KeyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("reading client key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("client certificate %s and key %s: %w", t.CertFile, t.KeyFile, err)
	}
	return cert, nil
}

// config builds the TLS client configuration of the block at YAML path p
// (for error messages): the CA bundle (default: the system roots) and the
// client certificate, when set. The key file is refused if group or others
// may access it. A nil t gives TLS with the system roots.
func (t *ClientTLS) config(p string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t == nil {
		return tc, nil
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", p, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca_file: %s holds no PEM certificate", p, t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := t.loadKeyPair()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ClientTLS returns the ZooKeeper client's TLS setup: nil without a
// zookeeper.tls block (plain TCP), else its configuration.
func (z *ZooKeeper) ClientTLS() (*tls.Config, error) {
	if z.TLS == nil {
		return nil, nil
	}
	return z.TLS.config("zookeeper.tls")
}
