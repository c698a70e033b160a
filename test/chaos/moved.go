package chaos

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// SwitchedPlace: the leader's configuration is pointed at another place of
// the same coordination service (another zookeeper.root or etcd.prefix,
// which is what switching coordination.backend, the ensemble or the etcd
// cluster amounts to: an election its peers are not in) and its daemon
// restarted gracefully, as an operator restarting "one node at a time"
// would; at the heal the configuration is restored and it restarts again.
// It must stay out of the empty election there, whose leader would have
// no breadcrumb to fence and would overlap the cluster's real leader: the
// overlap and service-overlap checks judge that. A node seen leading at
// the other place, or never seen refusing to join there, is a
// switched_place_led violation.
const SwitchedPlace = "switched-place"

// elsewhere is the root or prefix the switched node is pointed at.
const elsewhere = "/failoverd-elsewhere"

// placeLines are the config lines naming the place (ZooKeeper's root,
// etcd's prefix), as clustertest writes them.
var placeLines = [][]byte{[]byte("  root: /failoverd\n"), []byte("  prefix: /failoverd\n")}

// KindSwitched records what the switched node showed while it ran at the
// other place: node= led=true|false refused=true|false.
const KindSwitched = "switched_place"

// VSwitchedLed: a node pointed at another place led there, or did not
// show that it refused to join.
const VSwitchedLed = "switched_place_led"

func (m *Nemesis) switchedPlace(id int, leader *clustertest.Node, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	n := leader
	orig, err := os.ReadFile(n.Config)
	if err != nil {
		e.t.Fatal(err)
	}
	moved := orig
	for _, l := range placeLines {
		moved = bytes.Replace(moved, l, bytes.Replace(l, []byte("/failoverd\n"), []byte(elsewhere+"\n"), 1), 1)
	}
	if bytes.Equal(moved, orig) {
		e.t.Fatalf("fault %d (%s): %s's config names no root or prefix /failoverd", id, SwitchedPlace, n.ID)
	}
	inject(n.ID, "place", elsewhere)
	restart := func(cfg []byte) {
		must(e.t, os.WriteFile(n.Config, cfg, 0o644))
		e.expectKill(n)
		n.Signal(syscall.SIGTERM)
		if _, ok := n.Wait(time.Minute); !ok {
			e.t.Fatalf("fault %d (%s): %s did not stop within a minute of SIGTERM", id, SwitchedPlace, n.ID)
		}
		n.Start()
	}
	restart(moved)
	led, refused := false, false
	end := time.Now().Add(holdIn(4*time.Second, 8*time.Second))
	for time.Now().Before(end) {
		if s, ok := n.Status(); ok {
			led = led || s.State == controller.StateLeader
			refused = refused || strings.HasPrefix(s.NotLeading, controller.NotLeadingJoinRefused)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.Log(KindSwitched, "node", n.ID, "led", led, "refused", refused)
	restart(orig)
	heal(n.ID)
}

// checkSwitched applies switched_place_led.
func checkSwitched(h History, r *Report, add func(string, time.Time, string, ...any)) {
	for _, ev := range h {
		if ev.Kind != KindSwitched {
			continue
		}
		r.judge(VSwitchedLed, 1)
		switch {
		case ev.Get("led") == "true":
			add(VSwitchedLed, ev.At, "%s, pointed at another place, led there (refused %s)", ev.Get("node"), ev.Get("refused"))
		case ev.Get("refused") != "true":
			// A fault that proves nothing must not pass: the node was to
			// show its refusal within the hold.
			add(VSwitchedLed, ev.At, "%s, pointed at another place, never showed the join refusal", ev.Get("node"))
		}
	}
}
