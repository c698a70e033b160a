package backendtest_test

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/backendtest"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// The in-memory world the controller's tests run against meets the same
// contract as the real backends.
func TestMemory(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Backend {
		return &memory{w: controllertest.New()}
	})
}

// memory is a controllertest.World as a backendtest.Backend.
type memory struct{ w *controllertest.World }

func (m *memory) Node(t *testing.T, id string) (cluster.Elector, cluster.Records) {
	n := m.w.Node(id)
	return n, n
}

// holds fails t unless id holds a term (the world's controls panic
// otherwise).
func (m *memory) holds(t *testing.T, id string) {
	t.Helper()
	if m.w.Term(id) == nil {
		t.Fatalf("memory backend: %s holds no term", id)
	}
}

func (m *memory) EndSession(t *testing.T, id string) {
	t.Helper()
	m.holds(t, id)
	m.w.ExpireSession(id)
}

func (m *memory) DeleteEntry(t *testing.T, id string) {
	t.Helper()
	m.holds(t, id)
	m.w.DeleteZnode(id)
}

// Disconnect is a no-op: the world has no connection to lose.
func (m *memory) Disconnect(t *testing.T, id string) func() { return func() {} }

func (m *memory) SetPause(t *testing.T, p *cluster.Pause) { m.w.SetPause(p) }

func (m *memory) History(t *testing.T) []cluster.HistoryEntry { return m.w.History() }

// NodeFenceFirst is Node with the world's elector fencing first.
func (m *memory) NodeFenceFirst(t *testing.T, id string, ff cluster.FenceFirst) (cluster.Elector, cluster.Records) {
	n := m.w.Node(id)
	n.SetFenceFirst(ff)
	return n, n
}

// SuspectAfter is five of the world's heartbeat intervals.
func (m *memory) SuspectAfter() time.Duration { return 5 * controllertest.BeatInterval }

// StandStill stops renewing id's term (its heartbeat stands still): the
// world ends the term, and its entry goes, its demote budget before the
// Expiry it kept, the guarantee ahead of now.
func (m *memory) StandStill(t *testing.T, id string) (time.Duration, func()) {
	t.Helper()
	m.holds(t, id)
	m.w.StopRenewals(id)
	return m.w.Guarantee() - m.w.DemoteBudget(), func() { m.w.ResumeRenewals(id) }
}
