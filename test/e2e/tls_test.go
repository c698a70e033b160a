package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/internal/tlstest"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/freeport"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// tlsNode is one failoverd process whose admin API serves HTTPS.
type tlsNode struct {
	id, config, adminAddr, log string
	cmd                        *exec.Cmd
	done                       chan struct{}
}

// tlsCluster is two real failoverd processes on one real ZooKeeper, their
// admin APIs on HTTPS with a CA made for the test, fencing each other by rpc
// only (no fallback method), so a promotion proves that rpc over HTTPS worked.
type tlsCluster struct {
	t      *testing.T
	dir    string
	pki    *tlstest.PKI
	events string
	client *http.Client
}

func newTLSCluster(t *testing.T) *tlsCluster {
	t.Helper()
	zktest.Require(t)
	c := &tlsCluster{t: t, dir: t.TempDir(), pki: tlstest.New(t, "e2e")}
	c.events = filepath.Join(c.dir, "events.log")
	c.client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: c.pki.CAPool, MinVersion: tls.VersionTLS12},
	}}
	mustOK(t, os.WriteFile(filepath.Join(c.dir, "token"), []byte("tls-e2e-token\n"), 0o600))
	lib := "#!/usr/bin/env bash\nset -euo pipefail\n"
	ev := `printf '%s %s node=%s epoch=%s reason=%s\n' "$(date +%s%N)" "$0" "$FAILOVERD_NODE_ID" "$FAILOVERD_EPOCH" "$FAILOVERD_REASON" >> "` + c.events + `"` + "\n"
	for _, hook := range []string{"promote", "demote"} {
		mustOK(t, os.WriteFile(filepath.Join(c.dir, hook), []byte(lib+ev), 0o755))
	}
	return c
}

// start runs node id against zkAddr; rpcYAML is its rpc method's flow mapping.
func (c *tlsCluster) start(id, zkAddr, rpcYAML string) *tlsNode {
	t := c.t
	t.Helper()
	port := freeport.Take(t, 1)[0]
	n := &tlsNode{id: id, adminAddr: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan struct{})}
	n.config = filepath.Join(c.dir, id+".yaml")
	n.log = filepath.Join(c.dir, id+".log")
	cfg := fmt.Sprintf(`cluster: tls
node:
  id: %s
  host: 127.0.0.1
  shutdown_timeout: 10s
  state_dir: %s
  admin:
    listen: %s
    token_file: %s
    tls: {cert_file: %s, key_file: %s}
zookeeper: {servers: [%s], session_timeout: 2s, tick_time: 200ms}
health: {interval: 200ms, timeout: 500ms, rise: 1, fall: 2, exec: {command: [/bin/true]}}
service:
  promote: {command: [%s], timeout: 5s}
  demote: {command: [%s], timeout: 600ms}
fencing:
  methods:
    - rpc: %s
log: {format: text, level: debug}
`, id, filepath.Join(c.dir, "state"), n.adminAddr, filepath.Join(c.dir, "token"), c.pki.CertFile, c.pki.KeyFile, zkAddr,
		filepath.Join(c.dir, "promote"), filepath.Join(c.dir, "demote"), rpcYAML)
	mustOK(t, os.WriteFile(n.config, []byte(cfg), 0o600))

	bin, _ := clustertest.Binaries(t)
	logf, err := os.Create(n.log)
	mustOK(t, err)
	n.cmd = exec.Command(bin, "run", "-c", n.config)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	mustOK(t, n.cmd.Start())
	go func() { _ = n.cmd.Wait(); logf.Close(); close(n.done) }()
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
		if t.Failed() {
			b, _ := os.ReadFile(n.log)
			t.Logf("--- %s log ---\n%s", id, b)
		}
	})
	return n
}

