package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/etcdtest"
	"github.com/failoverd/failoverd/test/freeport"
)

// zkBlock is the zookeeper block of a clustertest config, up to the
// election block.
var zkBlock = regexp.MustCompile(`(?s)zookeeper:\n.*?\nelection:\n`)

// toEtcd rewrites n's config from ZooKeeper to the etcd cluster ec, as an
// operator switching coordination.backend would.
func toEtcd(t *testing.T, n *clustertest.Node, ec *etcdtest.Cluster) {
	t.Helper()
	b, err := os.ReadFile(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	etcd := "coordination:\n  backend: etcd\netcd:\n  endpoints: [" + strings.Join(ec.Endpoints(), ", ") +
		"]\n  prefix: /failoverd\n  lease_ttl: 3s\n  dial_timeout: 2s\nelection:\n"
	s := zkBlock.ReplaceAllLiteralString(string(b), etcd)
	if s == string(b) {
		t.Fatalf("config of %s has no zookeeper block:\n%s", n.ID, b)
	}
	if err := os.WriteFile(n.Config, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// stopDaemon stops n's daemon gracefully and waits for it.
func stopDaemon(t *testing.T, n *clustertest.Node) {
	t.Helper()
	n.Signal(syscall.SIGTERM)
	if _, ok := n.Wait(30 * time.Second); !ok {
		t.Fatalf("%s did not stop within 30s of SIGTERM", n.ID)
	}
}

// toyStoreStats are the fenced toy store's counters.
type toyStoreStats struct {
	Accepted      int64 `json:"accepted"`
	RejectedStale int64 `json:"rejected_stale"`
	MaxEpoch      int64 `json:"max_epoch"`
}

// startStore starts the toy service's fenced store, which refuses every
// write of an epoch below the highest it accepted, and returns its URL.
func startStore(t *testing.T) string {
	t.Helper()
	_, toy := clustertest.Binaries(t)
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Take(t, 1)[0])
	cmd := exec.Command(toy, "store", "-listen", addr, "-dir", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := readStore(url); err == nil {
			return url
		}
		if time.Now().After(deadline) {
			t.Fatal("the fenced store did not start within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readStore(url string) (toyStoreStats, error) {
	var s toyStoreStats
	resp, err := (&http.Client{Timeout: time.Second}).Get(url + "/stats")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func readToyStore(t *testing.T, url string) toyStoreStats {
	t.Helper()
	s, err := readStore(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A node switched to another coordination service on its own (the docs'
// "restart one node at a time") must not start a second election there:
// it refuses to join, and the cluster's one leader stays the only one. A
// move with failoverd migrate is refused while failoverd runs on the old
// place; once every node is stopped it carries the breadcrumb, the history
// and an epoch floor over, every node joins the moved cluster, and the
// epoch-checking store accepts the new leader's writes.
func TestBackendSwitchNeedsMigration(t *testing.T) {
	store := startStore(t)
	c := clustertest.Start(t, clustertest.Options{StoreURL: store, WriteInterval: 100 * time.Millisecond})
	ec := etcdtest.Start(t, etcdtest.Options{})

	first := c.WaitLeader("", 60*time.Second)
	fs, _ := first.Status()
	zkConfig := filepath.Join(t.TempDir(), "zookeeper.yaml")
	b, err := os.ReadFile(first.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(zkConfig, b, 0o644); err != nil {
		t.Fatal(err)
	}

	// The leader alone, switched to etcd and restarted.
	stopDaemon(t, first)
	toEtcd(t, first, ec)
	first.Start()
	second := c.WaitLeader(first.ID, 60*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	var refused controller.Status
	for time.Now().Before(deadline) {
		if s, ok := first.Status(); ok {
			if s.State == controller.StateLeader {
				c.DumpLogs()
				t.Fatalf("%s, switched to etcd alone, leads there (epoch %d) while %s leads on ZooKeeper: two promoted leaders", first.ID, s.Epoch, second.ID)
			}
			refused = s
		}
		if l := c.Leader(); l == nil || l.ID != second.ID {
			// c.Leader fails the test on two leaders; none is a handover.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.HasPrefix(refused.NotLeading, controller.NotLeadingJoinRefused) || !strings.Contains(refused.NotLeading, "failoverd migrate") {
		t.Fatalf("%s switched alone: status %+v; want it out of the election, join_refused, naming failoverd migrate", first.ID, refused.NotLeading)
	}
	if role := first.Role(); role == "primary" {
		t.Fatalf("%s's service is %s after its refused start", first.ID, role)
	}
	t.Logf("%s on etcd alone: %s", first.ID, refused.NotLeading)
	ss, _ := second.Status()

	fd, _ := clustertest.Binaries(t)
	migrate := func() (string, int) {
		out, err := exec.Command(fd, "migrate", "-c", first.Config, "--from", zkConfig).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	// The move is refused while failoverd runs on ZooKeeper, and leaves
	// the cluster where it is.
	if out, code := migrate(); code != exitRuntime || !strings.Contains(out, "still runs on the old place") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("migrate while failoverd runs: exit %d:\n%s\nwant exit %d, refused, nothing changed", code, out, exitRuntime)
	}

	// The move: stop every node, migrate, switch the others, start all.
	for _, n := range c.Nodes {
		stopDaemon(t, n)
	}
	out, code := migrate()
	if code != exitOK || !strings.Contains(out, "moved:") {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	t.Logf("migrate:\n%s", out)
	if out, code := migrate(); code != exitOK || !strings.Contains(out, "already moved") {
		t.Fatalf("migrate again: exit %d:\n%s; want already moved", code, out)
	}
	// The old place says where the cluster went.
	if out, err := exec.Command(fd, "status", "-c", zkConfig).CombinedOutput(); err != nil || !strings.Contains(string(out), "Moved: this cluster moved to etcd") {
		t.Fatalf("status of the old place after the move: %v:\n%s\nwant a Moved: line naming etcd", err, out)
	}
	if out, err := exec.Command(fd, "leader", "-c", zkConfig).CombinedOutput(); err == nil || !strings.Contains(string(out), "moved to etcd") {
		t.Fatalf("leader of the old place after the move: %v:\n%s\nwant exit 1 naming etcd", err, out)
	}
	for _, n := range c.Nodes {
		if n != first {
			toEtcd(t, n, ec)
		}
		n.Start()
	}
	before := readToyStore(t, store)
	lead := c.WaitLeader("", 60*time.Second)
	ls, _ := lead.Status()
	if ls.Epoch <= ss.Epoch || ls.Epoch <= fs.Epoch {
		t.Fatalf("the first leader after the move has epoch %d, not above the ZooKeeper epochs %d and %d", ls.Epoch, fs.Epoch, ss.Epoch)
	}
	// The store, which refuses every epoch below the highest it accepted,
	// takes the new leader's writes.
	deadline = time.Now().Add(30 * time.Second)
	for {
		now := readToyStore(t, store)
		if now.MaxEpoch == ls.Epoch && now.Accepted > before.Accepted {
			t.Logf("after the move: %s leads at epoch %d (ZooKeeper's last: %d); store accepted %d, rejected %d as stale",
				lead.ID, ls.Epoch, ss.Epoch, now.Accepted, now.RejectedStale)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not accept the new leader's writes (epoch %d) within 30s: %+v", ls.Epoch, now)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The history came along, and goes on.
	hist, code := lead.CLI("history")
	if code != exitOK || !strings.Contains(hist, second.ID) {
		t.Fatalf("history after the move: exit %d:\n%s; want %s's ZooKeeper term listed", code, hist, second.ID)
	}
	c.CheckNoOverlap()
}
