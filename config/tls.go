package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"

	"github.com/failoverd/failoverd/internal/loopback"
	"github.com/failoverd/failoverd/internal/secret"
)

// LoadCertificate reads the admin API's certificate and key, refusing a key
// file that group or others may access.
func (t *AdminTLS) LoadCertificate() (tls.Certificate, error) {
	certPEM, err := os.ReadFile(t.CertFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("reading admin certificate: %w", err)
	}
	keyPEM, err := secret.ReadFile(t.KeyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("reading admin key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("admin certificate %s and key %s: %w", t.CertFile, t.KeyFile, err)
	}
	return cert, nil
}

// adminTLS checks node.admin.tls, and that peers can reach this admin API
// without sending their token over plain http to a host that is not
// loopback, which their rpc fencing refuses to do.
func (v *validator) adminTLS(c *Config) {
	a := &c.Node.Admin
	if t := a.TLS; t != nil {
		const p = "node.admin.tls"
		filesOK := true
		if t.CertFile == "" {
			v.add(p+".cert_file", "required when node.admin.tls is set: the PEM certificate (chain) of the admin API")
			filesOK = false
		} else {
			filesOK = v.fileOK(p+".cert_file", t.CertFile) && filesOK
		}
		if t.KeyFile == "" {
			v.add(p+".key_file", "required when node.admin.tls is set: the PEM private key of cert_file")
			filesOK = false
		} else if !v.opts.SkipFileChecks {
			if err := secret.Check(t.KeyFile); err != nil {
				v.add(p+".key_file", "%s", fileErr(err))
				filesOK = false
			}
		}
		if filesOK && !v.opts.SkipFileChecks {
			if _, err := t.LoadCertificate(); err != nil {
				v.add(p, "%v", err)
			}
		}
	}

	adminURL := c.AdminURL()
	u, err := url.Parse(adminURL)
	if adminURL == "" || err != nil || !loopback.PlainHTTPToRemote(u) {
		return // https, loopback, or invalid (reported elsewhere)
	}
	p := "node.admin.listen"
	if a.AdvertiseURL != "" {
		p = "node.admin.advertise_url"
	}
	switch {
	case a.TLS != nil:
		v.add(p, "peers would reach this admin API at %s, plain http, but node.admin.tls makes it serve https only; advertise an https URL", adminURL)
	case a.TokenFile != "" && c.rpcRefusesPlainHTTP():
		v.add(p, "peers reach this admin API at %s, plain http to a host that is not loopback, where rpc fencing does not send "+
			"its token: set node.admin.tls (and ca_file on the rpc methods), or allow_insecure_http: true on the rpc "+
			"methods (dangerous: the token crosses the network in clear)", adminURL)
	}
}

// rpcRefusesPlainHTTP reports whether the config has rpc fencing methods and
// none allows plain http. Nodes of a cluster are configured alike, so then
// the peers' rpc fencing will not call a plain http admin URL either.
func (c *Config) rpcRefusesPlainHTTP() bool {
	rpc := false
	for _, m := range c.Fencing.Methods {
		if m.RPC != nil {
			if m.RPC.AllowInsecureHTTP {
				return false
			}
			rpc = true
		}
	}
	return rpc
}

// rpcTransport checks an rpc method's ca_file, and that its fixed url is
// not plain http to a host that is not loopback unless allow_insecure_http.
func (v *validator) rpcTransport(p string, r *RPCFencing) {
	if r.CAFile != "" && v.fileOK(p+".ca_file", r.CAFile) && !v.opts.SkipFileChecks {
		pem, err := os.ReadFile(r.CAFile)
		switch {
		case err != nil:
			v.add(p+".ca_file", "%s", fileErr(err))
		case !x509.NewCertPool().AppendCertsFromPEM(pem):
			v.add(p+".ca_file", "%s holds no PEM certificate", r.CAFile)
		}
	}
	if r.URL == "" || r.AllowInsecureHTTP {
		return
	}
	if u, err := url.Parse(r.URL); err == nil && u.Host != "" && loopback.PlainHTTPToRemote(u) {
		v.add(p+".url", "%q is plain http to a host that is not loopback: the token would cross the network in clear; "+
			"use https (with ca_file), or set allow_insecure_http: true (dangerous)", r.URL)
	}
}

// fileOK is file, reporting whether it found no problem.
func (v *validator) fileOK(p, name string) bool {
	n := len(v.errs)
	v.file(p, name)
	return len(v.errs) == n
}
