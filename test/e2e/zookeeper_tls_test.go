package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/internal/tlstest"
	"github.com/failoverd/failoverd/test/clustertest"
)

// TestZooKeeperOverTLS runs a cluster whose daemons reach ZooKeeper only
// through its secureClientPort, with a client certificate: a leader is
// elected and a crashed leader is fenced before its successor promotes. A
// node restarted with a CA that did not sign the servers' certificate stays
// out (disconnected, never promoting) and logs why; back with the right CA,
// it joins as a standby.
func TestZooKeeperOverTLS(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{ZooKeeperTLS: true})
	cfg, err := os.ReadFile(c.Nodes[0].Config)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "tls:") || !strings.Contains(string(cfg), c.ZK.Servers[0].SecureAddr()) {
		t.Fatalf("node config does not use the secure port with tls:\n%s", cfg)
	}

	old := c.Leader()
	old.Kill(syscall.SIGKILL)
	next := c.WaitLeader(old.ID, 30*time.Second)
	if len(clustertest.Find(c.Events(), "fence", "target", old.ID)) == 0 {
		t.Fatalf("crashed leader %s was not fenced before %s promoted", old.ID, next.ID)
	}

	// The crashed node comes back trusting another CA.
	other := tlstest.New(t, "other")
	good := fileText(t, old.Config)
	bad := strings.Replace(good, "ca_file: "+c.ZKTLS.CAFile, "ca_file: "+other.CAFile, 1)
	if bad == good {
		t.Fatalf("no ca_file line to replace in:\n%s", good)
	}
	if err := os.WriteFile(old.Config, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	old.Start()
	deadline := time.Now().Add(20 * time.Second)
	for {
		log := fileText(t, old.LogPath())
		if strings.Contains(log, "TLS handshake with a ZooKeeper server failed") && strings.Contains(log, "x509") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TLS error in %s's log after a restart with the wrong CA:\n%s", old.ID, lastBytes(log, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	st, ok := old.Status()
	if !ok {
		t.Fatalf("%s's admin API does not answer while ZooKeeper refuses it", old.ID)
	}
	if st.Connected || st.State == "leader" {
		t.Fatalf("%s with the wrong CA: connected=%v state=%s, want disconnected and not leading", old.ID, st.Connected, st.State)
	}
	if l := c.Leader(); l == nil || l.ID != next.ID {
		t.Fatalf("leader changed while %s could not connect: %v", old.ID, l)
	}

	// The right CA again: it joins as a standby.
	old.Kill(syscall.SIGTERM)
	if err := os.WriteFile(old.Config, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	old.Start()
	if !old.WaitState(30*time.Second, "standby") {
		st, _ := old.Status()
		t.Fatalf("%s did not join as a standby with the right CA: %+v", old.ID, st)
	}
	c.CheckNoOverlap()
}

func fileText(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
