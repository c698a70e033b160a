// Package breadcrumb is the record that names the active leader, and what a
// new leader decides from it.
//
// A new leader reads it before promoting: if it names another node, that
// node may still act and must be fenced first. The leader then writes its own
// record, atomically with a check that its election entry still exists, so a
// leader whose term is over can never overwrite it; writes are
// compare-and-set on the record's revision. A graceful leader deletes the
// breadcrumb after it demoted, under the same guard; a leader that crashed or
// could not demote leaves it behind so its successor fences it. How the
// record is stored and guarded is each coordination backend's business
// (cluster.Term); this package only encodes, decodes and judges it.
//
// The payload is small, versioned JSON, decoded strictly: anything that is
// not a valid version-1 record is an error (never trusted, never a panic),
// and the caller must refuse to promote until an operator clears it. Valid
// means every field, too: the node id, host and admin URL follow the config
// file's rules for them, so no NUL, control character or white space reaches
// a hook's environment, a fencer's argv or a URL.
package breadcrumb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/failoverd/failoverd/internal/ids"
)

// Version is the record format this package writes and accepts.
const Version = 1

// MaxSize bounds the znode data we are willing to decode.
const MaxSize = 4096

// Record names the active leader.
type Record struct {
	Version  int       `json:"version"`
	NodeID   string    `json:"node_id"`
	Host     string    `json:"host"`
	AdminURL string    `json:"admin_url,omitempty"`
	Epoch    int64     `json:"epoch"`
	Since    time.Time `json:"since"`
	// Instance is the random id of the failoverd process that wrote the
	// record (new at every start; absent in records of earlier versions).
	// It tells a leadership of this very process from one of an earlier
	// process or of another process using the same node id.
	Instance string `json:"instance,omitempty"`
	// ServiceAddress is the leader's node.service_address (host:port),
	// written only when configured: nodes of earlier versions decode
	// strictly and would call a record with it corrupt.
	ServiceAddress string `json:"service_address,omitempty"`
}

// ErrAbsent means there is no breadcrumb: nothing to fence.
var ErrAbsent = errors.New("breadcrumb: absent")

// ErrChanged means the breadcrumb is no longer at the revision it was read
// at: a leader rewrote it in between, so a delete at that revision left it
// in place.
var ErrChanged = errors.New("breadcrumb: changed since it was read")

// CorruptError means the breadcrumb exists but cannot be trusted.
type CorruptError struct {
	Reason string
	Data   []byte // at most 256 bytes of what was found
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("breadcrumb: unreadable (%s); clear it with 'failoverd breadcrumb clear' once the old leader is known to be down", e.Reason)
}

// Encode validates r and returns its JSON.
func Encode(r Record) ([]byte, error) {
	if r.Version == 0 {
		r.Version = Version
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("breadcrumb: record of %d bytes exceeds %d", len(b), MaxSize)
	}
	return b, nil
}

// Decode parses znode data strictly.
func Decode(b []byte) (Record, error) {
	corrupt := func(reason string) (Record, error) {
		return Record{}, &CorruptError{Reason: reason, Data: bytes.Clone(b[:min(len(b), 256)])}
	}
	if len(b) == 0 {
		return corrupt("empty")
	}
	if len(b) > MaxSize {
		return corrupt(fmt.Sprintf("%d bytes, more than %d", len(b), MaxSize))
	}
	// Peek at the version first so a future format gets a clear message.
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return corrupt("not JSON: " + err.Error())
	}
	if v.Version == nil {
		return corrupt("no version")
	}
	if *v.Version != Version {
		return corrupt(fmt.Sprintf("unknown version %d", *v.Version))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Record
	if err := dec.Decode(&r); err != nil {
		return corrupt(err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return corrupt("trailing data")
	}
	if err := r.validate(); err != nil {
		return corrupt(err.Error())
	}
	return r, nil
}

// validate applies the rules the config applies to the same values (package
// internal/ids): a record is written from this node's config, so a valid
// config always gives a valid record, and a reader can hand what it read to
// hooks and the shell fencer (environment variables, argv) and to the ssh
// and rpc fencers without further checks. A field that breaks them (a NUL
// in the node id, a newline in the host) makes the whole record corrupt:
// nothing in it can be trusted.
func (r Record) validate() error {
	switch {
	case r.Version != Version:
		return fmt.Errorf("version %d, want %d", r.Version, Version)
	case r.NodeID == "":
		return errors.New("node_id is empty")
	case r.Host == "":
		return errors.New("host is empty")
	case r.Epoch <= 0:
		return fmt.Errorf("epoch %d is not positive", r.Epoch)
	}
	if err := ids.CheckName(r.NodeID); err != nil {
		return fmt.Errorf("node_id %q is not a valid node id: %v", r.NodeID, err)
	}
	if !ids.ValidHost(r.Host) {
		return fmt.Errorf("host %q is not a host name or IP address", r.Host)
	}
	if r.AdminURL != "" {
		if err := ids.CheckHTTPURL(r.AdminURL); err != nil {
			return fmt.Errorf("admin_url %q: %v", r.AdminURL, err)
		}
	}
	if r.ServiceAddress != "" {
		if err := ids.CheckHostPort(r.ServiceAddress); err != nil {
			return fmt.Errorf("service_address %q: %v", r.ServiceAddress, err)
		}
	}
	if r.Instance != "" {
		if err := ids.CheckName(r.Instance); err != nil {
			return fmt.Errorf("instance %q is not a valid instance id: %v", r.Instance, err)
		}
	}
	return nil
}

// Verdict is what a new leader must do about the breadcrumb it read.
type Verdict int

// Verdicts.
const (
	NothingToFence Verdict = iota // absent, or it names us in this very term
	MustFence                     // it names another node, or us in an older term
	Refuse                        // unreadable: do not promote
)

func (v Verdict) String() string {
	return [...]string{"nothing_to_fence", "must_fence", "refuse"}[v]
}

// Assess decides from the outcome of Read. A record naming our node id in an
// older epoch means an earlier incarnation of us may still run its service:
// that is fenced like anybody else.
func Assess(r Record, readErr error, self string, epoch int64) Verdict {
	switch {
	case errors.Is(readErr, ErrAbsent):
		return NothingToFence
	case readErr != nil:
		return Refuse
	case r.NodeID == self && r.Epoch == epoch:
		return NothingToFence
	}
	return MustFence
}
