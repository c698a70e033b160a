package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Member is the record a node publishes about itself under MembersDir, and
// what `failoverd status` lists. Its JSON is the node's /v1/status answer
// (controller.Status) field for field: nodes and tools of earlier versions
// read these records, so the encoding never changes.
type Member struct {
	Cluster  string    `json:"cluster"`
	NodeID   string    `json:"node_id"`
	Host     string    `json:"host"`
	AdminURL string    `json:"admin_url,omitempty"`
	State    string    `json:"state"` // one of controller's states; "leader" only while promoted
	Role     string    `json:"role"`  // "leader" only while promoted, else "standby"
	Health   string    `json:"health"`
	Epoch    int64     `json:"epoch,omitempty"` // current or last leadership's fencing token
	Since    time.Time `json:"since"`           // when State last changed
	// Connected reports whether the node reached its coordination
	// service when it wrote the record. ZKConnected is the same value
	// under its earlier name, written for the readers of earlier versions
	// (deprecated: dropped in the next release; read Reachable()).
	Connected      bool    `json:"connected"`
	ZKConnected    bool    `json:"zk_connected"`
	LeaseRemaining float64 `json:"lease_remaining_seconds,omitempty"`
	LastError      string  `json:"last_error,omitempty"`
	Version        string  `json:"version"`
	// Instance is a random id of the failoverd process, new at every start:
	// it tells a node's own earlier session from another process using the
	// same node id.
	Instance string `json:"instance,omitempty"`
	// ServiceAddress is node.service_address, the host:port replicas and
	// clients use to reach this node's service (empty: not configured).
	ServiceAddress string `json:"service_address,omitempty"`
	// Following is the promoted leader this node's follow hook last
	// pointed its service at (node id; empty: none), FollowingEpoch its
	// epoch and FollowingSince when that run succeeded.
	Following      string    `json:"following,omitempty"`
	FollowingEpoch int64     `json:"following_epoch,omitempty"`
	FollowingSince time.Time `json:"following_since,omitzero"`
	// Priority is node.priority (0: the node never leads). nil: a member
	// of a version without priorities, which campaigns as priority 1.
	Priority *int `json:"priority,omitempty"`
	// Position is the node's replication position as service.position
	// last printed it (nil: unknown, or no position command), PositionAt
	// when the command first printed that value. The node rewrites the
	// record only when the value changes, and drops it as soon as a run
	// fails: while the record is there, the node confirms it every
	// interval.
	Position   *int64    `json:"position,omitempty"`
	PositionAt time.Time `json:"position_at,omitzero"`
	// NotFollowing says why the node, a standby, does not follow the
	// current promoted leader (empty: it does, or nothing to follow; a
	// node of an earlier version never sets it). See controller.Status.
	NotFollowing string `json:"not_following,omitempty"`
	// NotLeading says why the node does not lead now: a reason code (one
	// of controller's NotLeading* codes), a colon and the details (empty:
	// it leads, or a node of an earlier version). See controller.Status.
	NotLeading string `json:"not_leading,omitempty"`
	// Holds lists the nodes this node keeps out of its candidates after a
	// failed handover to them, "<node> until <RFC 3339 time>: <why>",
	// joined by "; " (empty: none). A leader's holds are why a held
	// standby is not handed the leadership.
	Holds string `json:"holds,omitempty"`
	// Paused is the cluster's pause as this node last saw it (nil: not
	// paused, or a node of a version without maintenance mode).
	Paused *Pause `json:"paused,omitempty"`
	// CooldownUntil is set while this node leads within
	// election.failover_cooldown of its automatic promotion: until then
	// it keeps its term although its health fails.
	CooldownUntil time.Time `json:"cooldown_until,omitzero"`
	// ConfigHash and ConfigLoadedAt identify the config file the node
	// runs and when it was loaded (empty: a version without reload).
	ConfigHash     string    `json:"config_hash,omitempty"`
	ConfigLoadedAt time.Time `json:"config_loaded_at,omitzero"`
}

// KnownMember is the record a node keeps of itself under KnownDir. Unlike
// its Member record it is persistent: when the node goes away (a crash, a
// stop) its Member record goes with its session, and this one stays, so
// `failoverd status` lists the node as down, with when it was last seen,
// until an operator forgets it (`failoverd forget`).
type KnownMember struct {
	NodeID   string `json:"node_id"`
	Host     string `json:"host"`
	AdminURL string `json:"admin_url,omitempty"`
	Instance string `json:"instance,omitempty"`
	// LastSeen is when the node last wrote the record (its own clock):
	// a live node rewrites it every RememberEvery.
	LastSeen time.Time `json:"last_seen"`
}

// RememberEvery is how often a live node rewrites its KnownMember record:
// a down node's LastSeen is at most this much before it went.
const RememberEvery = 30 * time.Second

