// Package cluster owns failoverd's layout in the coordination service: where
// every record of a cluster lives (Layout), what the records are (Member,
// FailoverRequest, ClusterRecord), their rules (Store, and the Term it
// makes of a backend's), the refusals of the join checks, and the
// coordination contract (contract.go) with the primitives a backend
// provides (kv.go). Backends (cluster/zkcluster, cluster/etcdcluster)
// implement only the primitives and their elections; no other package
// spells a path.
package cluster

import "path"

// Layout names the records of one cluster under a root, for example
// /failoverd/orders/breadcrumb for Root "/failoverd" and Cluster "orders".
// The names are part of the on-disk format: nodes of earlier versions and
// operators' tools read the same paths, so they never change.
type Layout struct {
	Root    string // e.g. /failoverd
	Cluster string // e.g. orders
}

// Dir is the cluster's directory; every other record lives below it.
func (l Layout) Dir() string { return path.Join(l.Root, l.Cluster) }

// ElectionDir is where the candidates of the election live.
func (l Layout) ElectionDir() string { return l.child("election") }

// MembersDir is where every node publishes its Member record.
func (l Layout) MembersDir() string { return l.child("members") }

// Member is the record of node id (under MembersDir).
func (l Layout) Member(id string) string { return path.Join(l.MembersDir(), id) }

// KnownDir is where every node keeps its KnownMember record, which
// outlives its session: the members that went away stay listed.
func (l Layout) KnownDir() string { return l.child("known") }

// Known is the KnownMember record of node id (under KnownDir).
func (l Layout) Known(id string) string { return path.Join(l.KnownDir(), id) }

// Failover holds the manual failover request (FailoverRequest).
func (l Layout) Failover() string { return l.child("failover") }

// Breadcrumb names the active leader (breadcrumb.Record).
func (l Layout) Breadcrumb() string { return l.child("breadcrumb") }

// LeaderPosition holds the last position the promoted leader published
// (LeaderPosition); persistent, it survives the leader.
func (l Layout) LeaderPosition() string { return l.child("leader_position") }

// Config holds the cluster record (ClusterRecord).
func (l Layout) Config() string { return l.child("config") }

// History holds the cluster's leadership changes (a JSON list of
// HistoryEntry, oldest first).
func (l Layout) History() string { return l.child("history") }

// Pause holds the maintenance-mode record (Pause); while it exists the
// cluster is paused: no automatic promotion, demotion or fencing.
func (l Layout) Pause() string { return l.child("pause") }

// Protected lists the records nobody but failoverd may change (zk.Config's
// Protect): the cluster directory and what lives in it that could mislead a
// node — the breadcrumb names the admin URL the fencer sends its token to,
// and a forged leader position would keep every candidate from promoting
// under election.max_lag, the history is what an operator reads back, and
// the pause record stops every automatic failover.
// The directories above them are checked by the backend itself.
func (l Layout) Protected() []string {
	return []string{l.Dir(), l.ElectionDir(), l.MembersDir(), l.Failover(), l.Breadcrumb(), l.LeaderPosition(), l.History(), l.Pause()}
}

func (l Layout) child(name string) string { return path.Join(l.Dir(), name) }
