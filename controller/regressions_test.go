package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// Tests of the defects an independent review found in the follow hook and
// the term's end (2026-11-23); each failed on the code before its fix.

// A demote request (an rpc fence of this node, or an operator demote) on a
// node with a follow hook is answered once the demote is done, not after
// the follow run that the demote makes due: reconcile started that follow
// in the free slot before it answered, and an rpc fencer (default timeout
// 5 s) timed out against a node whose demote had succeeded.
func TestDemoteAnswerDoesNotWaitForTheFollowAfterIt(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		b := start(t, w, "b", following(0))
		b.wantFollows("startup:a@1")
		// The run after the demote is slow (a resync, pg_rewind...).
		b.hooks.On("follow", controllertest.Result{Take: 20 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the rpc fencer's default timeout
		defer cancel()
		start := time.Now()
		o := b.c.Demote(ctx, "rpc fence")
		if d := time.Since(start); !o.Demoted || d != 0 {
			t.Errorf("Demote() = %+v after %v; want Demoted at once (hooks %v)", o, d, b.hooks.Reasons())
		}
	})
}

// A node that is elected stops showing the leader it followed before
// (status, member record, failoverd_following_epoch).
func TestElectedNodeFollowsNobody(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a")
		b := start(t, w, "b", following(0))
		b.healthy()
		b.want(controller.StateStandby)
		b.wantFollows("startup:a@1")
		w.ExpireSession("a")
		a.unhealthy()
		b.want(controller.StateLeader)
		if st := b.c.Status(); st.Following != "" || st.FollowingEpoch != 0 || !st.FollowingSince.IsZero() {
			t.Errorf("leader b's status says it follows %s@%d since %v", st.Following, st.FollowingEpoch, st.FollowingSince)
		}
	})
}

// The controller's own end of a candidacy (here a cede) stops the takeover
// of the term in progress at once, even when the backend's term context
// ends a goroutine hop later (etcd's elector ends it from its own): an event that lets
// the takeover go on (the fence's end, then the breadcrumb write) handled
// inside that hop must not start a promote the controller already decided
// against.
func TestCedeJustBeforeTheFenceEndsDoesNotPromote(t *testing.T) {
	for _, hop := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprint("hop=", hop), func(t *testing.T) {
			test(t, func(t *testing.T, w *controllertest.World) {
				w.SetTermHop(hop)
				a := leader(t, w, "a")
				b := start(t, w, "b")
				b.healthy()
				b.want(controller.StateStandby)
				b.fence.Take(time.Second)
				w.ExpireSession("a")
				a.unhealthy()
				synctest.Wait()
				times := b.fence.Times()
				if len(times) != 1 {
					t.Fatalf("fences %v", times)
				}
				time.Sleep(time.Until(times[0].Add(time.Second - 500*time.Microsecond)))
				if err := b.c.Cede(context.Background(), time.Minute); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Second)
				synctest.Wait()
				if slices.Contains(b.hooks.Reasons(), "promote:elected") {
					t.Errorf("b ceded (its candidacy ended) before its takeover wrote the breadcrumb, yet it promoted: %v (metrics %v)", b.hooks.Reasons(), b.metrics.Events())
				}
			})
		})
	}
}
