package etcdcluster

import (
	"context"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/etcdtest"
)

// Fresh answers through a member in touch with etcd's leader, and fails
// through one cut off from its peers while the client stays connected.
func TestFreshNeedsTheQuorum(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	x := (c.Leader() + 1) % len(c.Members) // a follower
	n := newNode(t, []string{c.Members[x].Endpoint()}, newLayout(), "a")
	n.session(t)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := n.s.Fresh(ctx); err != nil {
		t.Fatalf("Fresh on a healthy cluster: %v", err)
	}

	c.Isolate(x)
	ctx, cancel = context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := n.s.Fresh(ctx); err == nil {
		t.Fatal("Fresh through a member cut off from its peers = nil; want an error")
	}

	c.Heal(x)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		err := n.s.Fresh(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fresh after the member rejoined: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
