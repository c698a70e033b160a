package config

import (
	"maps"
	"sync"
	"time"

	"github.com/failoverd/failoverd/controller"
)

// Timing is what a coordination backend's timing check reads of a Config:
// the settings as plain durations, and the demote budget the controller
// derives from them. config does no lease arithmetic itself: that is the
// backends' (zkcluster.CheckTiming, etcdcluster.CheckTiming).
type Timing struct {
	// SessionTimeout, TickTime and Lease are zookeeper.session_timeout,
	// zookeeper.tick_time (0: unknown) and election.lease (0: the longest
	// that fits).
	SessionTimeout, TickTime, Lease time.Duration
	// LeaseTTL is etcd.lease_ttl (0 without an etcd block).
	LeaseTTL time.Duration
	// DemoteTimeout is service.demote.timeout; validation passes 0 when it
	// is not valid (it is reported on its own), and the check then checks
	// only what does not depend on it.
	DemoteTimeout time.Duration
	// DemoteBudget is controller.DemoteBudget of the promote and demote
	// hooks the daemon runs: DemoteTimeout plus the kill graces of a
	// running promote and of the demote.
	DemoteBudget time.Duration
	// KillGrace is controller.KillGrace, each of those kill graces.
	KillGrace time.Duration
	// RenewInterval is election.renew_interval (0: the backend derives
	// it), which the backend's renew interval (SetRenewIntervals) applies
	// as its elector does.
	RenewInterval time.Duration
}

// TimingCheck is one coordination backend's check of its timing: that the
// lease leaves the demote budget, and whatever else the backend's lease
// arithmetic requires of t. It calls fail for each setting that cannot
// work and warn for one that works but that an operator should know about,
// each with the YAML path of the key to change.
type TimingCheck func(t Timing, fail, warn func(path, msg string))

var timing struct {
	sync.RWMutex
	checks map[string]TimingCheck
}

// SetTimingChecks wires the coordination backends' timing checks into
// Load, Parse, Validate and Warnings, by coordination.backend value.
// config imports no backend: cmd/failoverd, which does, calls it at
// start-up. A backend without a check has its timing go unchecked here
// (its elector still refuses a lease that does not fit, at run time).
func SetTimingChecks(checks map[string]TimingCheck) {
	timing.Lock()
	defer timing.Unlock()
	timing.checks = maps.Clone(checks)
}

// timingCheck returns backend's check, or nil.
func timingCheck(backend string) TimingCheck {
	timing.RLock()
	defer timing.RUnlock()
	return timing.checks[backend]
}

// Timing is c's Timing, every value as configured: what validation hands
// the backend's check, and what the daemon runs with (its elector gets the
// same DemoteBudget from controller.DemoteBudget).
func (c *Config) Timing() Timing {
	t := Timing{
		SessionTimeout: time.Duration(c.ZooKeeper.SessionTimeout),
		TickTime:       time.Duration(c.ZooKeeper.TickTime),
		Lease:          time.Duration(c.Election.Lease),
		DemoteTimeout:  time.Duration(c.Service.Demote.Timeout),
		DemoteBudget:   c.demoteBudget(),
		KillGrace:      controller.KillGrace,
		RenewInterval:  time.Duration(c.Election.RenewInterval),
	}
	if c.Etcd != nil {
		t.LeaseTTL = time.Duration(c.Etcd.LeaseTTL)
	}
	return t
}

// demoteBudget is controller.DemoteBudget of the hooks the daemon runs
// with c: the promote and the demote with the controller's kill grace.
func (c *Config) demoteBudget() time.Duration {
	return controller.DemoteBudget(controller.Config{Demote: controller.Hook{Timeout: time.Duration(c.Service.Demote.Timeout)}})
}

// checkTiming runs backend's check on t, adding each failure to v.
func (v *validator) checkTiming(backend string, t Timing) {
	if check := timingCheck(backend); check != nil {
		check(t, func(path, msg string) { v.add(path, "%s", msg) }, func(string, string) {})
	}
}

// timingWarnings runs the check of c's backend for its warnings, each
// "path: message".
func (c *Config) timingWarnings() []string {
	check := timingCheck(c.Coordination.Backend)
	if check == nil {
		return nil
	}
	var w []string
	check(c.Timing(), func(string, string) {}, func(path, msg string) { w = append(w, path+": "+msg) })
	return w
}
