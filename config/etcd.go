package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/failoverd/failoverd/internal/loopback"
)

// MinEtcdLeaseTTL is the shortest etcd.lease_ttl accepted. etcd grants no
// lease shorter than its minimum TTL, 1.5 election timeouts rounded up to
// whole seconds: 2s with etcd's default election timeout of 1s. A shorter
// TTL asked for would be silently raised by etcd.
const MinEtcdLeaseTTL = 2 * time.Second

// AdvisedEtcdLeaseTTL is the lease TTL below which validation warns:
// etcd's maintainers advise 5s as a lower bound (the default), and an etcd
// tuned for a slow network, with a longer election timeout, raises shorter
// TTLs anyway.
const AdvisedEtcdLeaseTTL = DefaultEtcdLeaseTTL

// etcd checks the etcd block, which coordination.backend etcd requires.
func (v *validator) etcd(c *Config) {
	e := c.Etcd
	const p = "etcd"
	v.etcdEndpoints(e)
	v.etcdPrefix(p+".prefix", e.Prefix)

	// lease_ttl: etcd's floor, whole seconds, and the demote budget (the
	// etcd backend's timing check).
	ttl := time.Duration(e.LeaseTTL)
	demote := time.Duration(c.Service.Demote.Timeout)
	switch {
	case ttl <= 0:
		v.add(p+".lease_ttl", "must be > 0, got %s", fmtDur(ttl))
	case ttl < MinEtcdLeaseTTL:
		v.add(p+".lease_ttl", "%s is shorter than etcd grants: etcd raises every lease TTL to at least 1.5 election timeouts, "+
			"rounded up to whole seconds (%s with its default 1s election timeout); use at least %s (advised: %s)",
			fmtDur(ttl), fmtDur(MinEtcdLeaseTTL), fmtDur(MinEtcdLeaseTTL), fmtDur(AdvisedEtcdLeaseTTL))
	case ttl > MaxDuration:
		v.add(p+".lease_ttl", "must be at most %s, got %s", fmtDur(MaxDuration), fmtDur(ttl))
	case ttl%time.Second != 0:
		v.add(p+".lease_ttl", "%s is not a whole number of seconds: etcd grants lease TTLs in seconds", fmtDur(ttl))
	case demote > 0 && demote <= MaxDuration:
		v.checkTiming(BackendEtcd, c.Timing())
	}

	switch d := time.Duration(e.DialTimeout); {
	case d < 0:
		v.add(p+".dial_timeout", "must be > 0 (or unset for the default 5s), got %s", fmtDur(d))
	case d > 0:
		v.timeout(p+".dial_timeout", e.DialTimeout)
	}

	if t := e.TLS; t != nil {
		v.clientTLS(p+".tls", t)
	}

	switch {
	case e.Username != "" && e.PasswordFile == "":
		v.add(p+".password_file", "required with etcd.username: a file holding the password")
	case e.Username == "" && e.PasswordFile != "":
		v.add(p+".username", "required with etcd.password_file")
	case e.PasswordFile != "":
		v.secretFile(p+".password_file", e.PasswordFile)
	}
}

// etcdEndpoints checks etcd.endpoints: host:port or http(s)://host:port,
// no duplicates, one scheme for all, and https when etcd.tls is set.
func (v *validator) etcdEndpoints(e *Etcd) {
	const p = "etcd.endpoints"
	if len(e.Endpoints) == 0 {
		v.add(p, "required: list the cluster's client URLs, such as https://etcd1:2379")
		return
	}
	seen := map[string]int{}
	schemes := map[string]bool{}
	for i, s := range e.Endpoints {
		q := fmt.Sprintf("%s[%d]", p, i)
		scheme, ok := v.etcdEndpoint(q, s)
		if !ok {
			continue
		}
		if j, dup := seen[s]; dup {
			v.add(q, "%q repeats %s[%d]", s, p, j)
		}
		seen[s] = i
		schemes[scheme] = true
		if scheme == "http" && e.TLS != nil {
			v.add(q, "%q is plain http, but etcd.tls is set: use https://", s)
		}
	}
	if schemes["http"] && schemes["https"] {
		v.add(p, "mixes http and https endpoints; use one scheme for all")
	}
}

