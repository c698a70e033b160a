package backendtest

import (
	"errors"
	"testing"

	"github.com/failoverd/failoverd/cluster"
)

// testJoin: the Join obligation. A node whose home is another record finds
// no cluster record and is refused without creating one (it would start
// an election of its own); a node with no home creates the record, with an
// ID; a node whose home is that ID is admitted to it, one whose home is
// another ID is refused; and the record is the same for every node.
func testJoin(t *testing.T, b Backend) {
	ctx := ctxT(t)
	_, wanderer := b.Node(t, "w")
	var moved *cluster.MovedError
	if _, err := wanderer.CheckJoin(ctx, "fair", "elsewhere"); !errors.As(err, &moved) || moved.Found != "" || moved.Home != "elsewhere" {
		t.Fatalf("CheckJoin of a node whose home is another record, on a cluster with none = %v; want a *MovedError with no record found", err)
	}
	_, first := b.Node(t, "a")
	rec, err := first.CheckJoin(ctx, "fair", "")
	if err != nil {
		t.Fatalf("CheckJoin of a node new to every cluster: %v", err)
	}
	if rec.ID == "" || rec.ID == "elsewhere" || rec.ElectionMode != "fair" || rec.EpochFloor != 0 || rec.MovedTo != "" {
		t.Fatalf("the record the first node created: %+v; want a new ID, mode fair, no floor, not moved (the refused node must not have created one)", rec)
	}
	again, err := first.CheckJoin(ctx, "fair", rec.ID)
	if err != nil || again.ID != rec.ID {
		t.Fatalf("CheckJoin of the same node, now at home: %+v, %v; want the record %s", again, err, rec.ID)
	}
	_, second := b.Node(t, "b")
	if got, err := second.CheckJoin(ctx, "fair", rec.ID); err != nil || got.ID != rec.ID {
		t.Fatalf("CheckJoin of a node whose home is this record: %+v, %v; want the record %s", got, err, rec.ID)
	}
	if got, err := second.CheckJoin(ctx, "fair", ""); err != nil || got.ID != rec.ID {
		t.Fatalf("CheckJoin of a node with no home: %+v, %v; want the existing record %s, not a new one", got, err, rec.ID)
	}
	if _, err := wanderer.CheckJoin(ctx, "fair", "elsewhere"); !errors.As(err, &moved) || moved.Found != rec.ID {
		t.Fatalf("CheckJoin of a node whose home is another record = %v; want a *MovedError naming the record %s", err, rec.ID)
	}
	var mm *cluster.ModeMismatchError
	if _, err := wanderer.CheckJoin(ctx, "unfair", ""); !errors.As(err, &mm) {
		t.Fatalf("CheckJoin of the other mode = %v; want a *ModeMismatchError", err)
	}
}
