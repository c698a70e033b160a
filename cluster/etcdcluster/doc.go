// Package etcdcluster keeps failoverd's cluster records in etcd: the
// coordination contract of package cluster (Elector, Records, Term) on
// etcd's keys, leases and transactions. The keys are cluster.Layout's
// paths (for example /failoverd/orders/breadcrumb).
//
// # Sessions
//
// A Conn keeps one lease per daemon session, granted with the configured
// TTL (5s by default; etcd may grant more, and the granted TTL counts) and
// renewed every third of it, at least every second (DefaultRenewInterval;
// after an etcd leader's death no renewal is confirmed until the next
// etcd leader is elected, and the lease must hold that election on top
// of the renew interval and the demote budget). The member record, the election key and a
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
// host's monotonic clock, of the grant of the session's lease or of its
// newest confirmed renewal, and TTL the TTL etcd answered.
//
// A renewal is three requests: two keepalives on one gRPC stream (so one
// member M answers both), the second sent after the first one's answer
// arrived, at s; then, after the second answer arrived, a linearizable
// read (any member). Every answer's header carries a raft term, the term
// of the newest log entry the answering member applied. The renewal
// counts only when all three carry the same term T (confirm). Why it is
// then safe, using only etcd's raft and lessor rules:
//
//  1. M had applied an entry of term T before it got the second
//     keepalive (its first answer says so). That entry was committed by
//     a quorum in term T, before s.
//  2. A member renews a lease itself only while its lessor is primary:
//     etcd promotes the lessor when the member, as leader, applies the
//     first entry of its term, and demotes it when the member stops
//     leading, before it applies any later entry. Otherwise it forwards
//     the keepalive to the member it takes for the leader of its current
//     term. Having applied an entry of term T, M therefore leads term T or
//     a later one, or forwards to the leader of T or of a later term: the
//     lessor that renewed belongs to the leader of T or of a later term.
//  3. The read's member answered only after a read index confirmed by the
//     leader of some term T' through heartbeats that a quorum answered in
//     T', all after the read was sent (raft's ReadIndex; the leader
//     answers only once it committed an entry of its own term, so the
//     index covers one). Having applied that index, the member had applied
//     an entry of T', so T' <= T. The quorum of
//     step 1 was in term T or later before s, and it shares a member with
//     the quorum of T' (terms never decrease), so T' >= T: T' = T. So the
//     leader L of term T led with a quorum after the read was sent, and
//     no leader of a later term was elected before then (its voters share
//     a member with L's quorum, which answered L in term T after the read
//     was sent and voted only later).
//  4. By 2 and 3, L's lessor renewed the lease, at an instant u after s,
//     to expire TTL after u by L's clock, and L led until after u.
//  5. Every later leader was elected after the read was sent, so after u,
//     and on promotion gives every lease its full TTL plus an election
//     timeout. A leader of an earlier term can no longer commit a revoke:
//     its quorum moved on.
//  6. So no etcd leader expires the lease before s + TTL by its clock;
//     TTL/20 covers clock rates that differ by up to 1/20 over one TTL.
//
// A grant is a raft write: committed by a quorum, applied by every later
// leader, its TTL started by the leader that applies it (after it was
// sent); it needs no confirmation.
//
// The confirmation is for an etcd leader cut off from its quorum: it
// answers keepalives locally until CheckQuorum makes it step down, up to
// about two election timeouts after the cut (every etcd release except
// 3.4.31-3.4.33 and 3.5.13-3.5.15, which checked leadership first; later
// ones skip that check while the member's raft ticks run), while the
// majority can elect a new leader from about one election timeout less
// two heartbeat intervals after the cut, and that leader extends leases
// by one election timeout only. A renewal the stale leader answered late
// can so end on the new leader up to about two heartbeat intervals before
// s + TTL: more than TTL/20 at a 2-3s lease, or with a WAN-tuned etcd. Its
// confirming read fails (through the stale leader, which has no quorum)
// or carries the new term (through another member): it does not count.
//
// Our election key is bound to the lease: until the lease expires it
// goes only by an explicit delete (ours, after the term or in Finish, or
// an operator's, which our watch on the key reports). Another candidate
// wins only once our key is gone (fair: it is older than theirs; unfair:
// it is the lock). So no other term begins before s + TTL on the etcd
// leader's clock. Renewals counted before the win count too: the key of
// the term exists from the join on, bound to the same lease. A member cut
// off from its peers as a follower cannot extend D either: it cannot
// reach the leader to forward a keepalive, and with "require leader" it
// refuses requests once it notices it has no leader.
//
// When etcd's leader changes, the new leader gives every lease its full
// TTL plus an election timeout from its promotion: the lease lives longer
// on the server, and D does not move (it counts only confirmed answers to
// our own requests). A renewal a stale etcd leader answered is not inside
// that extension, as above; it never counts.
//
// Assumed: clock rates on this host and on the etcd leader within 1/20 of
// each other (steps do not matter: only durations measured on one host
// are compared); etcd's own safety (one leader per raft term, a quorum per
// write) and the rules of steps 2 and 3 (etcd 3.4 to 3.7 follow them:
// linearizable reads by ReadIndex, the header's term set when an entry is
// applied, the lessor promoted and demoted with leadership); lease
// checkpointing (LeaseCheckpoint, off by default) disabled, or its
// interval longer than the TTL (a checkpointed remaining TTL could be
// shorter than one renewed after it); the etcd leader never stopped
// (SIGSTOP, a frozen VM) for longer than a TTL (on waking it may revoke
// leases it no longer holds, docs/safety.md).
//
// # Fencing first
//
// With ElectorConfig.FenceFirst (fair mode only; an unfair elector
// refuses it) every candidate's election key is a heartbeat. Its value
// carries "renew_ms", the session's renew interval, and after every
// counted renewal of its lease (confirmed, as above) the elector puts the
// same value again in one transaction that compares the key's create
// revision and keeps its lease: the key's mod revision moves once per
// renewal while the lease is renewed and answered, and a heartbeat never
// re-creates a key that went. Without the option the key's bytes are
// those of a candidate without heartbeats (no "renew_ms"), and nothing
// puts it again.
//
// The candidate next in line (its predecessor is the oldest key, which
// the transaction that reads the predecessor also reads) watches that key
// and times each mod revision on its monotonic clock from when it saw it;
// a failed watch starts the timing anew. Once one revision stood still
// for the renew interval the key publishes plus SuspectAfter (it is
// overdue by SuspectAfter), a linearizable read checks that it is still
// the key's newest (a lagging member's watch is not a heartbeat that
// stood still) and ProveOut is called; while that revision stands it is
// called again every max(SuspectAfter, 0.5s), one call at a time: a
// leader cut off from etcd answers a probe that it is connected until
// its own renewals failed, up to a few seconds later. A key without
// "renew_ms" (the option off on its node, or an older version) is never
// suspected. Only when ProveOut returned nil does the candidate end the
// term with EndTerm and then win through the normal path; otherwise it
// waits for the key to go, as without the option. The candidates further
// behind also watch the oldest key for its deletion, so that the one that
// moves up to next in line times its new predecessor: with the option a
// change of leader wakes every waiting candidate once, not only the next.
//
// Store.EndTerm (cluster.TermEnder) deletes the key a Beat names in one
// transaction comparing its create revision, its lease and its mod
// revision with the Beat's, then revokes the lease (so that the member
// record goes too, as with RemoveEntry). A heartbeat that moved since is
// ErrBeatMoved, a key that went or is another ErrEntryChanged; either way
// nothing changed, and of two calls with one Beat only one deletes the
// key. The early end is safe only by what ProveOut proved: a heartbeat
// that stood still does not mean that the leader stopped (a renewal may
// have counted while its heartbeat was still in flight).
//
// A heartbeat stands still whenever renewals are not confirmed, and none
// is during an etcd leader election (about EtcdElection): a change of
// etcd leader can make the successor probe a leader that is fine, which
// answers that it is connected. Cost: one put per candidate per renew
// interval. An idle cluster of three candidates at the renew interval of
// the default lease (a second) committed 30 puts in 10s with the option
// and none without (keepalives and reads are no raft writes): 3 writes a
// second per cluster, one per candidate.
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
