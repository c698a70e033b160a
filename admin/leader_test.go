package admin_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/internal/secret"
)

// fakeLeaders answers GET /v1/leader with a fixed leader or error.
type fakeLeaders struct {
	leader *cluster.Leader
	err    error
}

func (f fakeLeaders) Leader() (*cluster.Leader, error) { return f.leader, f.err }

func testLeader() *cluster.Leader {
	return &cluster.Leader{NodeID: "node-b", Host: "10.0.0.12", ServiceAddress: "10.0.0.12:6379",
		AdminURL: "http://10.0.0.12:9090", Epoch: 7, Since: time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)}
}

// GET /v1/leader: 200 with the leader's JSON, else 503 with an error, the
// same for every node state and without a token (like /v1/status).
func TestLeaderEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		source   admin.LeaderSource
		method   string
		wantCode int
		wantBody string // substring
	}{
		{"leader", fakeLeaders{leader: testLeader()}, "GET", 200, `"service_address":"10.0.0.12:6379"`},
		{"head", fakeLeaders{leader: testLeader()}, "HEAD", 200, ""},
		{"no leader", fakeLeaders{}, "GET", 503, `{"error":"no leader"}`},
		{"cannot tell", fakeLeaders{err: errors.New("zookeeper unreachable for 9s")}, "GET", 503, `"error":"this node cannot tell who leads: zookeeper unreachable for 9s"`},
		{"no source", nil, "GET", 503, `"error":`},
		{"post", fakeLeaders{leader: testLeader()}, "POST", 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A standby answers too: the leader is the cluster's, not this node's.
			s, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: secret.Secret(testToken)},
				admin.Deps{Node: &fakeNode{status: withState("standby", "healthy")}, Leaders: tc.source})
			if err != nil {
				t.Fatal(err)
			}
			rec := do(t, s.Handler(), tc.method, adminapi.LeaderPath, "")
			if rec.Code != tc.wantCode {
				t.Fatalf("%s %s = %d, want %d; body %q", tc.method, adminapi.LeaderPath, rec.Code, tc.wantCode, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("body = %q, want it to contain %q", rec.Body, tc.wantBody)
			}
			if ct := rec.Header().Get("Content-Type"); tc.wantCode != 405 && ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if tc.wantCode == 200 && tc.method == "GET" {
				if got := decode[adminapi.Leader](t, rec); got != admin.LeaderAnswer(testLeader()) {
					t.Errorf("GET /v1/leader = %+v, want %+v", got, admin.LeaderAnswer(testLeader()))
				}
			}
		})
	}
}

// adminapi.Leader is cluster.Leader on the wire: the same JSON, so that
// either can decode the other's.
func TestLeaderWireIsClusterLeader(t *testing.T) {
	for _, l := range []*cluster.Leader{testLeader(), {NodeID: "a", Host: "h", Epoch: 1}} {
		want, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(admin.LeaderAnswer(l))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("adminapi.Leader JSON %s, cluster.Leader JSON %s", got, want)
		}
	}
}
