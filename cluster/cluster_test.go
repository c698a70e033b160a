package cluster_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// The paths are the on-disk format: nodes of earlier versions, operators'
// scripts and the ACL check (Protected) rely on exactly these strings.
func TestLayoutPathsUnchanged(t *testing.T) {
	l := cluster.Layout{Root: "/failoverd", Cluster: "orders"}
	for _, tc := range []struct{ name, got, want string }{
		{"Dir", l.Dir(), "/failoverd/orders"},
		{"ElectionDir", l.ElectionDir(), "/failoverd/orders/election"},
		{"MembersDir", l.MembersDir(), "/failoverd/orders/members"},
		{"Member", l.Member("db-1"), "/failoverd/orders/members/db-1"},
		{"Failover", l.Failover(), "/failoverd/orders/failover"},
		{"Breadcrumb", l.Breadcrumb(), "/failoverd/orders/breadcrumb"},
		{"Config", l.Config(), "/failoverd/orders/config"},
		{"LeaderPosition", l.LeaderPosition(), "/failoverd/orders/leader_position"},
		{"History", l.History(), "/failoverd/orders/history"},
		{"Pause", l.Pause(), "/failoverd/orders/pause"},
		// A root spelled with a trailing slash names the same znodes.
		{"Breadcrumb, root with slash", cluster.Layout{Root: "/failoverd/", Cluster: "orders"}.Breadcrumb(), "/failoverd/orders/breadcrumb"},
		{"nested root", cluster.Layout{Root: "/a/b", Cluster: "c"}.ElectionDir(), "/a/b/c/election"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	// The list cmd/failoverd/daemon.go gave zk.Config.Protect before the
	// layout had an owner, in that order; then the records added since.
	want := []string{"/failoverd/orders", "/failoverd/orders/election", "/failoverd/orders/members",
		"/failoverd/orders/failover", "/failoverd/orders/breadcrumb", "/failoverd/orders/leader_position",
		"/failoverd/orders/history", "/failoverd/orders/pause"}
	if got := l.Protected(); !slices.Equal(got, want) {
		t.Errorf("Protected = %q, want %q", got, want)
	}
}

// Member records are read by nodes and CLIs of earlier versions, which
// decode controller.Status: the bytes must not change.
func TestMemberJSONUnchanged(t *testing.T) {
	for _, tc := range []struct {
		m    cluster.Member
		want string
	}{{
		cluster.Member{Cluster: "orders", NodeID: "a", Host: "db1.example", AdminURL: "http://127.0.0.1:8080",
			State: "leader", Role: "leader", Health: "healthy", Epoch: 42, Since: time.Date(2026, 11, 23, 14, 5, 6, 789000000, time.UTC),
			Connected: true, ZKConnected: true, LeaseRemaining: 1.5, LastError: "boom", Version: "v1.2.3", Instance: "0123456789abcdef"},
		`{"cluster":"orders","node_id":"a","host":"db1.example","admin_url":"http://127.0.0.1:8080","state":"leader","role":"leader","health":"healthy","epoch":42,"since":"2026-11-23T14:05:06.789Z","connected":true,"zk_connected":true,"lease_remaining_seconds":1.5,"last_error":"boom","version":"v1.2.3","instance":"0123456789abcdef"}`,
	}, {
		cluster.Member{},
		`{"cluster":"","node_id":"","host":"","state":"","role":"","health":"","since":"0001-01-01T00:00:00Z","connected":false,"zk_connected":false,"version":""}`,
	}} {
		b, err := json.Marshal(tc.m)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("Member JSON\n got %s\nwant %s", b, tc.want)
		}
		var back cluster.Member
		if err := json.Unmarshal([]byte(tc.want), &back); err != nil || back != tc.m {
			t.Errorf("Member round trip: %+v, %v; want %+v", back, err, tc.m)
		}
	}
}

// Failover requests are written by CLIs and read by nodes of other versions.
func TestFailoverRequestJSONUnchanged(t *testing.T) {
	for _, tc := range []struct {
		r    cluster.FailoverRequest
		want string
	}{
		{cluster.FailoverRequest{To: "b", Deadline: time.Date(2026, 11, 23, 14, 5, 6, 0, time.UTC), TimeoutMS: 30000, ID: "abc", By: "failoverd failover", Done: true, Epoch: 7},
			`{"to":"b","deadline":"2026-11-23T14:05:06Z","timeout_ms":30000,"id":"abc","by":"failoverd failover","done":true,"epoch":7}`},
		{cluster.FailoverRequest{}, `{"to":"","deadline":"0001-01-01T00:00:00Z"}`},
	} {
		if b, _ := json.Marshal(tc.r); string(b) != tc.want {
			t.Errorf("FailoverRequest JSON\n got %s\nwant %s", b, tc.want)
		}
	}
	if b, _ := json.Marshal(cluster.ClusterRecord{ElectionMode: "fair"}); string(b) != `{"election_mode":"fair"}` {
		t.Errorf("ClusterRecord JSON %s", b)
	}
}

func TestFailoverRequestStandFor(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		req  cluster.FailoverRequest
		want time.Duration
	}{
		{"timeout wins over a skewed deadline", cluster.FailoverRequest{TimeoutMS: 30000, Deadline: now.Add(-time.Hour)}, 30 * time.Second},
		{"earlier version: deadline by our clock", cluster.FailoverRequest{Deadline: now.Add(20 * time.Second)}, 20 * time.Second},
		{"earlier version, over", cluster.FailoverRequest{Deadline: now.Add(-time.Second)}, -time.Second},
		{"capped", cluster.FailoverRequest{TimeoutMS: (24 * time.Hour).Milliseconds()}, cluster.MaxFailoverTimeout},
		{"earlier version, capped", cluster.FailoverRequest{Deadline: now.Add(24 * time.Hour)}, cluster.MaxFailoverTimeout},
	} {
		if got := tc.req.StandFor(now); got != tc.want {
			t.Errorf("%s: StandFor = %v, want %v", tc.name, got, tc.want)
		}
	}
	a := cluster.FailoverRequest{To: "b", Deadline: now}
	if a.Key() == (cluster.FailoverRequest{To: "c", Deadline: now}).Key() || a.Key() != (cluster.FailoverRequest{To: "b", Deadline: now}).Key() {
		t.Error("Key does not tell earlier-version requests apart")
	}
	if k := (cluster.FailoverRequest{To: "b", ID: "r1"}).Key(); k != "r1" {
		t.Errorf("Key with an ID = %q, want the ID", k)
	}
}

