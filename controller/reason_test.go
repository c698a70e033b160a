package controller

import (
	"errors"
	"fmt"
	"testing"

	"github.com/failoverd/failoverd/election"
)

// Every end cause and every elector sentinel has its FAILOVERD_REASON, also
// when wrapped.
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
		{election.ErrLeaseExpired, "lease_expired"},
		{fmt.Errorf("%w: %w", election.ErrLeaseExpired, election.ErrTimeoutShrunk), "lease_expired"},
		{election.ErrSessionExpired, "session_expired"},
		{fmt.Errorf("x: %w", election.ErrNodeDeleted), "znode_deleted"},
		{election.ErrResigned, "ceded"},
		{election.ErrStopped, "shutdown"},
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
