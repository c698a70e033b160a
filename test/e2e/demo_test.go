package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/etcdtest"
	"github.com/failoverd/failoverd/test/zktest"
)

// TestDemo runs `make demo`'s script, examples/demo/demo.sh, as an operator
// would, on each backend (BACKEND=zookeeper, BACKEND=etcd), and checks that
// it exits 0 after a crashed leader was fenced and a successor took over
// with a higher epoch. Under CI (CI=true) a missing ZooKeeper, java or etcd
// fails the test instead of skipping it.
func TestDemo(t *testing.T) {
	for _, backend := range clustertest.Backends {
		t.Run(backend, func(t *testing.T) { testDemo(t, backend) })
	}
}

func testDemo(t *testing.T, backend string) {
	env := []string{"BACKEND=" + backend}
	if backend == clustertest.BackendEtcd {
		env = append(env, "ETCD_BIN="+etcdtest.Default(t).Path)
	} else {
		zktest.Require(t)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash is required to run examples/demo/demo.sh")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "examples/demo/demo.sh")
	cmd.Dir = root
	// deps are checked by zktest.Require or etcdtest.Default above; a test
	// installs nothing.
	cmd.Env = append(append(os.Environ(), env...), "DEMO_SKIP_DEPS=1", "DEMO_PAUSE=0", "DEMO_KEEP=0", "NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that ZooKeeper or etcd, the daemons and the toy
	// services can all be stopped if the script hangs: SIGTERM first (the
	// script's trap cleans up), SIGKILL for anything left afterwards.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	err = cmd.Wait()
	elapsed := time.Since(start)
	syscall.Kill(-pgid, syscall.SIGKILL) // nothing should be left; make sure
	output := out.String()
	t.Logf("demo.sh ran %v; output:\n%s", elapsed.Round(time.Millisecond), output)

	if ctx.Err() != nil {
		t.Fatalf("demo.sh did not finish within 3 minutes")
	}
	if err != nil {
		t.Fatalf("demo.sh: %v (want exit 0)", err)
	}

	// The fencing, as the hooks' events log shows it.
	fence := regexp.MustCompile(`event=fence .*\btarget=(node-[abc]) .*\btarget_epoch=(\d+) .*\bresult=ok`).FindStringSubmatch(output)
	if fence == nil {
		t.Fatal("no successful fence event (event=fence target=... target_epoch=... result=ok) in the output")
	}
	// The new leader and its epoch.
	lead := regexp.MustCompile(`New leader: (node-[abc]) at epoch (\d+) \(previous: (node-[abc]) at epoch (\d+)\)`).FindStringSubmatch(output)
	if lead == nil {
		t.Fatal(`no "New leader: NODE at epoch N (previous: NODE at epoch M)" line in the output`)
	}
	newNode, oldNode := lead[1], lead[3]
	newEpoch, _ := strconv.ParseInt(lead[2], 10, 64)
	oldEpoch, _ := strconv.ParseInt(lead[4], 10, 64)
	if newNode == oldNode {
		t.Errorf("new leader %s is the old one", newNode)
	}
	if newEpoch <= oldEpoch {
		t.Errorf("new epoch %d is not above the old epoch %d", newEpoch, oldEpoch)
	}
	if fence[1] != oldNode || fence[2] != lead[4] {
		t.Errorf("fenced %s at epoch %s, want the old leader %s at epoch %d", fence[1], fence[2], oldNode, oldEpoch)
	}
	if m := regexp.MustCompile(`Failover took (\d+) ms`).FindStringSubmatch(output); m == nil {
		t.Error(`no "Failover took N ms" line in the output`)
	} else if ms, _ := strconv.Atoi(m[1]); ms <= 0 || ms > 30000 {
		t.Errorf("failover took %d ms, want within (0, 30000]", ms)
	}
	// Cleaned up: the work directory is gone.
	if m := regexp.MustCompile(`work directory: (\S+)`).FindStringSubmatch(output); m == nil {
		t.Error("the output does not name the work directory")
	} else if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("work directory %s still exists after the demo (stat: %v)", m[1], err)
		os.RemoveAll(m[1])
	}
}