// ErrMemberLive is ForgetMember's refusal: the node's member record
// exists (its daemon runs), so it is not gone.
var ErrMemberLive = errors.New("cluster: the member is live (its member record exists)")

// DecodeKnown decodes a stored KnownMember record; one that cannot be read
// is listed under id with no host, so that an operator can still forget
// it.
func DecodeKnown(id string, data []byte) KnownMember {
	var k KnownMember
	if json.Unmarshal(data, &k) != nil || k.NodeID == "" {
		return KnownMember{NodeID: id}
	}
	return k
}

// Reachable reports whether the node reached its coordination service when
// it wrote the record (a record of an earlier version has only
// ZKConnected).
func (m Member) Reachable() bool { return m.Connected || m.ZKConnected }

// MayLead reports whether the member's priority lets it lead (its health
// and state aside).
func (m Member) MayLead() bool { return m.Priority == nil || *m.Priority > 0 }

// HoldOn is what m's Holds says of node id, "until <time>: <why>" (false:
// m does not hold it).
func (m Member) HoldOn(id string) (string, bool) {
	for h := range strings.SplitSeq(m.Holds, "; ") {
		if rest, ok := strings.CutPrefix(h, id+" until "); ok {
			return "until " + rest, true
		}
	}
	return "", false
}

// LeaderPosition is the last replication position a promoted leader
// published (the LeaderPosition record). It is persistent: it outlives the
// leader, so that its successors can tell how far behind they are of what
// the dead leader had. Only a term writes it (guarded by the election
// entry), and never over a record of a later epoch.
type LeaderPosition struct {
	NodeID   string    `json:"node_id"`
	Epoch    int64     `json:"epoch"`
	Position int64     `json:"position"`
	At       time.Time `json:"at"` // when the leader's position command ran
}

// StateLeader is Member.State of a promoted node.
const StateLeader = "leader"

// MaxFailoverTimeout bounds how long a manual failover request keeps the
// other nodes out of the election (failover --timeout).
const MaxFailoverTimeout = 10 * time.Minute

// FailoverRequest is a manual failover request (the Failover record).
type FailoverRequest struct {
	To string `json:"to"`
	// Deadline is the requester's wall clock plus the timeout. Only nodes
	// of earlier versions use it; clocks of different hosts differ.
	Deadline time.Time `json:"deadline"`
	// TimeoutMS is how long the request stands, measured by every node on
	// its own monotonic clock from when it saw the request.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// ID tells requests apart (a new request may overwrite an old one).
	ID string `json:"id,omitempty"`
	By string `json:"by,omitempty"`
	// Reason is empty for an operator's request (failover --to) and names
	// why a node asked another to take over (ReasonPreferredPriority,
	// ReasonPreferredPosition).
	Reason string `json:"reason,omitempty"`
	// Done is set by the target once it is promoted (with its epoch): the
	// other nodes stop standing aside at once.
	Done  bool  `json:"done,omitempty"`
	Epoch int64 `json:"epoch,omitempty"`
}

// Reasons of the failover requests a node writes itself: when it wins the
// election while a better candidate waits (a higher priority, or a more
// advanced replication position), and when a running leader hands over to
// a standby of a higher priority (preemption).
const (
	ReasonPreferredPriority = "preferred_priority"
	ReasonPreferredPosition = "preferred_position"
)

// Key identifies a request: its ID, or for a request of an earlier version
// (no ID), its target and deadline.
func (r FailoverRequest) Key() string {
	if r.ID != "" {
		return r.ID
	}
	return r.To + "@" + r.Deadline.UTC().Format(time.RFC3339Nano)
}

// StandFor is how long a node that sees r now stands aside: the request's
// timeout, or for a request of an earlier version, what its deadline leaves
// by our clock; at most MaxFailoverTimeout. <= 0: not at all.
func (r FailoverRequest) StandFor(now time.Time) time.Duration {
	d := time.Duration(r.TimeoutMS) * time.Millisecond
	if r.TimeoutMS <= 0 {
		d = r.Deadline.Sub(now)
	}
	return min(d, MaxFailoverTimeout)
}

