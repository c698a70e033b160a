package e2e

import (
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/internal/tlstest"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/zktest"
)

// A renewed admin certificate needs no restart: written over the old files
// and reloaded (failoverd reload, over HTTPS with the rpc method's CA), it
// is served to the next connection, and the leader keeps its term.
func TestReloadRotatesAdminCertificate(t *testing.T) {
	c := newTLSCluster(t)
	zk := zktest.Start(t, 1)
	a := c.start("node-a", zk.Addrs()[0], "{timeout: 1s, ca_file: "+c.pki.CAFile+"}")
	before := c.waitState(a, controller.StateLeader, 60*time.Second)

	rotated := tlstest.New(t, "rotated")
	for _, f := range [][2]string{{rotated.CertFile, c.pki.CertFile}, {rotated.KeyFile, c.pki.KeyFile}} {
		b, err := os.ReadFile(f[0])
		mustOK(t, err)
		mustOK(t, os.WriteFile(f[1], b, 0o600))
	}
	bin, _ := clustertest.Binaries(t)
	out, err := exec.Command(bin, "reload", "-c", a.config).CombinedOutput()
	if err != nil {
		t.Fatalf("failoverd reload: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "reloaded its config") {
		t.Errorf("failoverd reload printed %q", out)
	}

	client := func(pki *tlstest.PKI) *http.Client {
		return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: pki.CAPool, MinVersion: tls.VersionTLS12}}}
	}
	resp, err := client(rotated).Get("https://" + a.adminAddr + "/v1/status")
	if err != nil {
		t.Fatalf("a new connection verified with the new certificate's CA: %v", err)
	}
	resp.Body.Close()
	if got := resp.TLS.PeerCertificates[0]; !got.Equal(rotated.Cert.Leaf) {
		t.Errorf("served certificate %s, want the rotated one", got.Subject)
	}
	if _, err := client(c.pki).Get("https://" + a.adminAddr + "/v1/status"); err == nil {
		t.Error("a new connection still gets the old certificate")
	}
	c.client = client(rotated)
	if s := c.waitState(a, controller.StateLeader, 10*time.Second); s.Epoch != before.Epoch {
		t.Errorf("epoch %d after the reload, want %d", s.Epoch, before.Epoch)
	}
	if b, _ := os.ReadFile(a.log); strings.Contains(string(b), "DATA RACE") {
		t.Error("the daemon logged a data race")
	}
}
