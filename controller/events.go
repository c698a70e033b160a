package controller

import (
	"context"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// An event is a message to the loop, the one goroutine that owns the
// controller's state. Producers send with (*Controller).send, which never
// blocks once the loop ended.
type event interface{ event() }

// joinChecked is the member publisher's verdict on joining (verdict), or
// its failure to publish or check (not a verdict: the last one stands).
type joinChecked struct {
	err     error
	verdict bool
	floor   int64 // the cluster record's EpochFloor (err nil)
}

// termWon is sent by the elector's won callback, which then waits for
// release (or the loop's end): the elector gives the term up only then.
type termWon struct {
	gen     uint64
	t       cluster.Term
	ctx     context.Context
	release chan struct{}
	reads   *termReads // the term's first reads, already under way (takeover.go)
}

// termEnded: the term's context ended (context.AfterFunc).
type termEnded struct {
	epoch int64
	cause error
	at    time.Time // when the context ended (the loop may see it later)
}

// candidacyEnded: Elector.Campaign returned.
type candidacyEnded struct {
	gen uint64
	err error
}

// demoteReq is an operator demote or an rpc fence (Controller.Demote).
type demoteReq struct {
	reason string
	reply  chan DemoteOutcome // cap 1
}

// cedeReq is Controller.Cede.
type cedeReq struct {
	d     time.Duration
	reply chan error // cap 1
}

// failoverSeen is the manual failover request as the watch last saw it
// (nil: none).
type failoverSeen struct{ req *cluster.FailoverRequest }

// withdrawalChecked is the read checkWithdrawal started: the request
// standing after this node's own (key) was written.
type withdrawalChecked struct {
	key string
	req *cluster.FailoverRequest
	err error
}

// stepDone is a takeover worker's result.
type stepDone struct {
	epoch int64
	res   stepResult
}

// hookDone: the running hook finished (reaped != nil: it is still alive
// after SIGKILL).
type hookDone struct {
	run    *hookRun
	err    error
	reaped <-chan struct{}
}

// hookReaped: a stuck hook finally exited.
type hookReaped struct{ h *stuckHook }

// adopted is the adopt reader's breadcrumb read (ok false: unreadable now).
type adopted struct {
	rec *breadcrumb.Record // nil: absent
	ok  bool
}

// termFinished: the graceful Finish (breadcrumb and znode deleted in one
// write) is over, successful or not.
type termFinished struct {
	epoch int64
	err   error
}

// leaderSeen is the promoted leader as the leader watch reports it (nil:
// none).
type leaderSeen struct{ leader *cluster.Leader }

// membersSeen is the member records as the leader's member watch reports
// them (term epoch).
type membersSeen struct {
	epoch   int64
	members []cluster.Member
}

// preemptWritten: the leader's failover request to a standby of a higher
// priority was written (err nil) or not.
type preemptWritten struct {
	epoch int64
	req   cluster.FailoverRequest
	err   error
}

func (membersSeen) event()       {}
func (preemptWritten) event()    {}
func (leaderSeen) event()        {}
func (withdrawalChecked) event() {}
func (joinChecked) event()       {}
func (termWon) event()           {}
func (termEnded) event()         {}
func (candidacyEnded) event()    {}
func (demoteReq) event()         {}
func (cedeReq) event()           {}
func (failoverSeen) event()      {}
func (stepDone) event()          {}
func (hookDone) event()          {}
func (hookReaped) event()        {}
func (adopted) event()           {}
func (termFinished) event()      {}
