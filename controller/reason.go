package controller

import (
	"errors"

	"github.com/failoverd/failoverd/cluster"
)

// endCause is why the controller ended a candidacy (and with it a term):
// the cause of the candidacy's context, which the term's context inherits,
// so the reason a leadership ended travels with its end.
type endCause struct{ label string }

func (e *endCause) Error() string { return "controller: " + e.label }

// Why the controller leaves the election; the labels are FAILOVERD_REASON
// values and metric labels.
var (
	causeShutdown  = &endCause{"shutdown"}
	causeUnhealthy = &endCause{"unhealthy"}
	causeOperator  = &endCause{"operator_demote"}
	causeCeded     = &endCause{"ceded"}
	causeFailover  = &endCause{"failover_handoff"}
	causeStuck     = &endCause{"hook_unkillable"}
	causeRefused   = &endCause{"join_refused"}
	// causeBackoff ends a term that promoted nothing (or whose
	// promote_failed demote already ran): never a hook's reason.
	causeBackoff = &endCause{"takeover_failed"}
	// causeNeverLead keeps a node of priority 0 out of the election: it
	// never campaigns (it still checks health, follows and publishes).
	causeNeverLead = &endCause{"priority_zero"}
	// causeVeto gives back a term whose pre_promote hook vetoed the
	// promotion (then the node backs off like after a failed takeover).
	causeVeto = &endCause{"pre_promote_veto"}
)

// Reasons that are not end causes.
const (
	reasonStartup   = "startup"
	reasonElected   = "elected"
	reasonFencePrev = "fence_previous_term"
	reasonPromote   = "promote_failed"
)

// lossReason names why a term ended, from its context's cause: one of
// ours, or one of the cluster's (which the backend's elector translates
// its own reasons into).
func lossReason(cause error) string {
	var ec *endCause
	switch {
	case errors.As(cause, &ec):
		return ec.label
	case errors.Is(cause, cluster.ErrLeaseExpired): // also a session timeout the lease no longer fits
		return "lease_expired"
	case errors.Is(cause, cluster.ErrSessionExpired):
		return "session_expired"
	case errors.Is(cause, cluster.ErrEntryDeleted):
		return "znode_deleted"
	case errors.Is(cause, cluster.ErrStopped):
		return causeShutdown.label
	}
	return "unknown"
}

// graceful reports whether a leadership end lets us delete the breadcrumb
// (after a successful demote): the successor then needs no fencing.
func graceful(reason string) bool {
	return reason == causeShutdown.label || reason == causeCeded.label || reason == causeFailover.label || reason == causeNeverLead.label
}
