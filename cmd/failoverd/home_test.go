package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/failoverd/failoverd/config"
)

func homeConfig(dir, cluster, node string) *config.Config {
	cfg := config.Default()
	cfg.Cluster, cfg.Node.ID, cfg.Node.StateDir = cluster, node, dir
	return cfg
}

// The node state file: none at first; what Joined and Saw wrote is read
// back by the next start, only by the daemon's user; a lower epoch does
// not replace a higher one; an unreadable file or one of another node is
// an error, never "no home".
func TestNodeStateFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cfg := homeConfig(dir, "orders", "a")
	h, err := openHome(cfg, "zookeeper [z:2181] /failoverd/orders")
	if err != nil {
		t.Fatal(err)
	}
	if id, epoch := h.Load(); id != "" || epoch != 0 {
		t.Fatalf("a new node's home: %q, %d; want none", id, epoch)
	}
	if err := h.Joined("rec1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Saw(42); err != nil {
		t.Fatal(err)
	}
	if err := h.Saw(7); err != nil {
		t.Fatal(err)
	}
	again, err := openHome(cfg, "etcd [e:2379] /failoverd/orders")
	if err != nil {
		t.Fatal(err)
	}
	if id, epoch := again.Load(); id != "rec1" || epoch != 42 {
		t.Fatalf("home after a restart: %q, %d; want rec1, 42", id, epoch)
	}
	fi, err := os.Stat(homePath(cfg))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v, %v; want 0600", fi.Mode(), err)
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode %v, %v; want 0700", di.Mode(), err)
	}
	b, _ := os.ReadFile(homePath(cfg))
	if !strings.Contains(string(b), `"coordination": "zookeeper [z:2181] /failoverd/orders"`) {
		t.Errorf("state file does not name where the record is:\n%s", b)
	}

	// Another node's file at our path.
	if _, err := openHome(homeConfig(dir, "orders", "b"), ""); err != nil {
		t.Fatalf("node b's own, new file: %v", err)
	}
	if err := os.WriteFile(homePath(homeConfig(dir, "orders", "b")), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openHome(homeConfig(dir, "orders", "b"), ""); err == nil || !strings.Contains(err.Error(), "not of this node") {
		t.Fatalf("node a's file read by node b: %v; want an error", err)
	}
	// An unreadable file.
	if err := os.WriteFile(homePath(cfg), []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openHome(cfg, ""); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("an unreadable state file: %v; want an error", err)
	}
}

// validate warns when the node state file names another place than the
// configuration, and says nothing when it names the same one.
func TestHomeWarning(t *testing.T) {
	cfg := homeConfig(filepath.Join(t.TempDir(), "state"), "orders", "a")
	cfg.ZooKeeper.Servers = []string{"z1:2181"}
	if w := homeWarning(cfg); w != "" {
		t.Fatalf("warning without a state file: %q", w)
	}
	h, err := openHome(cfg, placeOf(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Joined("rec1"); err != nil {
		t.Fatal(err)
	}
	if w := homeWarning(cfg); w != "" {
		t.Fatalf("warning for the place the node ran in: %q", w)
	}
	cfg.ZooKeeper.Root = "/elsewhere"
	if w := homeWarning(cfg); !strings.Contains(w, "rec1") || !strings.Contains(w, "/elsewhere/orders") || !strings.Contains(w, "failoverd migrate") {
		t.Fatalf("warning for another root: %q; want the record, the new place and failoverd migrate named", w)
	}
}
