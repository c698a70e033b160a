package admin_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/tlstest"
)

// startTLSServer runs the real admin API over HTTPS with pki's certificate
// on a free loopback port and returns its address.
func startTLSServer(t *testing.T, pki *tlstest.PKI, n admin.Node) string {
	t.Helper()
	s, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: testToken, TLS: admin.TLSConfig(pki.Cert)}, admin.Deps{Node: n})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	runServer(t, s)
	return s.Addr().String()
}

// TestHTTPSAdminFencedByRPC runs the admin API over HTTPS with a CA made for
// the test and fences it with the real rpc fencer: with the CA in ca_file it
// succeeds, without it (system roots) or with another CA the handshake fails
// before the token is sent.
func TestHTTPSAdminFencedByRPC(t *testing.T) {
	pki := tlstest.New(t, "admin")
	n := &fakeNode{status: leaderStatus(), demote: controller.DemoteOutcome{Demoted: true, Epoch: 42}}
	addr := startTLSServer(t, pki, n)
	_, port, _ := net.SplitHostPort(addr)

	fence := func(cfg fencer.RPCConfig, adminURL string) error {
		t.Helper()
		cfg.Token, cfg.From = testToken, "node-b"
		rpc, err := fencer.NewRPC(cfg, fencer.Deps{})
		if err != nil {
			t.Fatalf("NewRPC: %v", err)
		}
		return rpc.Fence(t.Context(), fencer.Target{NodeID: "node-a", AdminURL: adminURL, Epoch: 42})
	}

	for _, u := range []string{"https://" + addr, "https://localhost:" + port} {
		if err := fence(fencer.RPCConfig{CAFile: pki.CAFile}, u); err != nil {
			t.Errorf("Fence(%s) with the CA = %v, want nil", u, err)
		}
	}
	if d, _ := n.calls(); len(d) != 2 {
		t.Fatalf("Demote called %d times, want 2", len(d))
	}

	var unknown x509.UnknownAuthorityError
	if err := fence(fencer.RPCConfig{}, "https://"+addr); !errors.As(err, &unknown) {
		t.Errorf("Fence without the CA = %v, want an unknown-authority error", err)
	}
	other := tlstest.New(t, "other")
	if err := fence(fencer.RPCConfig{CAFile: other.CAFile}, "https://"+addr); !errors.As(err, &unknown) {
		t.Errorf("Fence with another CA = %v, want an unknown-authority error", err)
	}
	// Plain http to the TLS port reaches no handler.
	if err := fence(fencer.RPCConfig{}, "http://"+addr); err == nil {
		t.Errorf("Fence over plain http to the https port = nil, want an error")
	}
	if d, _ := n.calls(); len(d) != 2 {
		t.Errorf("Demote called %d times in all, want 2: an unverified client reached the handler", len(d))
	}
}

func TestHTTPSAdminServesReadEndpoints(t *testing.T) {
	pki := tlstest.New(t, "admin")
	addr := startTLSServer(t, pki, &fakeNode{status: leaderStatus()})
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.CAPool}}}
	resp, err := c.Get("https://" + addr + admin.LeaderPath)
	if err != nil {
		t.Fatalf("GET /leader over https: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Errorf("GET /leader over https = %d (tls %v), want 200 over TLS", resp.StatusCode, resp.TLS != nil)
	}
}

func TestHTTPSAdminRefusesOldTLS(t *testing.T) {
	pki := tlstest.New(t, "admin")
	addr := startTLSServer(t, pki, &fakeNode{status: leaderStatus()})
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.CAPool, MinVersion: v, MaxVersion: v})
		if err == nil {
			conn.Close()
			t.Errorf("handshake with %s succeeded, want it refused", tls.VersionName(v))
		}
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.CAPool, MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS 1.2 handshake: %v", err)
	}
	conn.Close()
}
