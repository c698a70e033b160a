package backendtest

import (
	"fmt"
	"testing"
)

// LeaderPartitioner is a Backend that can cut off the part of the
// coordination service that leads it (etcd: the etcd leader, which goes
// on answering lease renewals from its own lessor until it notices it
// lost its quorum), with the nodes connected to that part staying
// connected to it. The Deadline obligation's leader cut-off test runs
// only against such backends.
type LeaderPartitioner interface {
	// PartitionLeader starts a cluster of its own whose CutOff cuts off
	// the part that leads the coordination service at the time of the cut
	// (MinorityNode's nodes reach only that part).
	PartitionLeader(t *testing.T) Partition
}

// leaderCutOffRounds is how many times the leader cut-off test runs, each
// on a cluster of its own: the stale leader's renewals race the cut, and
// one round shows only one interleaving.
const leaderCutOffRounds = 3

// runLeaderCutOff runs Deadline/CutOffLeader (testDeadlineCutOff with the
// coordination service's leader cut off) leaderCutOffRounds times when
// the backend is a LeaderPartitioner.
func runLeaderCutOff(t *testing.T, newBackend func(t *testing.T) Backend) {
	t.Helper()
	if _, ok := newBackend(t).(LeaderPartitioner); !ok {
		t.Log("backendtest: the backend is no LeaderPartitioner: Deadline/CutOffLeader does not apply")
		return
	}
	t.Run("Deadline/CutOffLeader", func(t *testing.T) {
		for round := range leaderCutOffRounds {
			t.Run(fmt.Sprint(round), func(t *testing.T) {
				lp, ok := newBackend(t).(LeaderPartitioner)
				if !ok {
					t.Fatal("backendtest: newBackend returned a LeaderPartitioner before, not now")
				}
				testDeadlineCutOff(t, lp.PartitionLeader(t))
			})
		}
	})
}