// The position fields and the leader position record are read by nodes of
// other versions: absent when unknown, and these exact names.
func TestPositionJSON(t *testing.T) {
	pos := int64(9007199254740993) // above float64's exact integers: must survive as an integer
	at := time.Date(2026, 11, 23, 14, 5, 6, 0, time.UTC)
	b, _ := json.Marshal(cluster.Member{NodeID: "a", Position: &pos, PositionAt: at})
	want := `{"cluster":"","node_id":"a","host":"","state":"","role":"","health":"","since":"0001-01-01T00:00:00Z","connected":false,"zk_connected":false,"version":"","position":9007199254740993,"position_at":"2026-11-23T14:05:06Z"}`
	if string(b) != want {
		t.Errorf("Member JSON\n got %s\nwant %s", b, want)
	}
	var back cluster.Member
	if err := json.Unmarshal(b, &back); err != nil || back.Position == nil || *back.Position != pos {
		t.Errorf("Member round trip: %v, %v", back.Position, err)
	}
	b, _ = json.Marshal(cluster.LeaderPosition{NodeID: "a", Epoch: 7, Position: pos, At: at})
	if want := `{"node_id":"a","epoch":7,"position":9007199254740993,"at":"2026-11-23T14:05:06Z"}`; string(b) != want {
		t.Errorf("LeaderPosition JSON\n got %s\nwant %s", b, want)
	}
}
