package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// A leader that ends its term on purpose keeps it, renewed, while its
// demote runs, however long that takes within
// service.demote.graceful_timeout: a demote three times the session
// timeout (far beyond any demote budget) hands over without fencing, on
// failover --to and on SIGTERM, and the successor promotes only after the
// old leader's demote finished.
func TestLongGracefulDemoteHandsOverWithoutFencing(t *testing.T) {
	// A 6s session (a 5s etcd lease): a loaded host must not lose the
	// term by missed renewals (which would rightly turn the demote into
	// a forced one and fence), nor time out its 1.8s forced demotes.
	const session = 6 * time.Second
	const demote = 3 * session // the demote hook sleeps this long
	opts := clustertest.Options{SessionTimeout: session, EtcdLeaseTTL: 5 * time.Second, GracefulDemoteTimeout: demote + 10*time.Second}
	clustertest.ForEachBackend(t, opts, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		first := c.Leader()
		var second *clustertest.Node
		for _, n := range c.Nodes {
			if n != first {
				second = n
				break
			}
		}
		// Every member standby: the target is in the election.
		deadline := time.Now().Add(60 * time.Second)
		for _, n := range c.Nodes {
			for n != first && time.Now().Before(deadline) {
				if st, ok := n.Status(); ok && st.State == controller.StateStandby && st.Health == "healthy" {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		slow := func(n *clustertest.Node, on bool) {
			t.Helper()
			p := filepath.Join(n.Dir(), "demote-sleep")
			if !on {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err := os.WriteFile(p, []byte(strconv.Itoa(int(demote/time.Second))), 0o644); err != nil {
				t.Fatal(err)
			}
		}

		// failover --to: first hands over to second.
		slow(first, true)
		start := time.Now()
		out, code := first.CLI("failover", "--to", second.ID, "--timeout", "90s")
		if code != 0 {
			t.Fatalf("failover exit %d: %s", code, out)
		}
		t.Logf("failover --to with a %v demote: %v", demote, time.Since(start).Round(time.Millisecond))
		if l := c.Leader(); l == nil || l.ID != second.ID {
			t.Fatalf("leader after failover = %v, want %s", l, second.ID)
		}
		checkGracefulHandover(t, c, first.ID, second.ID, "failover_handoff", demote)
		slow(first, false)

		// SIGTERM: second stops, and whoever is next takes over.
		slow(second, true)
		start = time.Now()
		second.Signal(syscall.SIGTERM)
		err, exited := second.Wait(demote + 30*time.Second)
		if !exited {
			t.Fatalf("%s did not exit within %v of SIGTERM", second.ID, demote+30*time.Second)
		}
		if err != nil {
			t.Errorf("%s exited with %v after a graceful stop, want 0", second.ID, err)
		}
		next := c.WaitLeader(second.ID, 30*time.Second)
		t.Logf("SIGTERM with a %v demote: %s -> %s in %v", demote, second.ID, next.ID, time.Since(start).Round(time.Millisecond))
		checkGracefulHandover(t, c, second.ID, next.ID, "shutdown", demote)

		evs := c.Events()
		if f := clustertest.Find(evs, "fence_attempt"); len(f) != 0 {
			t.Errorf("a graceful handover ran the shell fence: %v", f)
		}
		if d := clustertest.Find(evs, "demote", "reason", "operator_demote"); len(d) != 0 {
			t.Errorf("a graceful handover was fenced over rpc (operator_demote): %v", d)
		}
		// The history the successors wrote: both terms began without
		// fencing anybody.
		hist, code := next.CLI("history", "--json")
		if code != 0 {
			t.Fatalf("history exit %d: %s", code, hist)
		}
		var entries []cluster.HistoryEntry
		if err := json.Unmarshal([]byte(hist), &entries); err != nil {
			t.Fatalf("history: %v\n%s", err, hist)
		}
		if len(entries) < 3 {
			t.Fatalf("history has %d entries, want the first leader's and two handovers: %+v", len(entries), entries)
		}
		for _, e := range entries[len(entries)-2:] {
			if e.FenceMethod != cluster.FenceNone {
				t.Errorf("history entry %+v: fence method %q, want %q", e, e.FenceMethod, cluster.FenceNone)
			}
		}
		c.CheckNoOverlap()
	})
}

// checkGracefulHandover checks from the events that from demoted with
// reason after a sleep of demote, and that to promoted after from's
// demote ended, with a greater epoch.
func checkGracefulHandover(t *testing.T, c *clustertest.Cluster, from, to, reason string, demote time.Duration) {
	t.Helper()
	evs := c.Events()
	sleeps := clustertest.Find(evs, "demote_sleep", "node", from, "reason", reason)
	demotes := clustertest.Find(evs, "demote", "node", from, "reason", reason)
	if len(sleeps) != 1 || len(demotes) != 1 {
		t.Fatalf("%s's demote events with reason %s: %d sleeps, %d demotes; want one of each", from, reason, len(sleeps), len(demotes))
	}
	if took := demotes[0].At.Sub(sleeps[0].At); took < demote {
		t.Errorf("%s's demote took %v, want its whole %v", from, took, demote)
	}
	promotes := clustertest.Find(evs, "promote", "node", to)
	if len(promotes) == 0 {
		t.Fatalf("%s never promoted", to)
	}
	p := promotes[len(promotes)-1]
	if p.At.Before(demotes[0].At) {
		t.Errorf("%s promoted at %s, before %s's demote ended at %s", to, p.At.Format("15:04:05.000"), from, demotes[0].At.Format("15:04:05.000"))
	}
	oldEpoch := int64(0)
	for _, q := range clustertest.Find(evs, "promote", "node", from) {
		oldEpoch, _ = strconv.ParseInt(q.KV["epoch"], 10, 64)
	}
	if ep, _ := strconv.ParseInt(p.KV["epoch"], 10, 64); ep <= oldEpoch {
		t.Errorf("%s's epoch %d not above %s's %d", to, ep, from, oldEpoch)
	}
	if p.KV["prev"] != "" {
		t.Errorf("%s's promote was told of a previous leader %s: the breadcrumb was not deleted", to, p.KV["prev"])
	}
}
