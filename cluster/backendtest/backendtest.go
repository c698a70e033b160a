// Package backendtest is the conformance suite of the coordination
// contract (package cluster): one test per obligation that cluster's doc
// comment lists, run against every backend through Backend. A backend's
// tests run it from a _test file:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backendtest.Backend { return newBackend(t) })
//	}
//
// The suite knows no backend: it campaigns, reads and writes only through
// cluster.Elector, cluster.Records and cluster.Term, and injects faults
// only through Backend (and Partitioner, a capability). Every fault a
// Backend offers is real for a backend that has the thing it breaks; one
// that has no such thing (no connection to lose) makes it a no-op, and the
// tests that use it still check the outcome.
package backendtest

import (
	"testing"

	"github.com/failoverd/failoverd/cluster"
)

// Backend is one cluster of a coordination backend, new for every test:
// the nodes it hands out share it, and nothing of another test's cluster
// is visible in it.
type Backend interface {
	// Node returns the Elector and Records of node id, a node new to the
	// cluster (the suite never asks for one id twice), connected to the
	// coordination service. Its resources go when the test ends.
	Node(t *testing.T, id string) (cluster.Elector, cluster.Records)
	// EndSession ends node id's session with the coordination service
	// (ZooKeeper: the server expires it), and returns once the node
	// noticed. id holds a term. The session's ephemeral records (the
	// election entry, the member record) go with it; the node goes on
	// with a new session.
	EndSession(t *testing.T, id string)
	// DeleteEntry deletes node id's election entry, as an operator would.
	// id holds a term.
	DeleteEntry(t *testing.T, id string)
	// Disconnect cuts node id's connection to the coordination service
	// and returns once the node noticed; reconnect lets it connect again
	// and returns once it did. The session survives: the suite calls
	// reconnect within a few seconds. A backend without connections makes
	// both no-ops.
	Disconnect(t *testing.T, id string) (reconnect func())
	// SetPause pauses the cluster with p, as an operator's pause does (nil:
	// resumes it). The suite pauses only a cluster that is not paused.
	SetPause(t *testing.T, p *cluster.Pause)
	// History reads the cluster's history, as an operator's tool does.
	History(t *testing.T) []cluster.HistoryEntry
}

// Partitioner is a Backend that can cut a part of the coordination
// service off from the rest while the nodes connected to that part stay
// connected to it (ZooKeeper: a follower cut off from its quorum keeps
// serving its clients from its local copy). The Deadline obligation's
// partition test runs only against such backends.
type Partitioner interface {
	// Partition starts a cluster of its own in which CutOff works.
	Partition(t *testing.T) Partition
}

// Partition is a cluster of a Partitioner.
type Partition interface {
	// Node returns a node that reaches only the part CutOff leaves
	// together (the majority).
	Node(t *testing.T, id string) (cluster.Elector, cluster.Records)
	// MinorityNode returns a node that reaches only the part CutOff cuts
	// off.
	MinorityNode(t *testing.T, id string) (cluster.Elector, cluster.Records)
	// CutOff cuts the minority part off from the rest; its nodes stay
	// connected to it. heal ends the cut.
	CutOff(t *testing.T) (heal func())
}

// obligation is one test of the suite.
type obligation struct {
	name string
	test func(t *testing.T, b Backend)
}

// obligations lists the suite's tests, each an obligation of cluster's
// contract (their doc comments say which).
var obligations = []obligation{
	{"Epochs", testEpochs},
	{"Exclusion", testExclusion},
	{"GuardedWrites/EntryDeleted", func(t *testing.T, b Backend) { testGuardedWrites(t, b, faultDeleteEntry) }},
	{"GuardedWrites/SessionEnded", func(t *testing.T, b Backend) { testGuardedWrites(t, b, faultEndSession) }},
	{"CompareAndSet", testCompareAndSet},
	{"Succession/Released", func(t *testing.T, b Backend) { testSuccession(t, b, faultRelease) }},
	{"Succession/EntryDeleted", func(t *testing.T, b Backend) { testSuccession(t, b, faultDeleteEntry) }},
	{"Watches", testWatches},
	{"Watches/EveryMemberField", testWatchesEveryMemberField},
	{"LeaderView", testLeaderView},
	{"LeaderView/Narrow", testLeaderViewNarrow},
	{"Expiry/EntryDeleted", func(t *testing.T, b Backend) { testExpiry(t, b, faultDeleteEntry) }},
	{"Expiry/SessionEnded", func(t *testing.T, b Backend) { testExpiry(t, b, faultEndSession) }},
	{"RevisionZeroIsAbsent", testRevisionZeroIsAbsent},
	{"Shortcuts", testShortcuts},
	{"KnownMembers", testKnownMembers},
	{"Join", testJoin},
	{"Operator", testOperator},
	{"Primitives", testPrimitives},
	{"RemoveEntry", testRemoveEntry},
}

// Run runs every obligation against the backend newBackend makes, each as
// a subtest with a cluster of its own. The partition test runs when the
// backend is a Partitioner.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	t.Helper()
	var partitioner bool
	for _, o := range obligations {
		t.Run(o.name, func(t *testing.T) {
			b := newBackend(t)
			if b == nil {
				t.Fatal("backendtest: newBackend returned nil")
			}
			if _, ok := b.(Partitioner); ok {
				partitioner = true
			}
			o.test(t, b)
		})
	}
	if !partitioner {
		t.Log("backendtest: the backend is no Partitioner: Deadline/CutOff does not apply")
		return
	}
	t.Run("Deadline/CutOff", func(t *testing.T) {
		b := newBackend(t)
		p, ok := b.(Partitioner)
		if !ok {
			t.Fatal("backendtest: newBackend returned a Partitioner before, not now")
		}
		testDeadlineCutOff(t, p.Partition(t))
	})
	runLeaderCutOff(t, newBackend)
}
