// Package fencer makes sure a previous leader can no longer act before a new
// one is promoted.
//
// A Chain tries its Methods in order, each under its own timeout, and stops at
// the first success. When every method fails the target is NOT fenced and the
// caller must not promote.
package fencer

import (
	"context"
	"time"
)

// Target is the node to fence, as named by the breadcrumb it left behind.
type Target struct {
	NodeID   string // failoverd node id of the old leader
	Host     string // host (name or address) the old leader runs on
	AdminURL string // base URL of the old leader's failoverd admin API, may be empty
	Epoch    int64  // fencing token of the old leadership
}

// Method is one way of fencing a node (rpc, ssh, shell).
type Method interface {
	// Name is a short, stable label used in logs and metrics ("rpc", "ssh", "shell").
	Name() string
	// Fence returns nil only when the target can no longer act as leader.
	Fence(ctx context.Context, t Target) error
}

// Metrics receives one report per fencing attempt; the daemon backs it with
// Prometheus collectors. result is "success" or "failure".
type Metrics interface {
	FenceAttempt(method, result string, d time.Duration)
}