// Pause is the maintenance-mode record (Layout.Pause): while it exists no
// node promotes, demotes or fences on its own (a failing leader stays, no
// standby takes over, a restarted daemon leaves its service alone); an
// operator's failover --to and demote requests still work. Who paused,
// when and why are for status displays only.
type Pause struct {
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// MaxPauseReason bounds Pause.Reason in bytes: every node copies the pause
// into its member record and status.
const MaxPauseReason = 1024

// Check refuses a pause whose reason is longer than MaxPauseReason.
func (p Pause) Check() error {
	if len(p.Reason) > MaxPauseReason {
		return fmt.Errorf("the pause reason is %d bytes long; at most %d are allowed", len(p.Reason), MaxPauseReason)
	}
	return nil
}

// ClusterRecord is the Config record, created by the first node that joins
// a cluster. Nodes whose settings differ from it refuse to join: nodes of
// different election modes do not see each other's znodes and could both
// lead. failoverd rewrites it in two cases only: to give a record of an
// earlier version its ID (once, at the first join), and when failoverd
// migrate moves the cluster away (MovedTo).
type ClusterRecord struct {
	ElectionMode string `json:"election_mode"`
	// ID names this record, and with it the election it holds: random, set
	// when the record is created. A node remembers the ID it last ran in
	// (its home) and refuses to join a record with another one (Admit).
	ID string `json:"id,omitempty"`
	// EpochFloor is added to every epoch the backend gives a term of this
	// cluster: a cluster moved here from another coordination service
	// keeps its epochs above every epoch that service issued.
	EpochFloor int64 `json:"epoch_floor,omitempty"`
	// MovedFrom lists the IDs of the records this cluster was moved from,
	// the last move's last: nodes whose home is one of them may join this
	// one.
	MovedFrom []string `json:"moved_from,omitempty"`
	// MovedTo, set on a record the cluster was moved away from, is the ID
	// of the record it moved to: nobody joins this one any more.
	MovedTo string `json:"moved_to,omitempty"`
	// MovedToPlace names where the record MovedTo is, for the messages
	// of the nodes still configured for this one
	// ("etcd [https://10.0.0.7:2379] /failoverd/orders").
	MovedToPlace string `json:"moved_to_place,omitempty"`
	// ModeBeforeMove is ElectionMode before the record was marked moved:
	// the mark sets ElectionMode to MovedMode, which no version of
	// failoverd accepts (versions that know no MovedTo refuse it too).
	ModeBeforeMove string `json:"mode_before_move,omitempty"`
	// MovedAt is when the move was made (set with MovedFrom or MovedTo).
	MovedAt *time.Time `json:"moved_at,omitempty"`
}

// DuplicateIDError means another live failoverd process publishes the
// member record of our node id.
type DuplicateIDError struct {
	NodeID, Host, Instance string
}

func (e *DuplicateIDError) Error() string {
	return fmt.Sprintf("node id %q is already used by another running failoverd (host %q, instance %q): "+
		"refusing to join the election while it is alive; give every node its own node.id "+
		"(after a restart of this very node this clears once its previous ZooKeeper session expired)",
		e.NodeID, e.Host, e.Instance)
}

// ModeMismatchError means the cluster runs another election mode.
type ModeMismatchError struct {
	Mode, Cluster, Why string
}

func (e *ModeMismatchError) Error() string {
	return fmt.Sprintf("election.mode is %q but %s: refusing to join the election (nodes of different modes could both lead); "+
		"use the same election.mode on every node (to change it, stop every node and move the cluster to a new root or prefix with failoverd migrate; its record is %s)",
		e.Mode, e.Why, e.Cluster)
}

// SameMembers reports whether a and b hold the same records in the same
// order, equal in every field (their encoding, which is the record), for
// watches that deliver a list only when it changed: a change of any field,
// Epoch or Host alone included, is a change.
func SameMembers(a, b []Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ja, errA := json.Marshal(a[i])
		jb, errB := json.Marshal(b[i])
		if errA != nil || errB != nil || string(ja) != string(jb) {
			return false
		}
	}
	return true
}

// DecodeFailover decodes a stored failover request (nil: none, or
// unreadable, which keeps nobody out). Every backend decodes with it.
func DecodeFailover(data []byte) *FailoverRequest {
	var r FailoverRequest
	if data == nil || json.Unmarshal(data, &r) != nil || r.To == "" {
		return nil
	}
	return &r
}

// SameRequest reports whether a and b are equal in every field (nil: none),
// for watches that deliver a request only when it changed.
func SameRequest(a, b *FailoverRequest) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.To == b.To && a.Deadline.Equal(b.Deadline) && a.TimeoutMS == b.TimeoutMS &&
		a.ID == b.ID && a.By == b.By && a.Done == b.Done && a.Epoch == b.Epoch && a.Reason == b.Reason
}

// DecodePause decodes a stored pause record. An unreadable one is still a
// pause (its record exists), shown with what it held.
func DecodePause(data []byte) *Pause {
	var p Pause
	if err := json.Unmarshal(data, &p); err != nil {
		s := string(data)
		if len(s) > 80 {
			s = s[:80] + "..."
		}
		return &Pause{By: "unknown", Reason: fmt.Sprintf("unreadable pause record (%v): %q", err, s)}
	}
	return &p
}

// SamePause reports whether a and b are equal in every field (nil: none).
func SamePause(a, b *Pause) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.By == b.By && a.Reason == b.Reason && a.At.Equal(b.At)
}
