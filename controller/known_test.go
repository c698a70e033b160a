package controller_test

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// A node keeps its known-member record, rewritten every RememberEvery
// while it lives (its LastSeen moves), and the record outlives the
// node's member record.
func TestKnownMemberRemembered(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := start(t, w, "a")
		a.healthy()
		a.want(controller.StateLeader)
		time.Sleep(100 * time.Millisecond)
		k := w.Known()
		if len(k) != 1 || k[0].NodeID != "a" || k[0].Host != "host-a" || k[0].AdminURL != "http://a:9101" || k[0].LastSeen.IsZero() {
			t.Fatalf("known members %+v, want a's", k)
		}
		first := k[0].LastSeen
		time.Sleep(cluster.RememberEvery + time.Second)
		if k := w.Known(); len(k) != 1 || !k[0].LastSeen.After(first) {
			t.Fatalf("known members %+v after %v, want a's last seen after %v", k, cluster.RememberEvery, first)
		}
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		w.DropMember("a")
		if k := w.Known(); len(k) != 1 || k[0].NodeID != "a" {
			t.Fatalf("known members %+v after a went, want a still", k)
		}
	})
}
