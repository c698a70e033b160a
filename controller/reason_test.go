package controller

import (
	"errors"
	"fmt"
	"testing"

	"github.com/failoverd/failoverd/cluster"
)

// Every end cause and every cluster end-of-term sentinel has its
// FAILOVERD_REASON, also when wrapped (zkcluster's
// TestElectionCausesTranslated checks that each of election's reasons
// arrives as one of these).
func TestReasonLabels(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{causeShutdown, "shutdown"},
		{causeUnhealthy, "unhealthy"},
		{causeOperator, "operator_demote"},
		{causeCeded, "ceded"},
		{causeFailover, "failover_handoff"},
		{causeStuck, "hook_unkillable"},
		{causeRefused, "join_refused"},
		{causeBackoff, "takeover_failed"},
		{cluster.ErrLeaseExpired, "lease_expired"},
		{fmt.Errorf("x: %w", cluster.ErrLeaseExpired), "lease_expired"},
		{cluster.ErrSessionExpired, "session_expired"},
		{fmt.Errorf("x: %w", cluster.ErrEntryDeleted), "znode_deleted"},
		{cluster.ErrStopped, "shutdown"},
		{cluster.ErrReleased, "unknown"},
		{errors.New("other"), "unknown"},
		{nil, "unknown"},
	} {
		if got := lossReason(tc.cause); got != tc.want {
			t.Errorf("lossReason(%v) = %q, want %q", tc.cause, got, tc.want)
		}
	}
	for _, r := range []string{"shutdown", "ceded", "failover_handoff"} {
		if !graceful(r) {
			t.Errorf("%s not graceful", r)
		}
	}
	for _, r := range []string{"unhealthy", "operator_demote", "lease_expired", "promote_failed", "hook_unkillable", "join_refused", "unknown"} {
		if graceful(r) {
			t.Errorf("%s graceful: the breadcrumb would go without the successor fencing", r)
		}
	}
}
