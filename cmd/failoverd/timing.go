package main

import (
	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster"
	"github.com/failoverd/failoverd/config"
)

// config imports no backend: validation checks a backend's timing (its
// lease against the demote budget) through the check wired here, each
// backend's own arithmetic, the one its elector applies at run time.
func init() {
	config.SetTimingChecks(map[string]config.TimingCheck{
		config.BackendZooKeeper: checkZooKeeperTiming,
		config.BackendEtcd:      checkEtcdTiming,
	})
}

func checkZooKeeperTiming(t config.Timing, fail, warn func(path, msg string)) {
	zkcluster.CheckTiming(zkcluster.TimingConfig{SessionTimeout: t.SessionTimeout, TickTime: t.TickTime, Lease: t.Lease,
		DemoteTimeout: t.DemoteTimeout, DemoteBudget: t.DemoteBudget, KillGrace: t.KillGrace}, fail, warn)
}

func checkEtcdTiming(t config.Timing, fail, warn func(path, msg string)) {
	etcdcluster.CheckTiming(etcdcluster.TimingConfig{LeaseTTL: t.LeaseTTL, DemoteTimeout: t.DemoteTimeout, DemoteBudget: t.DemoteBudget}, fail, warn)
}
