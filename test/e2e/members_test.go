package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/clustertest"
)

// statusView is the part of `failoverd status --json` these tests read.
type statusView struct {
	Members []cluster.Member      `json:"members"`
	Down    []cluster.KnownMember `json:"down"`
}

func statusJSON(t *testing.T, n *clustertest.Node) statusView {
	t.Helper()
	out, code := n.CLI("status", "--json")
	if code != 0 {
		t.Fatalf("status --json exit %d: %s", code, out)
	}
	var v statusView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return v
}

// A standby whose daemon is killed (kill -9) stays listed by status, as
// down with when it was last seen, after its member record went with its
// session; forget refuses a live member and removes the dead one.
func TestCrashedMemberShownDownUntilForgotten(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		leader := c.Leader()
		var gone *clustertest.Node
		for _, n := range c.Nodes {
			if n != leader {
				gone = n
				break
			}
		}
		// Every node remembered itself once it published its record.
		deadline := time.Now().Add(30 * time.Second)
		for v := statusJSON(t, leader); len(v.Members) != len(c.Nodes); v = statusJSON(t, leader) {
			if time.Now().After(deadline) {
				t.Fatalf("members %+v, want %d", v.Members, len(c.Nodes))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if v := statusJSON(t, leader); len(v.Down) != 0 {
			t.Fatalf("down members %+v while every node runs", v.Down)
		}

		killed := time.Now()
		gone.Kill(syscall.SIGKILL)
		var v statusView
		deadline = time.Now().Add(60 * time.Second)
		for v = statusJSON(t, leader); len(v.Down) == 0; v = statusJSON(t, leader) {
			if time.Now().After(deadline) {
				t.Fatalf("no down member 60s after %s was killed: %+v", gone.ID, v)
			}
			time.Sleep(200 * time.Millisecond)
		}
		d := v.Down[0]
		if len(v.Down) != 1 || d.NodeID != gone.ID || d.Host == "" {
			t.Fatalf("down members %+v, want %s", v.Down, gone.ID)
		}
		if d.LastSeen.After(killed) || killed.Sub(d.LastSeen) > cluster.RememberEvery+10*time.Second {
			t.Errorf("%s last seen %v, killed at %v: want within %v before", gone.ID, d.LastSeen, killed, cluster.RememberEvery)
		}
		for _, m := range v.Members {
			if m.NodeID == gone.ID {
				t.Errorf("%s is listed live and down: %+v", gone.ID, v)
			}
		}
		out, code := leader.CLI("status")
		if code != 0 || !strings.Contains(out, "DOWN") || !strings.Contains(out, "Down: "+gone.ID) || !strings.Contains(out, "last seen") {
			t.Errorf("status exit %d, want %s down:\n%s", code, gone.ID, out)
		}

		// A live member cannot be forgotten; the dead one can, once.
		if out, code := leader.CLI("forget", leader.ID); code == 0 || !strings.Contains(out, "is live") {
			t.Errorf("forget %s (live): exit %d, %s", leader.ID, code, out)
		}
		if out, code := leader.CLI("forget", gone.ID); code != 0 || !strings.Contains(out, "forgotten") {
			t.Fatalf("forget %s: exit %d, %s", gone.ID, code, out)
		}
		if v := statusJSON(t, leader); len(v.Down) != 0 || len(v.Members) != len(c.Nodes)-1 {
			t.Errorf("after forget: %+v, want no down member", v)
		}
		if out, code := leader.CLI("forget", gone.ID); code != 0 || !strings.Contains(out, "not a known member") {
			t.Errorf("forget %s again: exit %d, %s", gone.ID, code, out)
		}
		if out, _ := leader.CLI("status"); strings.Contains(out, "DOWN") {
			t.Errorf("status after forget still lists a down member:\n%s", out)
		}
	})
}
