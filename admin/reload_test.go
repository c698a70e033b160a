package admin_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/internal/secret"
	"github.com/failoverd/failoverd/internal/tlstest"
)

type fakeReloader struct{ ans adminapi.ReloadAnswer }

func (f *fakeReloader) Reload(context.Context) adminapi.ReloadAnswer { return f.ans }

// POST /v1/reload is a mutating endpoint; its status says whether the file
// was applied (200), refused or invalid (422), or failed (500).
func TestReloadEndpoint(t *testing.T) {
	r := &fakeReloader{}
	s, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: testToken}, admin.Deps{Node: &fakeNode{status: leaderStatus()}, Reloader: r})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	if rec := do(t, h, "POST", adminapi.ReloadPath, ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("reload without a token: %d, want 401", rec.Code)
	}
	for _, tc := range []struct {
		ans  adminapi.ReloadAnswer
		code int
	}{
		{adminapi.ReloadAnswer{Applied: true, Changed: []string{"log.level"}}, http.StatusOK},
		{adminapi.ReloadAnswer{Refused: []string{"node.id: cannot change"}}, http.StatusUnprocessableEntity},
		{adminapi.ReloadAnswer{Invalid: []string{"health: exactly one"}}, http.StatusUnprocessableEntity},
		{adminapi.ReloadAnswer{Error: "boom"}, http.StatusInternalServerError},
	} {
		r.ans = tc.ans
		rec := do(t, h, "POST", adminapi.ReloadPath, "Bearer "+testToken)
		got := decode[adminapi.ReloadAnswer](t, rec)
		if rec.Code != tc.code || got.Applied != tc.ans.Applied || len(got.Refused) != len(tc.ans.Refused) {
			t.Errorf("answer %+v: status %d body %+v, want %d", tc.ans, rec.Code, got, tc.code)
		}
	}
	noReload, _ := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: testToken}, admin.Deps{Node: &fakeNode{status: leaderStatus()}})
	if rec := do(t, noReload.Handler(), "POST", adminapi.ReloadPath, "Bearer "+testToken); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("reload without a reloader: %d, want 503", rec.Code)
	}
}

// SetToken: the old token is refused from the next request on, the new one
// accepted; an empty one disables the mutating endpoints.
func TestSetToken(t *testing.T) {
	s, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: testToken}, admin.Deps{Node: &fakeNode{status: leaderStatus()}})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	cede := func(tok string) int { return do(t, h, "POST", adminapi.CedePath+"?for=1s", "Bearer "+tok).Code }
	if c := cede(testToken); c != http.StatusOK {
		t.Fatalf("cede with the token: %d", c)
	}
	s.SetToken(secret.Secret("new-token"))
	if c := cede(testToken); c != http.StatusUnauthorized {
		t.Errorf("cede with the old token after SetToken: %d, want 401", c)
	}
	if c := cede("new-token"); c != http.StatusOK {
		t.Errorf("cede with the new token: %d, want 200", c)
	}
	s.SetToken("")
	if c := cede("new-token"); c != http.StatusForbidden {
		t.Errorf("cede after SetToken(\"\"): %d, want 403", c)
	}
}

// SetCertificate: a new connection gets the new certificate; a connection
// opened before keeps working.
func TestSetCertificate(t *testing.T) {
	first, second := tlstest.New(t, "first"), tlstest.New(t, "second")
	s, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: testToken, TLS: admin.TLSConfig(first.Cert)}, admin.Deps{Node: &fakeNode{status: leaderStatus()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	runServer(t, s)
	addr := s.Addr().String()
	client := func(pki *tlstest.PKI) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.CAPool}}}
	}
	old := client(first)
	get := func(c *http.Client) error {
		resp, err := c.Get("https://" + addr + admin.HealthzPath)
		if err == nil {
			io.Copy(io.Discard, resp.Body) // keeps the connection for the next request
			resp.Body.Close()
		}
		return err
	}
	if err := get(old); err != nil {
		t.Fatalf("GET with the first CA: %v", err)
	}
	if err := s.SetCertificate(second.Cert); err != nil {
		t.Fatal(err)
	}
	if err := get(old); err != nil {
		t.Errorf("the connection opened before SetCertificate: %v", err)
	}
	if err := get(client(second)); err != nil {
		t.Errorf("a new connection verified with the second CA: %v", err)
	}
	if err := get(client(first)); err == nil {
		t.Errorf("a new connection still got the first certificate")
	}
	plain, _ := admin.New(admin.Config{Listen: "127.0.0.1:0"}, admin.Deps{Node: &fakeNode{}})
	if plain.SetCertificate(second.Cert) == nil {
		t.Error("SetCertificate on a plain http API: nil error")
	}
}
