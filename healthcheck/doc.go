// Package healthcheck watches the local service and decides whether it is
// healthy, with hysteresis so that one slow answer does not cause a failover.
//
// A Checker performs one check (HTTP, TCP or Exec are provided). A Monitor
// runs it every Config.Interval under Config.Timeout and moves between the
// States of Hadoop's HealthMonitor: Initializing until the first verdict,
// Healthy after Config.Rise consecutive successes, and after Config.Fall
// consecutive failures either Unhealthy (the service answered "no") or
// NotResponding (no answer at all: timeout, refused connection, a command
// that could not start or had to be killed). Errors that mean "no answer"
// match ErrNotResponding with errors.Is.
//
// # What is guaranteed
//
// At most one check runs at a time: the next one starts only after the
// previous one returned, so a slow check delays the next instead of piling
// up processes or connections. A check that returns after its timeout counts
// as NotResponding whatever it returned. OnChange is called only on a change
// of state and never concurrently. Exec checks run
// through package internal/proc: in their own process group, killed as a
// whole on timeout, with bounded output.
//
// # What is not
//
// A Healthy state only says that the last Rise checks passed; it says
// nothing about what happened since the last check. The Monitor relies on
// Checkers returning soon after their context ends (the provided ones do): a
// Checker that ignores its context stalls the Monitor, and its state, until
// it returns.
//
// There is no random initial stagger: failoverd runs one check per node, so
// there is no herd to spread, and the first verdict should come as soon as
// possible.
package healthcheck
