package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// restartSec is the shipped unit's RestartSec (packaging/deb, configs):
// the harness restarts a killed daemon after it, as systemd would.
const restartSec = 200 * time.Millisecond

// killRestart SIGKILLs the leader's daemon (its service stays primary),
// restarts it after restartSec, and returns the successor and how long
// after the kill its promote hook started.
func killRestart(t *testing.T, c *clustertest.Cluster) (old, next *clustertest.Node, killed time.Time, took time.Duration) {
	t.Helper()
	old = c.Leader()
	if old == nil {
		t.Fatal("no leader")
	}
	killed = time.Now()
	if !old.Kill(syscall.SIGKILL) {
		t.Fatalf("the daemon of %s did not die", old.ID)
	}
	time.Sleep(restartSec)
	old.Start()
	next = c.WaitLeader(old.ID, 30*time.Second)
	var at time.Time
	for _, e := range clustertest.Find(c.Events(), "promote", "node", next.ID) {
		if e.At.After(killed) {
			at = e.At
			break
		}
	}
	if at.IsZero() {
		t.Fatalf("no promote of %s after the kill of %s", next.ID, old.ID)
	}
	return old, next, killed, at.Sub(killed)
}

// restartRuns is how many kills each backend measures with the option on
// (FAILOVERD_RESTART_RUNS, default 3; docs/performance.md's figures are
// of 5 per run of the test).
func restartRuns() int {
	if n, err := strconv.Atoi(os.Getenv("FAILOVERD_RESTART_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// waitCampaigning waits until every node is a standby or the leader.
func waitCampaigning(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		all := true
		for _, n := range c.Nodes {
			if st, ok := n.Status(); !ok || st.State != controller.StateStandby && st.State != controller.StateLeader {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("not every node is back in the election within 60s")
		}
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// election.end_own_term_on_restart: the leader's daemon is SIGKILLed (its
// service stays primary) and restarted as systemd would (after
// RestartSec=200ms); the restarted daemon demotes its service, removes its
// previous process's election entry, and the successor wins at once and
// fences the old term through the restarted daemon's rpc answer (the shell
// fence fails throughout). Killed →
// successor promoted must be well inside the session: under a second at a
// 4 s session (asserted under 2 s for a loaded host), against about the
// session without the option (measured once in the same test). Never two
// promoted leaders (CheckNoOverlap), and every restarted daemon demoted
// its service at startup before anything was removed.
func TestRestartEndsOwnTerm(t *testing.T) {
	const session = 4 * time.Second
	base := clustertest.Options{SessionTimeout: session, EtcdLeaseTTL: session}
	clustertest.ForEachBackend(t, base, func(t *testing.T, o clustertest.Options) {
		on := o
		on.ElectionYAML = "  end_own_term_on_restart: true\n"
		c := clustertest.Start(t, on)
		c.WaitLeader("", 30*time.Second)
		waitCampaigning(t, c)
		// The shell fence fails throughout: a successor promotes only once
		// the restarted daemon answered its rpc fence for the old epoch.
		if err := os.WriteFile(filepath.Join(c.Dir, "fence-fail"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var took []time.Duration
		for i := range restartRuns() {
			old, next, killed, d := killRestart(t, c)
			t.Logf("run %d: %s killed, %s promoted after %v", i, old.ID, next.ID, d.Round(time.Millisecond))
			took = append(took, d)
			lines, err := clustertest.ReadLog(old.LogPath())
			if err != nil {
				t.Fatal(err)
			}
			if len(clustertest.FindLog(lines, "removed the previous process's election entry after the startup demote", killed)) != 1 {
				t.Errorf("run %d: the restarted %s did not log one removal of its previous entry", i, old.ID)
			}
			// The next kill starts with every node back in the election (a
			// fenced node stays out for a while).
			waitCampaigning(t, c)
		}
		c.CheckNoOverlap()
		if f := clustertest.Find(c.Events(), "fence"); len(f) != 0 {
			t.Errorf("the shell fence succeeded (%v); the rpc fence must be what let the successors promote", f)
		}
		startups := clustertest.Find(c.Events(), "demote", "reason", "startup")
		if len(startups) < len(took) {
			t.Errorf("%d startup demotes for %d restarts", len(startups), len(took))
		}
		p50 := median(took)
		t.Logf("option on: killed → promoted p50 %v over %d runs (%v)", p50.Round(time.Millisecond), len(took), took)
		if p50 > 2*time.Second {
			t.Errorf("option on: p50 %v; want well under the %v session (under 1 s expected)", p50, session)
		}

		// Without the option, the same kill waits out the session.
		c2 := clustertest.Start(t, o)
		c2.WaitLeader("", 30*time.Second)
		waitCampaigning(t, c2)
		_, _, _, off := killRestart(t, c2)
		c2.CheckNoOverlap()
		t.Logf("option off: killed → promoted %v", off.Round(time.Millisecond))
		if off < p50+time.Second {
			t.Errorf("option off %v is not slower than on %v by a second: the removal is not what made it fast", off, p50)
		}
	})
}
