package admin_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/internal/secret"
)

// GET /standby: 503 for a standby that does not follow the leader, and
// with ?max_lag=N for one more than N behind the leader's position, or
// whose lag is unknown; 400 for a bad max_lag.
func TestStandbyEndpointFollowingAndLag(t *testing.T) {
	pos := func(n int64) *int64 { return &n }
	standby := func(p *int64, notFollowing string) controller.Status {
		s := withState(controller.StateStandby, "healthy")
		s.Position, s.NotFollowing = p, notFollowing
		return s
	}
	leaderAt := func(p *int64) admin.LeaderSource {
		l := testLeader()
		l.Position = p
		return fakeLeaders{leader: l}
	}
	for _, tc := range []struct {
		name     string
		status   controller.Status
		leaders  admin.LeaderSource
		query    string
		wantCode int
		wantBody string // substring
	}{
		{"following", standby(pos(90), ""), leaderAt(pos(100)), "", 200, `"state":"standby"`},
		{"not following", standby(pos(90), "position_stalled: position 90 unchanged"), leaderAt(pos(100)), "", 503,
			`"not_following":"position_stalled: position 90 unchanged"`},
		{"within max_lag", standby(pos(90), ""), leaderAt(pos(100)), "?max_lag=10", 200, `"lag":10`},
		{"ahead of the leader's record", standby(pos(120), ""), leaderAt(pos(100)), "?max_lag=0", 200, `"lag":0`},
		{"beyond max_lag", standby(pos(90), ""), leaderAt(pos(100)), "?max_lag=9", 503, `"lag":10`},
		{"max_lag, not following", standby(pos(100), "follow_failing: 2 failed runs"), leaderAt(pos(100)), "?max_lag=5", 503, `"lag":0`},
		{"own position unknown", standby(nil, ""), leaderAt(pos(100)), "?max_lag=1000", 503, `"lag_unknown":"this node's position is unknown"`},
		{"leader's position unknown", standby(pos(90), ""), leaderAt(nil), "?max_lag=1000", 503, `"lag_unknown":"the leader's position is unknown"`},
		{"no leader", standby(pos(90), ""), fakeLeaders{}, "?max_lag=1000", 503, `"lag_unknown":"no leader"`},
		{"cannot tell", standby(pos(90), ""), fakeLeaders{err: errors.New("etcd unreachable")}, "?max_lag=1000", 503, `cannot tell who leads`},
		{"no leader source", standby(pos(90), ""), nil, "?max_lag=1000", 503, `does not know the leader`},
		{"bad max_lag", standby(pos(90), ""), leaderAt(pos(100)), "?max_lag=-1", 400, `max_lag must be a non-negative integer`},
		{"empty max_lag", standby(pos(90), ""), leaderAt(pos(100)), "?max_lag=", 400, `max_lag must be a non-negative integer`},
		{"leader with max_lag", leaderStatus(), leaderAt(pos(100)), "?max_lag=1000", 503, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Token: secret.Secret(testToken)},
				admin.Deps{Node: &fakeNode{status: tc.status}, Leaders: tc.leaders})
			if err != nil {
				t.Fatal(err)
			}
			rec := do(t, s.Handler(), "GET", admin.StandbyPath+tc.query, "")
			if rec.Code != tc.wantCode {
				t.Fatalf("GET /standby%s = %d, want %d; body %q", tc.query, rec.Code, tc.wantCode, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("body = %q, want it to contain %q", rec.Body, tc.wantBody)
			}
			if tc.wantCode != 400 {
				if got := decode[adminapi.RoleAnswer](t, rec); got.NodeID != tc.status.NodeID || got.NotFollowing != tc.status.NotFollowing {
					t.Errorf("answer %+v, want node %s not following %q", got, tc.status.NodeID, tc.status.NotFollowing)
				}
			}
		})
	}
}
