package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// election.fence_first at production timing (ZooKeeper: session 5 s,
// tickTime 2 s; etcd: lease_ttl 5 s), with the shell fence marked as
// proving and rpc proving by itself: three crashes of the leader (the
// daemon killed, the whole host killed, the daemon cut off from the
// coordination service with its service running), each ended by the
// successor fencing the old leader first and then ending its term at the
// heartbeat version it timed (its log says so), long before the expiry.
// Never two promoted leaders (CheckNoOverlap).
func TestFenceFirstWithDaemons(t *testing.T) {
	for _, backend := range []string{clustertest.BackendZooKeeper, clustertest.BackendEtcd} {
		t.Run(backend, func(t *testing.T) { fenceFirstWithDaemons(t, backend) })
	}
}

func fenceFirstWithDaemons(t *testing.T, backend string) {
	const session = 5 * time.Second // production timing
	o := clustertest.Options{Backend: backend, ThroughProxy: true, ShellProves: true,
		ElectionYAML: "  fence_first: true\n  suspect_after: 300ms\n"}
	if backend == clustertest.BackendEtcd {
		o.EtcdLeaseTTL = session
	} else {
		o.SessionTimeout, o.ZKTickTime = session, 2*time.Second
	}
	c := clustertest.Start(t, o)
	c.WaitLeader("", 30*time.Second)
	waitCampaigning(t, c)
	for _, fault := range []string{"daemon killed", "host killed", "cut off"} {
		old := c.Leader()
		if old == nil {
			t.Fatal("no leader")
		}
		time.Sleep(2 * time.Second) // the successor has timed the leader's heartbeats for a while
		t0 := time.Now()
		switch fault {
		case "daemon killed":
			if !old.Kill(syscall.SIGKILL) {
				t.Fatalf("the daemon of %s did not die", old.ID)
			}
		case "host killed":
			old.Crash()
		case "cut off":
			old.CutOff(true)
		}
		next := c.WaitLeader(old.ID, 30*time.Second)
		ev, ok := waitEvent(t, c, t0, 30*time.Second, "promote", "node", next.ID)
		if !ok {
			t.Fatalf("%s: no promote of %s", fault, next.ID)
		}
		lines, err := clustertest.ReadLog(next.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		took := clustertest.FindLog(lines, "ended the old leader's term after fencing it: its heartbeat stood still", t0)
		t.Logf("%s: %s promoted %v after the fault on %s (%s, session %v)", fault, next.ID, ev.At.Sub(t0).Round(time.Millisecond), old.ID, backend, session)
		if len(took) != 1 {
			t.Errorf("%s: %s logged %d early takeovers after a fence, want 1", fault, next.ID, len(took))
		}
		if d := ev.At.Sub(t0); d > session {
			t.Errorf("%s: promoted %v after the fault, not before the session's end", fault, d)
		}
		switch fault {
		case "cut off":
			if _, ok := since1(c, t0, "demote", "node", old.ID); !ok {
				t.Errorf("the cut-off %s did not demote", old.ID)
			}
			old.CutOff(false)
		case "host killed":
			old.StartService()
			old.Start()
		default:
			old.Start()
		}
		waitCampaigning(t, c)
	}
	c.CheckNoOverlap()
}
