package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/clustertest"
)

// With zookeeper.auth, a daemon whose first session finds a znode above
// its cluster that anyone may change (and that is not its to fix) refuses
// to run: exit 2 with a message naming the znode, instead of retrying
// forever.
func TestUnsafeACLAtStartupExits(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 1, Auth: true})
	n := c.Nodes[0]
	n.Kill(syscall.SIGTERM)

	// Another ZooKeeper user's open znode, with our root below it.
	cl, err := zk.NewClient(zk.Config{Servers: c.ZK.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sess, err := cl.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(t.Context(), "/open", nil, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "root: /failoverd", "root: /open/failoverd", 1)
	if cfg == string(b) {
		t.Fatal("config has no root: /failoverd line")
	}
	path := filepath.Join(c.Dir, "open-root.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	fd, _ := clustertest.Binaries(t)
	cmd := exec.Command(fd, "run", "-c", path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the daemon still runs 60s after its first session found an open znode above its root:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(out.String(), "/open") || !strings.Contains(out.String(), "refusing to run") {
		t.Fatalf("exit %d, want %d with a message naming /open:\n%s", code, exitUsage, out.String())
	}
}