// etcdEndpoint checks one endpoint and returns its scheme ("" for a bare
// host:port).
func (v *validator) etcdEndpoint(p, s string) (string, bool) {
	if !strings.Contains(s, "://") {
		return "", v.hostPort(p, s, false)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		v.add(p, "%q is not host:port or an http(s)://host:port URL", s)
		return "", false
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		v.add(p, "%q has no port (etcd's client port is usually 2379)", s)
		return "", false
	}
	n := len(v.errs)
	v.hostPort(p, u.Host, false)
	return u.Scheme, len(v.errs) == n
}

// etcdPrefix checks etcd.prefix: an absolute key prefix, "/" separated,
// without empty segments or a trailing "/".
func (v *validator) etcdPrefix(p, s string) {
	switch {
	case s == "":
		v.add(p, "required")
	case s == "/":
		v.add(p, "must not be \"/\"; use a dedicated prefix such as %s", DefaultEtcdPrefix)
	case !strings.HasPrefix(s, "/"):
		v.add(p, "%q must be absolute (start with /)", s)
	case strings.HasSuffix(s, "/"):
		v.add(p, "%q must not end with /", s)
	default:
		for seg := range strings.SplitSeq(s[1:], "/") {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				v.add(p, "%q is not a valid key prefix (empty, . or .. segments, or control characters)", s)
				return
			}
		}
	}
}

// ClientTLS returns the etcd client's TLS setup: nil for plain endpoints
// without a tls block; else the CA bundle (default: the system roots) and
// the client certificate, when set. The key file is refused if group or
// others may access it.
func (e *Etcd) ClientTLS() (*tls.Config, error) {
	https := false
	for _, s := range e.Endpoints {
		https = https || strings.HasPrefix(s, "https://")
	}
	if e.TLS == nil && !https {
		return nil, nil
	}
	return e.TLS.config("etcd.tls")
}

// ReadPassword reads Username's password from PasswordFile (surrounding
// white space dropped). It returns "" and no error without a password file.
func (e *Etcd) ReadPassword() (Secret, error) {
	if e.PasswordFile == "" {
		return "", nil
	}
	s, err := ReadSecretFile(e.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("etcd.password_file: %w", err)
	}
	return s, nil
}

// etcdLeaseWarning: a lease TTL that validates but is below the advice.
func (c *Config) etcdLeaseWarning() string {
	if c.Coordination.Backend != BackendEtcd || c.Etcd == nil {
		return ""
	}
	ttl := time.Duration(c.Etcd.LeaseTTL)
	if ttl <= 0 || ttl >= AdvisedEtcdLeaseTTL {
		return ""
	}
	return fmt.Sprintf("etcd.lease_ttl: %s is below the %s etcd's maintainers advise as a lower bound: an etcd whose election timeout "+
		"was raised (for a slow network) grants a longer TTL than asked, and a short one lets a busy etcd or a slow disk end a leadership; "+
		"use %s or more unless you measured your etcd", fmtDur(ttl), fmtDur(AdvisedEtcdLeaseTTL), fmtDur(AdvisedEtcdLeaseTTL))
}

// etcdPasswordWarning: with etcd.username over plain http, the password
// (and the token etcd hands back) crosses the network in clear, unless
// every endpoint is on loopback.
func (c *Config) etcdPasswordWarning() string {
	e := c.Etcd
	if c.Coordination.Backend != BackendEtcd || e == nil || e.Username == "" || e.TLS != nil {
		return ""
	}
	for _, s := range e.Endpoints {
		if strings.HasPrefix(s, "https://") {
			return ""
		}
	}
	for _, s := range e.Endpoints {
		host, _, err := net.SplitHostPort(strings.TrimPrefix(s, "http://"))
		if err == nil && !loopback.Host(host) {
			return fmt.Sprintf("etcd.username: the endpoints are plain http (%s), so the password and the token etcd returns for it "+
				"cross the network in clear, and anyone who reads them can take over the cluster's keys; use https:// endpoints (etcd.tls)", s)
		}
	}
	return ""
}
