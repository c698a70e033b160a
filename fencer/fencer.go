// Package fencer makes sure a previous leader can no longer act before a new
// one is promoted.
//
// A Chain tries its Methods in order, each under its own timeout, and stops at
// the first success. When every method fails the target is NOT fenced and the
// caller must not promote.
package fencer

import (
	"context"
	"log/slog"
	"time"
)

// Target is the node to fence, as named by the breadcrumb it left behind.
type Target struct {
	NodeID   string // failoverd node id of the old leader
	Host     string // host (name or address) the old leader runs on
	AdminURL string // base URL of the old leader's failoverd admin API, may be empty
	Epoch    int64  // fencing token of the old leadership
	// ServiceAddress is the old leader's node.service_address (host:port
	// of its service), empty when it had none.
	ServiceAddress string
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

// Deps are what the constructors of this package (NewRPC, NewSSH, NewShell,
// NewChain) take besides their settings. Zero fields are allowed: a nil
// Logger discards, nil Metrics reports nothing. Only a Chain reports
// metrics, once per attempt of any method.
type Deps struct {
	Logger  *slog.Logger
	Metrics Metrics
}

// logger returns d.Logger, or a logger that discards.
func (d Deps) logger() *slog.Logger {
	if d.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Logger
}
