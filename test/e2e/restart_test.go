package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// rpc fencing liveness: the leader's daemon dies (kill -9, as in a host
// crash; its service stays primary) and comes back before the successor
// fences it. The successor's rpc fence asks it for the breadcrumb's epoch;
// the restarted daemon demoted its service at startup and knows from the
// breadcrumb that it led that term, so it answers with that epoch and the
// successor promotes. The shell fence fails throughout: rpc is the only
// method that works. (Before, the restarted daemon answered epoch 0, every
// rpc fence failed, and only the restarted node itself could lead again.)
func TestRestartedLeaderIsFencedByRPC(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{SessionTimeout: 4 * time.Second, EtcdLeaseTTL: 4 * time.Second}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		if err := os.WriteFile(filepath.Join(c.Dir, "fence-fail"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		old.Kill(syscall.SIGKILL)
		killed := time.Now()
		old.Start() // within the 4s its old session lives on
		next := c.WaitLeader(old.ID, 30*time.Second)
		t.Logf("%s leads %v after %s was killed and restarted", next.ID, time.Since(killed).Round(time.Millisecond), old.ID)
		if f := clustertest.Find(c.Events(), "fence", "target", old.ID); len(f) != 0 {
			t.Errorf("the shell fence succeeded (%v); this test needs rpc to be the only working method", f)
		}
		if d := clustertest.Find(c.Events(), "demote", "node", old.ID, "reason", "startup"); len(d) == 0 {
			t.Errorf("%s did not demote its service at its restart", old.ID)
		}
		c.CheckNoOverlap()
	})
}
