package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// a priority-0 node never leads. The leader is killed twice; the
// priority-0 node never promotes, and once it is the only healthy node
// left there is no leader and status says why. A failover to it is refused.
func TestPriorityZeroNodeNeverLeads(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{Priority: map[string]int{"node-c": 0}}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		zero := c.Node("node-c")
		first := c.Leader()
		if first == nil || first == zero {
			t.Fatalf("leader %v at start", first)
		}
		time.Sleep(time.Second) // every member published
		if out, code := first.CLI("failover", "--to", zero.ID, "--timeout", "5s"); code == 0 || !strings.Contains(out, "priority 0") {
			t.Fatalf("failover --to a priority-0 node: exit %d, %s; want a refusal naming the priority", code, out)
		}
		first.Kill(syscall.SIGKILL)
		second := c.WaitLeader(first.ID, 30*time.Second)
		if second == zero {
			t.Fatal("the priority-0 node leads")
		}
		second.Kill(syscall.SIGKILL)
		time.Sleep(10 * time.Second) // several session timeouts
		if l := c.Leader(); l != nil {
			t.Fatalf("%s leads with only the priority-0 node alive", l.ID)
		}
		st, ok := zero.Status()
		if !ok || st.State != controller.StateOut || st.Priority != 0 || st.Health != "healthy" {
			t.Errorf("priority-0 node status %+v (ok %v), want healthy and out", st, ok)
		}
		out, code := zero.CLI("status")
		if code != 0 || !strings.Contains(out, "Leader: none") || !strings.Contains(out, "priority 0, never leads: node-c") {
			t.Errorf("status exit %d:\n%s\nwant it to say why there is no leader", code, out)
		}
		if p := clustertest.Find(c.Events(), "promote", "node", zero.ID); len(p) != 0 {
			t.Errorf("the priority-0 node ran promote: %v", p)
		}
	})
}

// a pre_promote that exits 1 vetoes the promotion; another
// healthy node takes over instead, and the vetoing node never promotes.
func TestPrePromoteVetoLetsAnotherNodeTakeOver(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{PrePromote: true}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		var others []*clustertest.Node
		for _, n := range c.Nodes {
			if n != old {
				others = append(others, n)
				touch(t, filepath.Join(n.Dir(), "pre-promote-veto"))
			}
		}
		veto, next := others[0], others[1]
		old.Kill(syscall.SIGKILL)
		// Both remaining nodes veto; wait until each has at least once.
		deadline := time.Now().Add(40 * time.Second)
		for len(clustertest.Find(c.Events(), "pre_promote_veto", "node", veto.ID)) == 0 || len(clustertest.Find(c.Events(), "pre_promote_veto", "node", next.ID)) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("not both remaining nodes vetoed within 40s")
			}
			if l := c.Leader(); l != nil {
				t.Fatalf("%s leads although its pre_promote vetoes", l.ID)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The hook logs its veto event before it exits, so the daemon may not
		// have seen the exit yet when the event is read (a fresh-clone run
		// read "" that way): the last error must show the veto within a moment.
		st, ok := veto.Status()
		for end := time.Now().Add(10 * time.Second); (!ok || !strings.Contains(st.LastError, "pre_promote hook vetoed")) && time.Now().Before(end); st, ok = veto.Status() {
			time.Sleep(100 * time.Millisecond)
		}
		if !ok || !strings.Contains(st.LastError, "pre_promote hook vetoed") {
			t.Errorf("vetoing node's last error %q (status read: %v)", st.LastError, ok)
		}
		if err := os.Remove(filepath.Join(next.Dir(), "pre-promote-veto")); err != nil {
			t.Fatal(err)
		}
		if l := c.WaitLeader(old.ID, 60*time.Second); l != next {
			t.Fatalf("%s leads, want %s", l.ID, next.ID)
		}
		time.Sleep(3 * time.Second)
		if p := clustertest.Find(c.Events(), "promote", "node", veto.ID); len(p) != 0 {
			t.Errorf("the vetoing node promoted: %v", p)
		}
		if l := c.Leader(); l != next {
			t.Errorf("leader %v after the veto, want %s", l, next.ID)
		}
		c.CheckNoOverlap()
	})
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
