package loopback

import (
	"net/url"
	"testing"
)

func TestHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost":         true,
		"LOCALHOST":         true,
		"localhost.":        true,
		"127.0.0.1":         true,
		"127.3.2.1":         true,
		"::1":               true,
		"::ffff:127.0.0.1":  true,
		"":                  false,
		"10.0.0.11":         false,
		"192.0.2.1":         false,
		"::":                false,
		"0.0.0.0":           false,
		"db-a.example.com":  false,
		"localhost.evil.io": false,
		"evil-localhost":    false,
		"128.0.0.1":         false,
		"fe80::1":           false,
	} {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestPlainHTTPToRemote(t *testing.T) {
	for raw, want := range map[string]bool{
		"http://10.0.0.11:9101":     true,
		"HTTP://db-a.example.com":   true,
		"http://192.0.2.1:1":        true,
		"http://127.0.0.1:9101":     false,
		"http://[::1]:9101":         false,
		"http://localhost:9101":     false,
		"https://10.0.0.11:9101":    false,
		"https://db-a.example.com/": false,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := PlainHTTPToRemote(u); got != want {
			t.Errorf("PlainHTTPToRemote(%q) = %v, want %v", raw, got, want)
		}
	}
}
