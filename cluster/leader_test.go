package cluster_test

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

func TestLeaderOf(t *testing.T) {
	since := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	a := cluster.Member{NodeID: "a", Host: "h1", State: cluster.StateLeader, Role: "leader", Epoch: 7, Since: since, ServiceAddress: "h1:6379"}
	aOld := a
	aOld.Epoch = 6
	bFencing := cluster.Member{NodeID: "b", Host: "h2", State: "fencing", Role: "standby", Epoch: 8}
	bc := func(id string, e int64) *breadcrumb.Record { return &breadcrumb.Record{NodeID: id, Epoch: e} }
	for _, tc := range []struct {
		name    string
		bc      *breadcrumb.Record
		members []cluster.Member
		want    string // node id, "" none
	}{
		{"promoted leader named by the breadcrumb", bc("a", 7), []cluster.Member{bFencing, a}, "a"},
		{"no breadcrumb (graceful handoff in progress)", nil, []cluster.Member{a}, ""},
		{"breadcrumb of a successor that is still promoting", bc("b", 8), []cluster.Member{a, bFencing}, ""},
		{"stale member record of an older epoch", bc("a", 7), []cluster.Member{aOld}, ""},
		{"leader's member record gone (session expired)", bc("a", 7), []cluster.Member{bFencing}, ""},
	} {
		got := cluster.LeaderOf(tc.bc, tc.members)
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%s: got %+v, want none", tc.name, got)
		case tc.want != "" && (got == nil || got.NodeID != tc.want):
			t.Errorf("%s: got %+v, want %s", tc.name, got, tc.want)
		case got != nil && (got.ServiceAddress != "h1:6379" || got.Epoch != 7 || !got.Since.Equal(since)):
			t.Errorf("%s: got %+v, want a's address, epoch and since", tc.name, got)
		}
	}
	if !(*cluster.Leader)(nil).Same(nil) || (&cluster.Leader{NodeID: "a", Epoch: 1}).Same(&cluster.Leader{NodeID: "a", Epoch: 2}) {
		t.Error("Same: wrong")
	}
}
