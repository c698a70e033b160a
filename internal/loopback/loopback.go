// Package loopback tells whether a URL stays on this machine, which decides
// whether failoverd may send a bearer token to it over plain HTTP.
package loopback

import (
	"net"
	"net/url"
	"strings"
)

// Host reports whether host, as url.URL.Hostname returns it, names this
// machine: "localhost" (RFC 6761 reserves it for loopback) or an address in
// 127.0.0.0/8 or ::1. Anything else, including other names that happen to
// resolve to loopback, is not: the decision must not depend on a resolver.
func Host(host string) bool {
	h := strings.TrimSuffix(host, ".")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PlainHTTPToRemote reports whether u is an http:// URL whose host is not
// loopback: whatever is sent there crosses a network in clear text.
func PlainHTTPToRemote(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, "http") && !Host(u.Hostname())
}
