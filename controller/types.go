package controller

import (
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// State is where the controller is in its cycle.
type State string

// Controller states.
const (
	StateInitializing State = "initializing" // startup: demoting the local service once
	StateOut          State = "out"          // not in the election (unhealthy, ceded, demoted by operator)
	StateStandby      State = "standby"      // healthy, in the election, not leader
	StateFencing      State = "fencing"      // elected: reading the breadcrumb, fencing the old leader
	StatePromoting    State = "promoting"    // elected and fenced: running the promote hook
	StateLeader       State = "leader"       // promoted; the service acts as primary
	StateDemoting     State = "demoting"     // running the demote hook
	StateStopped      State = "stopped"
)

// AllStates lists every state, for metrics.
var AllStates = []State{StateInitializing, StateOut, StateStandby, StateFencing, StatePromoting, StateLeader, StateDemoting, StateStopped}

// Status is one node's view of itself; it is served on /v1/status and, as
// Member, published in ZooKeeper.
type Status struct {
	Cluster  string    `json:"cluster"`
	NodeID   string    `json:"node_id"`
	Host     string    `json:"host"`
	AdminURL string    `json:"admin_url,omitempty"`
	State    State     `json:"state"`
	Role     string    `json:"role"` // "leader" only while promoted, else "standby"
	Health   string    `json:"health"`
	Epoch    int64     `json:"epoch,omitempty"` // current or last leadership's fencing token
	Since    time.Time `json:"since"`           // when State last changed
	// Connected: the coordination service is reachable now. ZKConnected
	// is the same value under its earlier name (deprecated: dropped in
	// the next release).
	Connected      bool    `json:"connected"`
	ZKConnected    bool    `json:"zk_connected"`
	LeaseRemaining float64 `json:"lease_remaining_seconds,omitempty"`
	LastError      string  `json:"last_error,omitempty"`
	Version        string  `json:"version"`
	// Instance is a random id of the failoverd process, new at every start:
	// it tells a node's own earlier session from another process using the
	// same node id.
	Instance string `json:"instance,omitempty"`
	// ServiceAddress is node.service_address (empty: not configured).
	ServiceAddress string `json:"service_address,omitempty"`
	// Priority is node.priority: 0 never campaigns, so never leads.
	Priority int `json:"priority"`
	// Following is the promoted leader the follow hook last pointed the
	// service at (its node id; empty: none yet, parked after the no-leader
	// run, or no follow hook), FollowingEpoch that leader's epoch and
	// FollowingSince when that run succeeded.
	Following      string    `json:"following,omitempty"`
	FollowingEpoch int64     `json:"following_epoch,omitempty"`
	FollowingSince time.Time `json:"following_since,omitzero"`
	// Paused is the cluster's pause as this node last saw it (nil: not
	// paused): no automatic promotion, demotion or fencing.
	Paused *cluster.Pause `json:"paused,omitempty"`
	// CooldownUntil is set while this node leads within its failover
	// cooldown: until then an unhealthy health check does not end it.
	CooldownUntil time.Time `json:"cooldown_until,omitzero"`
	// Position is the service's replication position as service.position
	// last printed it (nil: unknown, or no position command), PositionAt
	// when the command first printed that value (a failing command makes
	// it unknown at once, so a shown position is confirmed every interval).
	Position   *int64    `json:"position,omitempty"`
	PositionAt time.Time `json:"position_at,omitzero"`
	// NotFollowing says why this node, a standby (state standby or out),
	// does not follow the current promoted leader: its follow hook last
	// pointed the service at another leader or epoch, or its runs fail,
	// or its position stalled while the leader's advanced. It starts with
	// one of the NotFollowing* reasons, then a colon and the details.
	// Empty: it follows, or nothing to follow (it leads, no leader known).
	NotFollowing string `json:"not_following,omitempty"`
	// ConfigHash is the start of the SHA-256 of the config file this
	// node runs, ConfigLoadedAt when it was loaded (at start or by the
	// last reload that applied).
	ConfigHash     string    `json:"config_hash,omitempty"`
	ConfigLoadedAt time.Time `json:"config_loaded_at,omitzero"`
	// NotLeading says why this node does not lead now (whynot.go): one of
	// the NotLeading* codes, a colon and the details. Empty: it leads.
	NotLeading string `json:"not_leading,omitempty"`
	// Holds lists the nodes this node keeps out of its candidates after a
	// failed handover to them (cluster.Member.Holds).
	Holds string `json:"holds,omitempty"`
}

// Promoted reports whether the local service is (being treated as) primary.
func (s Status) Promoted() bool { return s.State == StateLeader }
