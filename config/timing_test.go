package config

import (
	"time"

	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
)

// The backends' timing checks and renew intervals, wired as cmd/failoverd
// wires them (config imports no backend; its tests may), so that the
// tests see the messages the daemon's validation gives.
func init() {
	SetTimingChecks(map[string]TimingCheck{
		BackendZooKeeper: func(t Timing, fail, warn func(path, msg string)) {
			zkcluster.CheckTiming(zkcluster.TimingConfig{SessionTimeout: t.SessionTimeout, TickTime: t.TickTime, Lease: t.Lease,
				DemoteTimeout: t.DemoteTimeout, DemoteBudget: t.DemoteBudget, KillGrace: t.KillGrace}, fail, warn)
		},
		BackendEtcd: func(t Timing, fail, warn func(path, msg string)) {
			etcdcluster.CheckTiming(etcdcluster.TimingConfig{LeaseTTL: t.LeaseTTL, DemoteTimeout: t.DemoteTimeout, DemoteBudget: t.DemoteBudget}, fail, warn)
		},
	})
	SetRenewIntervals(map[string]RenewInterval{
		BackendZooKeeper: func(t Timing) time.Duration {
			lt, _ := lease.Compute(t.SessionTimeout, t.TickTime, t.DemoteBudget, t.Lease, t.RenewInterval)
			return lt.Renew
		},
		BackendEtcd: func(t Timing) time.Duration {
			if t.RenewInterval > 0 {
				return t.RenewInterval
			}
			return etcdcluster.DefaultRenewInterval(t.LeaseTTL)
		},
	})
}

// zkTiming is the ZooKeeper lease arithmetic of cfg for a session timeout
// of session, as the elector computes it.
func zkTiming(cfg *Config, session time.Duration) (lease.Timing, error) {
	return lease.Compute(session, cfg.ZooKeeper.TickTime.Std(), cfg.demoteBudget(), cfg.Election.Lease.Std(), 0)
}

// effectiveLease is the lease for cfg's session timeout.
func effectiveLease(cfg *Config) time.Duration {
	t, _ := zkTiming(cfg, cfg.ZooKeeper.SessionTimeout.Std())
	return t.Lease
}
