package ids

import (
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, s := range []string{"a", "node-a", "db1.eu_west-2", "...", "-x", "A9"} {
		if err := CheckName(s); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", s, err)
		}
	}
	for _, s := range []string{"", ".", "..", "a b", "a/b", "a\x00", "\x00", "a\n", "né", "a:b", "a=b", "$(id)", "a\tb", "\u200b"} {
		if err := CheckName(s); err == nil {
			t.Errorf("CheckName(%q) = nil, want an error", s)
		}
	}
}

func TestValidHost(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "::1", "fe80::1", "db1", "db1.example.com", "db1.example.com.", "a-b.c", strings.Repeat("a.", 126) + "a"} {
		if !ValidHost(h) {
			t.Errorf("ValidHost(%q) = false, want true", h)
		}
	}
	for _, h := range []string{"", "a b", "a\x00", "-a", "a-", "a..b", "a_b", "db1; touch /tmp/x", "[::1]", "a\n", strings.Repeat("a.", 127) + "a", "é.com"} {
		if ValidHost(h) {
			t.Errorf("ValidHost(%q) = true, want false", h)
		}
	}
}

func TestCheckHTTPURL(t *testing.T) {
	for _, s := range []string{"http://127.0.0.1:9101", "https://db-a.example.com", "http://[::1]:9101/", "http://h:1/$(id)", "https://h/base/path?x=1"} {
		if err := CheckHTTPURL(s); err != nil {
			t.Errorf("CheckHTTPURL(%q) = %v, want nil", s, err)
		}
	}
	for _, s := range []string{"", "ftp://h", "h:80", "http://", "http:///x", "http://h:0", "http://h:99999", "http://h:x", "http://h:",
		"http://a b", "http://h/\x00", "http://h/a b", "http://h/\u0085", "http://bad_host:1", "http://h\n", "http://h/\xff"} {
		if err := CheckHTTPURL(s); err == nil {
			t.Errorf("CheckHTTPURL(%q) = nil, want an error", s)
		}
	}
}

func TestCheckHostPort(t *testing.T) {
	for _, s := range []string{"db-a:6379", "10.0.0.1:5432", "[::1]:1", "h.example.com.:65535"} {
		if err := CheckHostPort(s); err != nil {
			t.Errorf("CheckHostPort(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "db-a", ":6379", "db-a:", "db-a:0", "db-a:65536", "db-a:http", "db a:1", "db-a:1\n", "db\x00:1", "::1:6379", "-x:1"} {
		if err := CheckHostPort(s); err == nil {
			t.Errorf("CheckHostPort(%q) = nil, want an error", s)
		}
	}
}
