package controller_test

import (
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// Findings of the issue 13 review, each pinned by a test that failed on
// the code before its fix.

// A preferred node (priority 2) that always fails its takeover (its
// pre_promote vetoes) must not cost the cluster a handover, and the
// leader's service a demote, every handoverFailHold forever: the hold
// doubles with each failed handover in a row. With a fixed 10-minute hold
// the leader handed over 48 times in 8 hours.
func TestPreemptionToANodeThatAlwaysFailsBacksOff(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b", preemptAfter(5*time.Second))
		a := start(t, w, "a", priority(2), prePromote(), preemptAfter(5*time.Second))
		a.hooks.Always("pre_promote", &controllertest.Result{Err: errors.New("vetoed")})
		a.healthy()
		time.Sleep(8 * time.Hour)
		n := 0
		for _, r := range b.hooks.Reasons() {
			if r == "demote:failover_handoff" {
				n++
			}
		}
		// Holds of 10, 20, 40, 80, 160, 320 min: 6 handovers in 8 h.
		if n < 2 || n > 7 {
			t.Errorf("b handed over to the always-vetoing a %d times in 8 h, want 2..7", n)
		}
		b.want(controller.StateLeader)
	})
}

// A leader's handover to a standby of a higher priority (preemption) never
// replaces an operator's failover request that its watch has not reported
// yet: the operator is in charge. The request it read before deciding may
// be older than one written since; replacing it sent the cluster to the
// node the leader chose, and the operator's failover --to timed out.
func TestPreemptionDoesNotReplaceAnOperatorsRequest(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		b := leader(t, w, "b", preemptAfter(5*time.Second))
		c := start(t, w, "c")
		c.healthy()
		c.want(controller.StateStandby)
		a := start(t, w, "a", priority(2))
		a.healthy()
		a.want(controller.StateStandby)
		w.HideFailover(true) // the watches report the request late
		w.SetFailover(&cluster.FailoverRequest{To: "c", TimeoutMS: 60000, ID: "op", By: "failoverd failover"})
		time.Sleep(10 * time.Second) // past preempt_after
		if r := w.Failover(); r == nil || r.ID != "op" {
			t.Fatalf("request %+v after b's preemption, want the operator's (to c) kept", r)
		}
		w.HideFailover(false)
		c.want(controller.StateLeader)
		a.want(controller.StateStandby)
		b.want(controller.StateStandby)
	})
}
