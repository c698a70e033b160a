package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
)

// A node's home is the cluster record it last ran in, by ID: the daemon
// keeps it on its own disk (node.state_dir) with the highest epoch it saw.
// A cluster record names an election; a node configured to run in another
// one (another coordination service, another ensemble, another root or
// prefix) would start a second election beside the first, find no
// breadcrumb there, and promote while the first one's leader still acts.
// The join checks therefore admit a node only to its home's record, or to
// the record a checked move (failoverd migrate) made from it.

// MovedMode is the election mode of a record marked moved: no node of any
// version joins it.
const MovedMode = "moved"

// NewRecordID returns a random cluster record ID.
func NewRecordID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("cluster: no randomness for a record id: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// MovedError is the join checks' refusal of a node whose home is another
// cluster record than the one its configuration points at, or of a record
// the cluster was moved away from.
type MovedError struct {
	// Home is the record ID the node last ran in ("" for a record that
	// moved away, whatever the node's home).
	Home string
	// Where is the path (ZooKeeper) or key (etcd) of the cluster record
	// the configuration points at.
	Where string
	// Found is that record's ID ("": there is none); MovedTo is set when
	// the record says the cluster moved away, MovedToPlace where to.
	Found, MovedTo, MovedToPlace string
}

func (e *MovedError) Error() string {
	switch {
	case e.MovedTo != "":
		to := "the record with id " + e.MovedTo
		if e.MovedToPlace != "" {
			to = fmt.Sprintf("%s (record %s)", e.MovedToPlace, e.MovedTo)
		}
		return fmt.Sprintf("the cluster record at %s (id %s) says the cluster moved to %s: "+
			"refusing to join an election nobody else runs; point this node's configuration at the coordination "+
			"service the cluster moved to (docs/operations.md, \"Moving a cluster\")",
			e.Where, e.Found, to)
	case e.Found == "":
		return fmt.Sprintf("this node last ran in the cluster record with id %s, but the coordination service it is "+
			"configured for has none at %s: "+
			"refusing to start a second election beside the one this node left (both could promote); "+
			"to move the cluster here, stop failoverd on every node and run failoverd migrate "+
			"(docs/operations.md, \"Moving a cluster\")", e.Home, e.Where)
	default:
		return fmt.Sprintf("this node last ran in the cluster record with id %s, but the one at %s has id %s: "+
			"refusing to join another cluster's election (both could promote); point this node's configuration "+
			"back at its own cluster, or move the cluster with failoverd migrate "+
			"(docs/operations.md, \"Moving a cluster\")", e.Home, e.Where, e.Found)
	}
}

// Admit decides whether a node whose home is home ("": none remembered)
// may join the cluster whose record is r (nil: there is none yet), at path
// or key where, in election mode mode. It returns nil, a *MovedError or a
// *ModeMismatchError. Every backend's CheckJoin decides with it; a backend
// creates a missing record only when home is "" (a node new to every
// cluster), since a node that ran elsewhere must not start an election of
// its own.
func Admit(r *ClusterRecord, where, mode, home string) error {
	if r == nil {
		if home == "" {
			return nil
		}
		return &MovedError{Home: home, Where: where}
	}
	if r.MovedTo != "" {
		return &MovedError{Where: where, Found: r.ID, MovedTo: r.MovedTo, MovedToPlace: r.MovedToPlace}
	}
	if home != "" && r.ID != home && !slices.Contains(r.MovedFrom, home) {
		return &MovedError{Home: home, Where: where, Found: r.ID}
	}
	if r.ElectionMode == "" {
		return &ModeMismatchError{Mode: mode, Cluster: where, Why: fmt.Sprintf("the cluster record %s names no election mode", where)}
	}
	if r.ElectionMode != mode {
		return &ModeMismatchError{Mode: mode, Cluster: where, Why: fmt.Sprintf("the cluster record %s says %q", where, r.ElectionMode)}
	}
	return nil
}

// Carried is what a move of a cluster to another coordination service
// (failoverd migrate) copies from the old place, as stored (nil: absent):
// the breadcrumb, so that the first leader there fences the old one; the
// history; and the pause.
type Carried struct {
	Breadcrumb, History, Pause []byte
}

// Names lists the records c holds, for messages.
func (c Carried) Names() []string {
	var out []string
	for _, r := range []struct {
		name string
		data []byte
	}{{"breadcrumb", c.Breadcrumb}, {"history", c.History}, {"pause", c.Pause}} {
		if r.data != nil {
			out = append(out, r.name)
		}
	}
	return out
}
