package cluster_test

import (
	"context"
	"errors"
	"testing"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// A member record of another live session with our node id is a duplicate
// node id, unless SetPrevious named its instance: our previous process,
// proven gone, whose record is then replaced as our own.
func TestPublishMemberReplacesThePreviousInstance(t *testing.T) {
	w := controllertest.New()
	ctx := context.Background()
	old := w.Node("x") // publishes as instance-x on its own session
	if err := old.PublishMember(ctx, cluster.Member{NodeID: "x", State: "leader", Instance: "instance-x"}); err != nil {
		t.Fatal(err)
	}
	restarted := cluster.NewStore(w.Node("x-restarted"), cluster.StoreConfig{Layout: controllertest.Layout, NodeID: "x", Instance: "new"})
	m := cluster.Member{NodeID: "x", State: "out", Instance: "new"}
	var dup *cluster.DuplicateIDError
	if err := restarted.PublishMember(ctx, m); !errors.As(err, &dup) {
		t.Fatalf("publishing beside a live record of another instance: %v; want a DuplicateIDError", err)
	}
	restarted.SetPrevious("someone-else")
	if err := restarted.PublishMember(ctx, m); !errors.As(err, &dup) {
		t.Fatalf("with another previous instance named: %v; want a DuplicateIDError", err)
	}
	restarted.SetPrevious("instance-x")
	if err := restarted.PublishMember(ctx, m); err != nil {
		t.Fatalf("with the record's instance named as our previous one: %v", err)
	}
	ms := w.Members()
	if len(ms) != 1 || ms[0].State != "out" || ms[0].Instance != "new" {
		t.Errorf("member records %+v; want ours (state out, instance new) alone", ms)
	}
}
