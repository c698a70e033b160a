package healthcheck

import (
	"context"
	"errors"
)

// Checker performs one health check. It returns nil when the service is
// healthy, an error matching ErrNotResponding when the service gave no
// answer, and any other error when it answered but the answer was bad.
// Implementations must return promptly once ctx is done.
type Checker interface {
	Check(ctx context.Context) error
}

// ErrNotResponding is matched (errors.Is) by check errors meaning the service
// did not answer at all, as opposed to answering "unhealthy". Checkers
// return a *NotRespondingError to say so.
var ErrNotResponding = errors.New("healthcheck: not responding")

// NotRespondingError wraps the error of a check that got no answer. It
// matches ErrNotResponding with errors.Is; its message is Err's.
type NotRespondingError struct{ Err error }

func (e *NotRespondingError) Error() string        { return e.Err.Error() }
func (e *NotRespondingError) Unwrap() error        { return e.Err }
func (e *NotRespondingError) Is(target error) bool { return target == ErrNotResponding }

// State is the health of the service as judged by a Monitor.
type State int

// States, as in Hadoop's HealthMonitor.
const (
	Initializing  State = iota // no verdict yet
	Healthy                    // Rise consecutive checks passed
	Unhealthy                  // Fall consecutive checks failed, the last one with an answer
	NotResponding              // Fall consecutive checks failed, the last one without an answer
)

// String returns the name used in logs and metrics.
func (s State) String() string {
	switch s {
	case Initializing:
		return "initializing"
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	case NotResponding:
		return "not_responding"
	}
	return "unknown"
}
