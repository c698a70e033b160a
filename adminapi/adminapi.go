// Package adminapi holds the wire types of failoverd's admin API that more
// than one package speaks: the admin server (package admin) answers with
// them, the rpc fencer (package fencer) sends and reads them, and tests of
// either decode them. It depends on the standard library only, so that
// neither side has to import the other.
//
// The JSON of every type here is part of failoverd's interface between
// nodes of different versions: fields may be added, never renamed or given
// another meaning.
package adminapi

import "time"

// Paths of the mutating endpoints.
const (
	// DemotePath is where a failoverd admin API accepts demote requests
	// (POST, bearer token).
	DemotePath = "/v1/demote"
	// CedePath is where it accepts cede requests (POST ?for=30s, bearer token).
	CedePath = "/v1/cede"
	// PausePath pauses the whole cluster (POST, bearer token, an optional
	// PauseRequest body): maintenance mode.
	PausePath = "/v1/pause"
	// ResumePath ends the cluster's pause (POST, bearer token).
	ResumePath = "/v1/resume"
	// ReloadPath reloads the daemon's config file (POST, bearer token).
	ReloadPath = "/v1/reload"
)

// ReloadAnswer is the answer to POST /v1/reload. A reload applies the
// whole file or nothing: Applied is false when the file is invalid
// (Invalid) or changes a key that needs a restart (Refused), and the
// daemon then keeps the config it runs.
type ReloadAnswer struct {
	Applied bool   `json:"applied"`
	NodeID  string `json:"node_id,omitempty"`
	// Changed lists the keys whose new values were applied (YAML paths);
	// with Applied false, the ones that would have been.
	Changed []string `json:"changed,omitempty"`
	// Refused lists the changed keys that need a restart, each as
	// "path: why".
	Refused []string `json:"refused,omitempty"`
	// Invalid lists the file's validation problems, each with its YAML
	// path.
	Invalid []string `json:"invalid,omitempty"`
	// ConfigHash and ConfigLoadedAt identify the config the daemon runs
	// after the request (the new one when Applied, else the old one).
	ConfigHash     string     `json:"config_hash,omitempty"`
	ConfigLoadedAt *time.Time `json:"config_loaded_at,omitempty"`
	// Error says why the reload failed when none of the above does.
	Error string `json:"error,omitempty"`
	// Warnings are the new file's validation warnings (valid, but
	// probably not meant), whether or not it was applied.
	Warnings []string `json:"warnings,omitempty"`
	// Notes say what an applied reload does beyond taking the new
	// settings: node.priority 0 on the leader hands its leadership over.
	Notes []string `json:"notes,omitempty"`
}

// MaxPauseBody bounds a PauseRequest body.
const MaxPauseBody = 64 << 10

// PauseRequest is the body of POST /v1/pause (an empty body is valid).
type PauseRequest struct {
	// Reason is shown by status next to who paused and since when.
	Reason string `json:"reason,omitempty"`
}

// PauseAnswer is the answer to POST /v1/pause and POST /v1/resume,
// refusals included (they carry only Error).
type PauseAnswer struct {
	// Paused says whether the cluster is paused after the request.
	Paused bool `json:"paused"`
	// Changed is false when the cluster already was as asked (pausing a
	// paused cluster keeps the first pause; resuming one that is not
	// paused does nothing).
	Changed bool `json:"changed"`
	// By, Reason and At describe the pause in force (pause only).
	By     string     `json:"by,omitempty"`
	Reason string     `json:"reason,omitempty"`
	At     *time.Time `json:"at,omitempty"`
	// Error says why the request was refused or failed.
	Error string `json:"error,omitempty"`
}

// LeaderPath is where every node answers who the promoted leader of its
// cluster is (GET, no token): 200 with a Leader, 503 with {"error": "..."}
// when there is none or the node cannot tell.
const LeaderPath = "/v1/leader"

// MaxDemoteBody bounds demote request and response bodies; both are a few
// dozen bytes of JSON, so anything larger is refused rather than read.
const MaxDemoteBody = 64 << 10

// DemoteRequest is the body of POST /v1/demote. An empty body is a valid
// request (an operator's bare POST).
type DemoteRequest struct {
	// Reason is for the demoted node's log.
	Reason string `json:"reason"`
	// Epoch is the fencing token of the leadership being ended.
	Epoch int64 `json:"epoch"`
	// From is the node id of the node asking, the one about to take over.
	From string `json:"from"`
	// Target is the node id the caller means to demote. A daemon that is
	// another node refuses the request without acting on it (a breadcrumb
	// whose admin URL reaches the wrong daemon, loopback most often, must
	// not make that daemon step down). Empty (an operator's bare POST, or a
	// fencer from before this field) is accepted.
	Target string `json:"target,omitempty"`
}

// DemoteResponse is the answer to POST /v1/demote, refusals included (they
// carry only Error, and NodeID when the refusal is about who answers).
type DemoteResponse struct {
	// Demoted is true only when the service no longer acts as primary.
	Demoted bool `json:"demoted"`
	// NodeID is the answering node's id, so a caller can tell that it
	// demoted the node it meant to. The rpc fencer requires it.
	NodeID string `json:"node_id"`
	// Epoch is the answering daemon's current or last leadership epoch, 0 if
	// it has led no term since it started. The rpc fencer requires it to be
	// at least the epoch being fenced (see fencer.RPC.Fence).
	Epoch int64 `json:"epoch"`
	// Error says why the node was not demoted.
	Error string `json:"error,omitempty"`
}

// CedeAnswer is the answer to POST /v1/cede.
type CedeAnswer struct {
	// Ceded is true when the node accepted to stay out of the election.
	Ceded bool `json:"ceded"`
	// NodeID is the answering node's id.
	NodeID string `json:"node_id,omitempty"`
	// For is the accepted duration, as Go writes it ("30s").
	For string `json:"for,omitempty"`
	// Error says why the request was refused or failed.
	Error string `json:"error,omitempty"`
}

// Leader is the body of GET /v1/leader: the cluster's promoted leader
// (package cluster's Leader, whose JSON it is: the member record in leader
// state whose node id and epoch are the breadcrumb's). failoverd leader
// --json prints the same object.
type Leader struct {
	NodeID string `json:"node_id"`
	Host   string `json:"host"`
	// ServiceAddress is the leader's node.service_address, the host:port
	// its clients and replicas use; empty when it has none configured.
	ServiceAddress string `json:"service_address,omitempty"`
	AdminURL       string `json:"admin_url,omitempty"`
	// Epoch is the leadership's fencing token; it only grows.
	Epoch int64 `json:"epoch"`
	// Since is when the leader was promoted (RFC 3339).
	Since time.Time `json:"since"`
}

// RoleAnswer is the body of GET /leader and GET /standby, which load
// balancers route by (200 or 503); the body is for people.
type RoleAnswer struct {
	NodeID string `json:"node_id"`
	State  string `json:"state"` // the controller's state ("leader", "standby", ...)
	Health string `json:"health"`
	Epoch  int64  `json:"epoch"`
	// NotFollowing says why a standby does not follow the current leader
	// (GET /standby answers 503 then); empty when it does.
	NotFollowing string `json:"not_following,omitempty"`
	// Lag is, for GET /standby?max_lag=N, how far this node's position is
	// behind the leader's; LagUnknown says why it is not known (503).
	Lag        *int64 `json:"lag,omitempty"`
	LagUnknown string `json:"lag_unknown,omitempty"`
}
