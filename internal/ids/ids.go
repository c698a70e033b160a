// Package ids holds the rules for the names and addresses failoverd passes
// between nodes and on to programs: cluster names and node ids, host names
// and admin API URLs.
//
// The same rules apply where a value comes from the config file and where it
// comes back from ZooKeeper (the breadcrumb), so that whatever one node may
// write every other node accepts, and whatever a node accepts is safe to put
// in a znode name, an environment variable (FAILOVERD_PREVIOUS_LEADER) or a
// program's argv: no NUL, no control characters, no white space.
package ids

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"unicode"
)

// MaxHostLen is the longest host name accepted (RFC 1035's 253 characters).
const MaxHostLen = 253

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// CheckName checks a cluster name or node id: letters, digits, '.', '_' and
// '-', and neither "." nor "..". The error says what is wrong, without
// repeating the value.
func CheckName(s string) error {
	switch {
	case s == "":
		return errors.New("required")
	case !nameRE.MatchString(s):
		return errors.New("use letters, digits, '.', '_' and '-'")
	case s == "." || s == "..":
		return errors.New(`"." and ".." are not names`)
	}
	return nil
}

var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$`)

// ValidHost reports whether h is an IP address or a DNS host name.
func ValidHost(h string) bool {
	return net.ParseIP(h) != nil || (len(h) <= MaxHostLen && hostnameRE.MatchString(h))
}

// CheckHTTPURL checks an admin API base URL: http or https, with a valid
// host (and port, if any), and no control characters or white space
// anywhere.
func CheckHTTPURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	if HasControlOrSpace(s) {
		return errors.New("contains white space or control characters")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("not an http or https URL")
	}
	if !ValidHost(u.Hostname()) {
		return fmt.Errorf("%q is not a host name or IP address", u.Hostname())
	}
	if p := u.Port(); p != "" && !validPort(p) {
		return errors.New("port must be a number from 1 to 65535")
	}
	if strings.HasSuffix(u.Host, ":") {
		return errors.New("empty port")
	}
	return nil
}

// CheckHostPort checks a service address: host:port with a valid host
// name or IP address (IPv6 in brackets) and a port from 1 to 65535, and no
// control characters or white space anywhere.
func CheckHostPort(s string) error {
	if s == "" {
		return errors.New("required")
	}
	if HasControlOrSpace(s) {
		return errors.New("contains white space or control characters")
	}
	host, port, err := net.SplitHostPort(s)
	switch {
	case err != nil:
		return errors.New("not host:port")
	case host == "":
		return errors.New("no host")
	case !ValidHost(host):
		return fmt.Errorf("%q is not a host name or IP address", host)
	case !validPort(port):
		return errors.New("port must be a number from 1 to 65535")
	}
	return nil
}

func validPort(p string) bool {
	if len(p) > 5 {
		return false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n >= 1 && n <= 65535
}

// HasControlOrSpace reports whether s holds a control character (NUL
// included), white space, or is not valid UTF-8.
func HasControlOrSpace(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool {
		return r == unicode.ReplacementChar || unicode.IsControl(r) || unicode.IsSpace(r)
	})
}
