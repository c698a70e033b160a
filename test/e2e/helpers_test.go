package e2e

import (
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/clustertest"
)

// openSession is an unauthenticated ZooKeeper session on the cluster's ensemble.
func openSession(t *testing.T, c *clustertest.Cluster) *zk.Session {
	t.Helper()
	cl, err := zk.NewClient(zk.Config{Servers: c.ZK.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	sess, err := cl.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func runCmd(bin string, args ...string) (string, int) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		return err.Error(), -1
	}
	return string(out), 0
}

// onEachBackendInParallel runs test as a subtest per backend, named by
// it, the subtests side by side: the examples' slow scenarios (minutes
// each) then cost the time of one backend, not two.
func onEachBackendInParallel(t *testing.T, test func(t *testing.T, backend string)) {
	for _, b := range clustertest.Backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}