// status reads a node's /v1/status over HTTPS, verifying it with the CA.
func (c *tlsCluster) status(n *tlsNode) (controller.Status, error) {
	var s controller.Status
	resp, err := c.client.Get("https://" + n.adminAddr + "/v1/status")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func (c *tlsCluster) waitState(n *tlsNode, want controller.State, within time.Duration) controller.Status {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var s controller.Status
	var err error
	for time.Now().Before(deadline) {
		if s, err = c.status(n); err == nil && s.State == want {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("%s not %s within %s: last status %+v, err %v", n.id, want, within, s, err)
	return s
}

// hookEvents returns the events log lines of hook ("promote", "demote") for node.
func (c *tlsCluster) hookEvents(hook, node string) []string {
	f, err := os.Open(c.events)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "/"+hook+" ") && strings.Contains(l, " node="+node+" ") {
			out = append(out, l)
		}
	}
	return out
}

// TestRPCFencingOverHTTPS partitions the leader from ZooKeeper while its
// daemon stays up, so the successor can fence it only by rpc over HTTPS.
// With the CA in ca_file the old leader is demoted by the rpc call and the
// successor promotes; without it the handshake fails, the old leader is not
// called, and the successor does not promote.
func TestRPCFencingOverHTTPS(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rpc     string
		fenced  bool
		wantErr string // in the successor's last_error when not fenced
	}{
		{"with ca_file", "{timeout: 1s, ca_file: CA}", true, ""},
		{"without ca_file", "{timeout: 1s}", false, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTLSCluster(t)
			zk := zktest.Start(t, 1)
			proxyA := netproxy.New(t, func() string { return zk.Addrs()[0] })
			rpc := strings.ReplaceAll(tc.rpc, "CA", c.pki.CAFile)

			a := c.start("node-a", proxyA.Addr(), rpc)
			sa := c.waitState(a, controller.StateLeader, 60*time.Second)
			b := c.start("node-b", zk.Addrs()[0], rpc)
			c.waitState(b, controller.StateStandby, 60*time.Second)

			// Cut node-a off from ZooKeeper; its lease ends its term, its
			// session expires, node-b is elected and must fence it.
			proxyA.Blackhole(true)
			if !tc.fenced {
				// Wait for node-b's fencing to fail, then give it a few more
				// attempts: it must never promote.
				deadline := time.Now().Add(60 * time.Second)
				var s controller.Status
				var err error
				for time.Now().Before(deadline) {
					if s, err = c.status(b); err == nil && strings.Contains(s.LastError, tc.wantErr) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil || !strings.Contains(s.LastError, tc.wantErr) {
					t.Fatalf("node-b status %+v (err %v), want last_error naming the %s", s, err, tc.wantErr)
				}
				time.Sleep(5 * time.Second)
				if p := c.hookEvents("promote", "node-b"); len(p) != 0 {
					t.Fatalf("node-b promoted without fencing node-a: %v", p)
				}
				if d := c.hookEvents("demote", "node-a"); strings.Contains(strings.Join(d, "\n"), "reason=operator_demote") {
					t.Errorf("node-a was demoted by rpc although node-b could not verify its certificate: %v", d)
				}
				return
			}
			sb := c.waitState(b, controller.StateLeader, 60*time.Second)
			if sb.Epoch <= sa.Epoch {
				t.Errorf("node-b epoch %d not above node-a's %d", sb.Epoch, sa.Epoch)
			}
			rpcDemotes := 0
			for _, l := range c.hookEvents("demote", "node-a") {
				if strings.Contains(l, "reason=operator_demote") {
					rpcDemotes++
				}
			}
			if rpcDemotes == 0 {
				t.Errorf("node-a's demote hook never ran for the rpc call: %v", c.hookEvents("demote", "node-a"))
			}
		})
	}
}

// TestDaemonRefusesOpenTLSKey starts a real failoverd whose admin key is
// readable by others: it must refuse to start and name the file.
func TestDaemonRefusesOpenTLSKey(t *testing.T) {
	c := newTLSCluster(t)
	mustOK(t, os.Chmod(c.pki.KeyFile, 0o644))
	n := c.start("node-a", "127.0.0.1:1", "{timeout: 1s}")
	select {
	case <-n.done:
	case <-time.After(60 * time.Second):
		t.Fatal("failoverd still runs with a key readable by others")
	}
	if code := n.cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("exit code %d, want 2 (config error)", code)
	}
	b, _ := os.ReadFile(n.log)
	if want := "node.admin.tls.key_file"; !strings.Contains(string(b), want) || !strings.Contains(string(b), c.pki.KeyFile) {
		t.Errorf("output does not name %s and %s:\n%s", want, c.pki.KeyFile, b)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
