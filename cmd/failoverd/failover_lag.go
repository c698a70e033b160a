package main

import (
	"fmt"

	"github.com/failoverd/failoverd/cluster"
)

// failoverLagRefusal says why `failoverd failover --to` refuses target
// under election.max_lag ("": it does not). The daemons promote the target
// of an operator's request whatever its position (the operator is in
// charge, and it is how to get a leader when every candidate lags), so the
// CLI is where a lagging target is caught: more than maxLag behind the
// last position a leader published or behind the most advanced node that
// may lead (the live leader's included), or its position unknown while
// others publish theirs. --force skips the check.
func failoverLagRefusal(maxLag *int64, target cluster.Member, v clusterView) string {
	if maxLag == nil {
		return ""
	}
	var ref *int64
	var refWhat string
	if lp := v.LeaderPosition; lp != nil {
		p := lp.Position
		ref, refWhat = &p, fmt.Sprintf("the last leader position (%s, epoch %d)", lp.NodeID, lp.Epoch)
	}
	published := false
	for _, m := range v.Members {
		if m.Position == nil {
			continue
		}
		published = true
		if m.NodeID != target.NodeID && m.MayLead() && m.Health == "healthy" && (ref == nil || *m.Position > *ref) {
			p := *m.Position
			ref, refWhat = &p, "the position of "+m.NodeID
		}
	}
	switch {
	case !published:
		return "" // no node publishes a position: the rule is off, as in the daemons
	case target.Position == nil:
		return fmt.Sprintf("the position of %s is unknown while election.max_lag is set", target.NodeID)
	case ref != nil && *ref-*target.Position > *maxLag:
		return fmt.Sprintf("%s is at position %d, %d behind %s (%d), more than election.max_lag (%d)",
			target.NodeID, *target.Position, *ref-*target.Position, refWhat, *ref, *maxLag)
	}
	return ""
}
