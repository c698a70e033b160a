package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
)

// failoverd_standby_not_following is 1 exactly while the status names a
// reason; alert rules use this name.
func TestStandbyNotFollowing(t *testing.T) {
	st := &fakeStatus{}
	_, reg := newTestMetrics(t, st.get)
	for _, tc := range []struct {
		status controller.Status
		want   string
	}{
		{controller.Status{State: controller.StateStandby}, "0"},
		{controller.Status{State: controller.StateStandby, Member: cluster.Member{NotFollowing: controller.NotFollowingStalled + ": position 9 unchanged"}}, "1"},
		{controller.Status{State: controller.StateOut, Member: cluster.Member{NotFollowing: controller.NotFollowingFailing + ": 3 failed runs"}}, "1"},
		{controller.Status{State: controller.StateLeader}, "0"},
	} {
		st.set(tc.status)
		want := `
# HELP failoverd_standby_not_following 1 while this node is a standby that does not follow the current promoted leader (its follow hook points the service at another leader or epoch, or fails, or its position stalled while the leader's advanced; the reason is in /v1/status not_following), else 0.
# TYPE failoverd_standby_not_following gauge
failoverd_standby_not_following ` + tc.want + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "failoverd_standby_not_following"); err != nil {
			t.Errorf("with status %+v: %v", tc.status, err)
		}
	}
}
