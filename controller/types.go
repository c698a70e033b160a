package controller

import (
	"bytes"
	"encoding/json"
	"strconv"

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

// Status is one node's view of itself, served on /v1/status. The member
// record the node publishes (memberOf) is the same answer field for field,
// so Status is that record, cluster.Member, with two fields a node always
// has held typed: State (the record's State is its string) and Priority
// (the record's is nil for a node of a version without priorities). The
// embedded Member's own State and Priority stay unused: memberOf fills
// the record's from these.
//
// Of Member's fields: NotFollowing says why this node, a standby (state
// standby or out), does not follow the current promoted leader: its
// follow hook last pointed the service at another leader or epoch, or its
// runs fail, or its position stalled while the leader's advanced; it
// starts with one of the NotFollowing* reasons, then a colon and the
// details (empty: it follows, or nothing to follow). NotLeading says why
// it does not lead now (whynot.go), one of the NotLeading* codes, a colon
// and the details (empty: it leads). Following is empty as well while the
// follow hook is parked after its no-leader run. Connected is whether the
// coordination service is reachable now, ZKConnected always the same.
//
// The body's field order predates Status being built from Member, whose
// record orders some fields otherwise: MarshalJSON keeps both encodings.
type Status struct {
	cluster.Member
	State State `json:"state"`
	// Priority is node.priority: 0 never campaigns, so never leads.
	Priority int `json:"priority"`
}

// statusOrder is the order of the /v1/status body's fields. Tools of
// earlier versions read the body, so it keeps its bytes; a Member field
// not listed here comes after these, in Member's order.
var statusOrder = []string{
	"cluster", "node_id", "host", "admin_url", "state", "role", "health", "epoch", "since",
	"connected", "zk_connected", "lease_remaining_seconds", "last_error", "version", "instance",
	"service_address", "priority", "following", "following_epoch", "following_since",
	"paused", "cooldown_until", "position", "position_at", "not_following",
	"config_hash", "config_loaded_at", "not_leading", "holds",
}

// MarshalJSON encodes s as the member record it publishes, its own
// ZKConnected kept, with the fields in statusOrder.
func (s Status) MarshalJSON() ([]byte, error) {
	m := memberOf(s)
	m.ZKConnected = s.ZKConnected
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the caller's encoder escapes HTML, or not
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return reorderObject(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), statusOrder)
}

// reorderObject rewrites the JSON object obj with the keys of order
// first, in that order, then the others in obj's order. The values keep
// their bytes.
func reorderObject(obj []byte, order []string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, err
	}
	var keys []string
	vals := make(map[string]json.RawMessage)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		keys = append(keys, k)
		vals[k] = v
	}
	out := make([]byte, 0, len(obj))
	out = append(out, '{')
	add := func(k string) {
		v, ok := vals[k]
		if !ok {
			return
		}
		delete(vals, k)
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = strconv.AppendQuote(out, k) // tag names: no character JSON quotes otherwise
		out = append(out, ':')
		out = append(out, v...)
	}
	for _, k := range order {
		add(k)
	}
	for _, k := range keys {
		add(k)
	}
	return append(out, '}'), nil
}

// MayLead reports whether the node's priority lets it lead (its health
// and state aside). It stands in for Member's, which reads the embedded
// Priority that Status leaves unset.
func (s Status) MayLead() bool { return memberOf(s).MayLead() }

// Promoted reports whether the local service is (being treated as) primary.
func (s Status) Promoted() bool { return s.State == StateLeader }
