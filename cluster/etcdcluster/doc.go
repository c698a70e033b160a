// Package etcdcluster keeps failoverd's cluster records in etcd: the
// coordination contract of package cluster (Elector, Records, Term) on
// etcd's keys, leases and transactions. The keys are cluster.Layout's
// paths (for example /failoverd/orders/breadcrumb).
//
// # Sessions
//
// A Conn keeps one lease per daemon session, granted with the configured
// TTL (5s by default; etcd may grant more, and the granted TTL counts) and
// renewed every third of it. The member record, the election key and a
// failover request the node wrote are bound to the lease: they go when it
// goes. A lease that is lost (etcd answers that it is gone, or no renewal
// was answered before the deadline below) ends the session and every term
// won on it; the next session has a new lease, new keys, and so a new
// epoch.
//
// # Election
//
//   - Fair: every candidate puts c_<lease id> under the election prefix in
//     one transaction "create revision = 0", bound to its lease. Candidates
//     are ordered by create revision; each watches only the key created
//     last before its own (its predecessor) until it is deleted, so a
//     change wakes one candidate.
//   - Unfair: whoever creates "lock" in a transaction "create revision = 0"
//     leads; everyone else watches it and races when it goes.
//
// The epoch is the winning key's create revision. etcd's revisions are
// global and every term wins with a key created after the previous
// winner's was (the previous key is deleted before the new one is oldest
// or created), so epochs strictly increase across all terms of a cluster;
// an elector also refuses an epoch not above its last one. A win is
// checked against a linearizable read: the fair candidate's transaction
// that finds no predecessor also compares its own key's create revision,
// and the unfair put carries the lease, which fails when the lease is
// gone. (etcd's concurrency.Election can return from Campaign as leader
// after its session's lease expired; this package never reports a win it
// has not read.)
//
// Every write a term makes is one transaction comparing the term's key's
// create revision with the epoch (the key still exists: this term still
// holds it) and, for records written at a revision, the record's mod
// revision (cluster.Revision; the zero Revision compares create revision
// = 0). Every watch is opened with clientv3.WithRequireLeader; every watch
// loop reads, delivers, and watches from the revision after its read, and
// reads again after any event or failure (compaction, a member without a
// leader), so it never depends on having seen every change.
//
// # The lease argument
//
// Term.Expiry is D = s + TTL - TTL/20, where s is the send time, on this
// host's monotonic clock, of the newest grant or keepalive of the
// session's lease that etcd answered, and TTL the TTL etcd granted in that
// answer. Each keepalive is one request on a stream of its own, so an
// answer is known to belong to the request sent at s.
//
// Only the etcd leader's lessor expires leases, and it answers a
// keepalive only after renewing the lease to expire TTL after it handled
// the request (a follower forwards keepalives to the leader and relays the
// answer; a grant starts the TTL when the leader applies it). The leader
// handles the request after we sent it, so the lease cannot expire before
// s + TTL by the leader's clock. Our election key is bound to the lease:
// until the lease expires it goes only by an explicit delete (ours, after
// the term or in Finish, or an operator's, which our watch on the key
// reports). Another candidate wins only once our key is gone (fair: it is
// older than theirs; unfair: it is the lock). So no other term begins
// before s + TTL on the etcd leader's clock, and TTL/20 covers clock rates
// that differ by up to 1/20 over one TTL. Renewals answered before the
// win count too: the key of the term exists from the join on, bound to
// the same lease. A member cut off from its peers cannot extend D: it
// cannot reach the leader to forward a keepalive, and with "require
// leader" it refuses the request once it notices it has no leader.
//
// When etcd's leader changes, the new leader gives every lease its full
// TTL plus an election timeout from its promotion: leases live longer on
// the server, never shorter, and D does not move (it counts only answers
// to our own requests). The same extension covers etcd before 3.5.11 (for
// example Debian's 3.4), whose leader renews leases without first
// confirming it still leads: an isolated leader answers keepalives only
// until it steps down, at most two election timeouts after it was cut
// off, while the majority elects a new leader no earlier than one election
// timeout after the cut and extends every lease by one more; so a renewal
// answered by the stale leader ends no later than the new leader's TTL.
//
// Assumed: clock rates on this host and on the etcd leader within 1/20 of
// each other (steps do not matter: only durations measured on one host
// are compared); etcd's own safety (one leader per raft term, a quorum per
// write); lease checkpointing (LeaseCheckpoint, off by default) disabled,
// or its interval longer than the TTL (a checkpointed remaining TTL could
// be shorter than one renewed after it); the etcd leader's ticks on time
// (its step down after losing its quorum is counted in ticks).
//
// # What is not guaranteed
//
// A process paused after reading Expiry can still act once before it
// notices: the successor fences the old leader before it promotes, and
// the epoch lets resources reject stale writes. An operator who deletes a
// leader's election key or revokes its lease lets the next candidate win
// before Expiry: the term ends as soon as the watch or the next renewal
// tells (Expiry then fails), and the successor fences it as after any
// other loss.
package etcdcluster
