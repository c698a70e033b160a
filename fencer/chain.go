package fencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ErrNoMethods is returned (wrapped) by Chain.Fence when the chain has no
// methods. Whether running without fencing is acceptable is the caller's
// decision; the chain never reports such a target as fenced.
var ErrNoMethods = errors.New("fencer: no fencing methods configured")

// Step is one method of a Chain and the time it is given.
type Step struct {
	Method Method
	// Timeout bounds one attempt of Method. Required; RPC.StepTimeout and
	// Shell.StepTimeout give the time those methods need.
	Timeout time.Duration
	// Proves says that a success of Method proves the target can no
	// longer act as leader, by evidence the method checked itself: the
	// rpc method's success is the old daemon's own answer that it demoted
	// the target's service in the target's term or a later one (RPC.Fence);
	// a command (ssh, shell) proves only what it verified before exiting 0,
	// which the operator vouches for. Fencing first (Chain.Proving) uses
	// only such steps: a success there ends the old leader's term before
	// the coordination service would.
	Proves bool
}

// Chain tries fencing methods in order until one succeeds.
type Chain struct {
	steps   []Step
	logger  *slog.Logger
	metrics Metrics
}

// NewChain returns a Chain trying steps in the given order. An empty list is
// allowed; Fence then fails with ErrNoMethods.
func NewChain(steps []Step, deps Deps) (*Chain, error) {
	for i, s := range steps {
		if s.Method == nil {
			return nil, fmt.Errorf("fencer: step %d: nil method", i)
		}
		if s.Timeout <= 0 {
			return nil, fmt.Errorf("fencer: step %d (%s): timeout must be > 0, got %s", i, s.Method.Name(), s.Timeout)
		}
	}
	return &Chain{
		steps:   append([]Step(nil), steps...),
		logger:  deps.logger().With("component", "fencer"),
		metrics: deps.Metrics,
	}, nil
}

// Proving returns a chain of c's proving steps (Step.Proves) in their
// order, with c's logger and metrics; false, and a nil chain, when c has
// none. c is unchanged.
func (c *Chain) Proving() (*Chain, bool) {
	var steps []Step
	for _, s := range c.steps {
		if s.Proves {
			steps = append(steps, s)
		}
	}
	if len(steps) == 0 {
		return nil, false
	}
	return &Chain{steps: steps, logger: c.logger, metrics: c.metrics}, true
}

// Fence tries each method in order, each under its own timeout, and returns
// the name of the first one that succeeded. If none did, the target is not
// fenced and the error joins every method's error, each prefixed with the
// method's name. Once ctx is done no further method is tried.
func (c *Chain) Fence(ctx context.Context, t Target) (method string, err error) {
	if len(c.steps) == 0 {
		return "", fmt.Errorf("fencing %s: %w", t.NodeID, ErrNoMethods)
	}
	var errs []error
	for _, s := range c.steps {
		name := s.Method.Name()
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: not tried: %w", name, context.Cause(ctx)))
			break
		}
		start := time.Now()
		err := c.attempt(ctx, s, t)
		d := time.Since(start)
		result := "success"
		if err != nil {
			result = "failure"
		}
		if c.metrics != nil {
			c.metrics.FenceAttempt(name, result, d)
		}
		attrs := []any{"method", name, "target", t.NodeID, "epoch", t.Epoch, "duration_seconds", d.Seconds(), "outcome", result}
		if err != nil {
			c.logger.Warn("fence attempt failed", append(attrs, "err", err)...)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		c.logger.Info("fence attempt succeeded", attrs...)
		return name, nil
	}
	return "", fmt.Errorf("fencing %s: %w", t.NodeID, errors.Join(errs...))
}

// attempt runs one method under its timeout. The method runs in its own
// goroutine so that one ignoring its context cannot hold up the chain; such a
// goroutine is abandoned and finishes on its own.
func (c *Chain) attempt(ctx context.Context, s Step, t Target) error {
	stepCtx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	done := make(chan error, 1) // buffered: an abandoned method must not block
	go func() { done <- s.Method.Fence(stepCtx, t) }()
	select {
	case err := <-done:
		return err
	case <-stepCtx.Done():
	}
	// Both may be ready; a success that made it in time still counts.
	select {
	case err := <-done:
		return err
	default:
	}
	if ctx.Err() != nil {
		return context.Cause(ctx) // the caller gave up, not the method
	}
	return fmt.Errorf("timed out after %s: %w", s.Timeout, stepCtx.Err())
}
