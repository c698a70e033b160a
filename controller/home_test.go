package controller_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// memHome is a node's memory of its cluster, in memory.
type memHome struct {
	mu     sync.Mutex
	id     string
	epoch  int64
	joined []string
}

func (h *memHome) Load() (string, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.id, h.epoch
}

func (h *memHome) Joined(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.id, h.joined = id, append(h.joined, id)
	return nil
}

func (h *memHome) Saw(epoch int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch = max(h.epoch, epoch)
	return nil
}

func withHome(h controller.Home) opt {
	return func(_ *node, _ *controller.Config, d *controller.Deps) { d.Home = h }
}

// A node new to every cluster joins, creating the cluster record, and
// remembers its ID and the epoch it led with.
func TestHomeRemembered(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		h := &memHome{}
		a := leader(t, w, "a", withHome(h))
		id, epoch := h.Load()
		if id == "" || epoch != a.c.Status().Epoch {
			t.Fatalf("home %q at epoch %d; want the record's ID and the term's epoch %d", id, epoch, a.c.Status().Epoch)
		}
	})
}

// A node whose home is another cluster record stays out of the election,
// showing why, and its service is never promoted.
func TestHomeElsewhereRefused(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetClusterRecord(&cluster.ClusterRecord{ElectionMode: "fair", ID: "here"})
		a := start(t, w, "a", withHome(&memHome{id: "elsewhere"}))
		a.healthy()
		time.Sleep(10 * time.Second)
		a.want(controller.StateOut)
		a.wantHooks("demote:startup")
		if why := a.c.Status().NotLeading; !strings.HasPrefix(why, controller.NotLeadingJoinRefused) || !strings.Contains(why, "elsewhere") {
			t.Fatalf("not leading: %q; want join_refused naming the record this node ran in", why)
		}
		w.SetClusterRecord(&cluster.ClusterRecord{ElectionMode: "fair", ID: "here", MovedFrom: []string{"elsewhere"}})
		b := leader(t, w, "b", withHome(&memHome{id: "elsewhere"}))
		if b.c.Status().Epoch <= 0 {
			t.Fatalf("b leads at epoch %d", b.c.Status().Epoch)
		}
	})
}

// Every epoch of a moved cluster is the backend's plus the record's floor,
// in the status, the breadcrumb and the promote hook.
func TestEpochFloorAdded(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		const floor = 1 << 40
		w.SetClusterRecord(&cluster.ClusterRecord{ElectionMode: "fair", ID: "moved", EpochFloor: floor, MovedFrom: []string{"old"}})
		h := &memHome{id: "old", epoch: floor - 5}
		a := leader(t, w, "a", withHome(h))
		e := a.c.Status().Epoch
		if e <= floor {
			t.Fatalf("a leads at epoch %d; want above the floor %d", e, floor)
		}
		if bc, _ := w.Breadcrumb(); bc == nil || bc.Epoch != e {
			t.Fatalf("breadcrumb %+v; want a's at epoch %d", bc, e)
		}
		if id, _ := h.Load(); id != "moved" {
			t.Fatalf("home %q after joining the moved cluster; want moved", id)
		}
	})
}

// A node never leads at an epoch that is not above the highest it led
// with: a move that did not carry the epochs over is refused, not obeyed.
func TestEpochBelowHomeRefused(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetClusterRecord(&cluster.ClusterRecord{ElectionMode: "fair", ID: "r"})
		a := start(t, w, "a", withHome(&memHome{id: "r", epoch: 1 << 50}))
		a.healthy()
		time.Sleep(5 * time.Second)
		a.want(controller.StateOut)
		a.wantHooks("demote:startup")
		if err := a.c.Status().LastError; !strings.Contains(err, "highest this node led with") {
			t.Fatalf("last error %q; want the refusal to lead below the remembered epoch", err)
		}
	})
}

// A running node whose session expired (a partition longer than the
// session timeout) has no member record and no election entry, so a
// failoverd migrate run then finds nobody and moves the cluster. When the
// node's new session comes up its elector campaigns at once, on the join
// verdict of the old session; the join checks run again after every win
// find the mark, and the node gives the term back before it writes or
// promotes anything (docs/safety.md, "One election per cluster", step 3).
func TestSessionLostThenMovedIsNotLedAgain(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetClusterRecord(&cluster.ClusterRecord{ElectionMode: "fair", ID: "R"})
		a := leader(t, w, "a", withHome(&memHome{id: "R"}))
		promotes := func() int {
			n := 0
			for _, c := range a.hooks.Calls() {
				if c.Name == "promote" {
					n++
				}
			}
			return n
		}
		if promotes() != 1 {
			t.Fatalf("hooks %v", a.hooks.Reasons())
		}
		// a's session expires: its member record and entry are gone.
		w.ExpireSession("a")
		// failoverd migrate runs now: it finds nobody on R's place and
		// marks R moved (and creates the new record elsewhere).
		w.SetClusterRecord(&cluster.ClusterRecord{ElectionMode: "fair", ID: "R", MovedTo: "S"})
		time.Sleep(10 * time.Second)
		if n := promotes(); n > 1 {
			t.Fatalf("a promoted again in the election of R after R was marked moved (hooks %v, state %s, why %q): "+
				"a second election beside the moved cluster's", a.hooks.Reasons(), a.state(), a.c.Status().NotLeading)
		}
		a.want(controller.StateOut)
	})
}

// A manual failover to a node of a moved cluster is marked done with the
// epoch the node leads at, the record's floor included.
func TestFailoverDoneAtTheFlooredEpoch(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		const floor = 1 << 40
		w.SetClusterRecord(&cluster.ClusterRecord{ElectionMode: "fair", ID: "moved", EpochFloor: floor})
		leader(t, w, "a", withHome(&memHome{id: "moved"}))
		b := start(t, w, "b", withHome(&memHome{id: "moved"}))
		b.healthy()
		b.want(controller.StateStandby)
		w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "op"})
		b.want(controller.StateLeader)
		e := b.c.Status().Epoch
		if r := w.Failover(); r == nil || !r.Done || r.Epoch != e || e <= floor {
			t.Fatalf("the request after b took over: %+v; want done at b's epoch %d (above the floor %d)", r, e, floor)
		}
	})
}
