package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// whyView is the part of `failoverd status --json` that says why nodes do
// not lead.
type whyView struct {
	NotLeading map[string]string `json:"not_leading"`
	NoLeader   string            `json:"no_leader"`
}

// waitWhy polls n's `status --json` until ok accepts it (timeout: fail).
func waitWhy(t *testing.T, n *clustertest.Node, timeout time.Duration, ok func(whyView) bool) whyView {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, code := n.CLI("status", "--json")
		var v whyView
		if code == 0 && json.Unmarshal([]byte(out), &v) == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("status --json after %v (exit %d):\n%s", timeout, code, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// `failoverd status` says why each node does not lead, from the member
// records the daemons publish: an unhealthy standby and a priority-0
// node; with every node unhealthy there is no leader, and it says why.
func TestStatusSaysWhyNotLeading(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Priority: map[string]int{"node-c": 0}})
	lead := c.Leader()
	zero := c.Node("node-c")
	var sick *clustertest.Node
	for _, n := range c.Nodes {
		if n != lead && n != zero {
			sick = n
		}
	}
	if lead == nil || lead == zero || sick == nil {
		t.Fatalf("leader %v", lead)
	}
	sick.SetHealthy(false)
	v := waitWhy(t, lead, 30*time.Second, func(v whyView) bool {
		return strings.HasPrefix(v.NotLeading[sick.ID], controller.NotLeadingUnhealthy+": health ") &&
			strings.HasPrefix(v.NotLeading[zero.ID], controller.NotLeadingPriorityZero+": ")
	})
	if _, ok := v.NotLeading[lead.ID]; ok || v.NoLeader != "" {
		t.Errorf("the leader %s has a reason, or no leader: %+v", lead.ID, v)
	}
	if s, ok := sick.Status(); !ok || !strings.HasPrefix(s.NotLeading, controller.NotLeadingUnhealthy+": ") {
		t.Errorf("%s's /v1/status not leading %q (ok %v), want unhealthy", sick.ID, s.NotLeading, ok)
	}
	out, code := zero.CLI("status")
	if code != 0 || !strings.Contains(out, "Not leading: "+sick.ID+": unhealthy: health ") ||
		!strings.Contains(out, "Not leading: "+zero.ID+": priority_zero: ") || strings.Contains(out, "Leader: none") {
		t.Errorf("status exit %d:\n%s", code, out)
	}

	lead.SetHealthy(false)
	zero.SetHealthy(false)
	v = waitWhy(t, zero, 30*time.Second, func(v whyView) bool { return strings.HasPrefix(v.NoLeader, "every member is unhealthy (") })
	for _, n := range c.Nodes {
		if !strings.Contains(v.NoLeader, n.ID+": ") {
			t.Errorf("no leader: %q, want it to name %s", v.NoLeader, n.ID)
		}
	}
	if code := v.NotLeading[lead.ID]; !strings.HasPrefix(code, controller.NotLeadingUnhealthy+": ") {
		t.Errorf("the former leader %s: not leading %q, want unhealthy", lead.ID, code)
	}
	if out, code := zero.CLI("status"); code != 0 || !strings.Contains(out, "Leader: none: every member is unhealthy (") {
		t.Errorf("status exit %d:\n%s", code, out)
	}
}
