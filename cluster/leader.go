package cluster

import (
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
)

// Leader is the promoted leader of a cluster, as nodes (the follow hook,
// GET /v1/leader) and tools (failoverd leader) see it.
type Leader struct {
	NodeID         string    `json:"node_id"`
	Host           string    `json:"host"`
	ServiceAddress string    `json:"service_address,omitempty"` // node.service_address; empty when not configured
	AdminURL       string    `json:"admin_url,omitempty"`
	Epoch          int64     `json:"epoch"`
	Since          time.Time `json:"since"` // when it was promoted (its member record's Since)
	// Position is the leader's replication position as its member record
	// last showed it (nil: unknown, or no service.position), PositionAt
	// when its position command first printed it. Standbys compare their
	// own with it (Status.NotFollowing, Status.Lag).
	Position   *int64    `json:"position,omitempty"`
	PositionAt time.Time `json:"position_at,omitzero"`
}

// LeaderOf picks the promoted leader out of the breadcrumb (nil: absent)
// and the member records: the member in leader state whose node id and
// epoch are the breadcrumb's. Nobody else qualifies, so a node that is
// still fencing or promoting (its member record is not in leader state
// yet), a node whose promote failed, and a leader that a successor already
// took over from (the breadcrumb names the successor's epoch) are never
// returned, and after a graceful handoff (the breadcrumb is deleted with
// the term) there is no leader until the successor is promoted. nil: none.
func LeaderOf(bc *breadcrumb.Record, members []Member) *Leader {
	if bc == nil {
		return nil
	}
	for _, m := range members {
		if m.State == StateLeader && m.NodeID == bc.NodeID && m.Epoch == bc.Epoch {
			return &Leader{NodeID: m.NodeID, Host: m.Host, ServiceAddress: m.ServiceAddress,
				AdminURL: m.AdminURL, Epoch: m.Epoch, Since: m.Since, Position: m.Position, PositionAt: m.PositionAt}
		}
	}
	return nil
}

// Same reports whether a and b name the same leadership (nil: none).
func (a *Leader) Same(b *Leader) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.NodeID == b.NodeID && a.Epoch == b.Epoch
}

// Equal reports whether a and b are equal in every field (nil: none), for
// watches that deliver the leader whenever any of it changed (its position
// included: a standby tells a stalled replication by it).
func (a *Leader) Equal(b *Leader) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	samePos := a.Position == nil && b.Position == nil || a.Position != nil && b.Position != nil && *a.Position == *b.Position
	return a.Same(b) && a.Host == b.Host && a.ServiceAddress == b.ServiceAddress &&
		a.AdminURL == b.AdminURL && a.Since.Equal(b.Since) && samePos && a.PositionAt.Equal(b.PositionAt)
}
