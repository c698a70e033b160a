package controller_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// notFollowing is n's Status.NotFollowing once the loop settled.
func (n *node) notFollowing() string {
	n.t.Helper()
	time.Sleep(100 * time.Millisecond) // the member records' debounce
	synctest.Wait()
	return n.c.Status().NotFollowing
}

// wantNotFollowing checks that n's NotFollowing starts with reason ("":
// empty), in its status and in its member record.
func (n *node) wantNotFollowing(w *controllertest.World, reason string) {
	n.t.Helper()
	got := n.notFollowing()
	m, _ := w.Member(n.id)
	switch {
	case reason == "" && got != "":
		n.t.Fatalf("%s not following: %q, want following", n.id, got)
	case reason != "" && !strings.HasPrefix(got, reason+": "):
		n.t.Fatalf("%s not following: %q, want reason %s", n.id, got, reason)
	case m.NotFollowing != got:
		n.t.Fatalf("%s's member record says not following %q, its status %q", n.id, m.NotFollowing, got)
	}
}

// A standby whose follow hook fails towards the new leader keeps pointing
// at the old one: not following (follow_failing) until a run succeeds;
// a standby that never ran the hook for the current leader is
// follow_target while its run is under way. The leader itself never is.
func TestNotFollowingFollowHook(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", following(0))
		b := start(t, w, "b", following(0))
		c := start(t, w, "c", following(0)) // never healthy: out, follows all the same
		b.healthy()
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1")
		c.wantFollows("startup:a@1")
		for _, n := range []*node{a, b, c} {
			n.wantNotFollowing(w, "")
		}

		// a's session expires: b takes over; c's runs towards b fail.
		c.hooks.Always("follow", &controllertest.Result{Err: errors.New("scripted: replica refuses")})
		w.ExpireSession("a")
		a.unhealthy()
		b.want(controller.StateLeader)
		time.Sleep(500 * time.Millisecond)
		c.wantNotFollowing(w, controller.NotFollowingFailing)
		if got := c.notFollowing(); !strings.Contains(got, "towards the leader b@2") || !strings.Contains(got, "following a@1") {
			t.Errorf("c not following: %q; want it to name the leader b@2 and a@1", got)
		}
		b.wantNotFollowing(w, "")

		// The hook works again: the next retry (1s, 2s, ...) succeeds.
		c.hooks.Always("follow", nil)
		time.Sleep(5 * time.Second)
		c.wantNotFollowing(w, "")
		if st := c.c.Status(); st.Following != "b" || st.FollowingEpoch != 2 {
			t.Errorf("c follows %s@%d, want b@2", st.Following, st.FollowingEpoch)
		}

		// A node whose first run is slow: follow_target meanwhile.
		d := start(t, w, "d", following(0), script(func(n *node) {
			n.hooks.On("follow", controllertest.Result{Take: 10 * time.Second})
		}))
		d.healthy()
		d.want(controller.StateStandby)
		d.wantNotFollowing(w, controller.NotFollowingTarget)
		if got := d.notFollowing(); !strings.Contains(got, "following none, the leader is b@2") {
			t.Errorf("d not following: %q", got)
		}
		time.Sleep(10 * time.Second)
		d.wantNotFollowing(w, "")
	})
}

// The stall rule: a standby whose position stays put while the leader's
// advances is not following once its position was unchanged for
// StallAfter, also without a follow hook; it follows again as soon as its
// position moves. Behind an idle leader it is never stalled.
func TestNotFollowingPositionStalled(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		stall := func(_ *node, cfg *controller.Config, _ *controller.Deps) { cfg.StallAfter = 20 * time.Second }
		pa, pb := &fakePosition{pos: 100}, &fakePosition{pos: 100}
		a := leader(t, w, "a", withPosition(pa), stall)
		b := start(t, w, "b", withPosition(pb), stall)
		b.healthy()
		b.want(controller.StateStandby)

		// The leader is idle, b is behind and still: never stalled.
		pb.set(90)
		time.Sleep(time.Minute)
		b.wantNotFollowing(w, "")

		// The leader advances, b does not: stalled StallAfter after b's
		// position last changed (the leader moved after it).
		pa.set(150)
		time.Sleep(2 * time.Second)
		b.wantNotFollowing(w, "")
		pa.set(200)
		time.Sleep(20 * time.Second)
		b.wantNotFollowing(w, controller.NotFollowingStalled)
		if got := b.notFollowing(); !strings.Contains(got, "position 90 unchanged since") {
			t.Errorf("b not following: %q", got)
		}

		// b moves: following again at once.
		pb.set(95)
		time.Sleep(2 * time.Second)
		b.wantNotFollowing(w, "")
		a.wantNotFollowing(w, "")

		// b still again while the leader goes on: stalled again 20s later,
		// not before.
		pa.set(300)
		time.Sleep(15 * time.Second)
		b.wantNotFollowing(w, "")
		time.Sleep(10 * time.Second)
		b.wantNotFollowing(w, controller.NotFollowingStalled)
	})
}
