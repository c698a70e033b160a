package main

import (
	"time"

	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/lease"
	"github.com/failoverd/failoverd/config"
)

// config imports no backend: validation checks a backend's timing (its
// lease against the demote budget) through the check wired here, each
// backend's own arithmetic, the one its elector applies at run time; and
// it compares election.suspect_after with each backend's renew interval,
// the one a leader's heartbeat publishes.
func init() {
	config.SetTimingChecks(map[string]config.TimingCheck{
		config.BackendZooKeeper: checkZooKeeperTiming,
		config.BackendEtcd:      checkEtcdTiming,
	})
	config.SetRenewIntervals(map[string]config.RenewInterval{
		config.BackendZooKeeper: zooKeeperRenewInterval,
		config.BackendEtcd:      etcdRenewInterval,
	})
}

func checkZooKeeperTiming(t config.Timing, fail, warn func(path, msg string)) {
	zkcluster.CheckTiming(zkcluster.TimingConfig{SessionTimeout: t.SessionTimeout, TickTime: t.TickTime, Lease: t.Lease,
		DemoteTimeout: t.DemoteTimeout, DemoteBudget: t.DemoteBudget, KillGrace: t.KillGrace}, fail, warn)
}

func checkEtcdTiming(t config.Timing, fail, warn func(path, msg string)) {
	etcdcluster.CheckTiming(etcdcluster.TimingConfig{LeaseTTL: t.LeaseTTL, DemoteTimeout: t.DemoteTimeout, DemoteBudget: t.DemoteBudget}, fail, warn)
}

// zooKeeperRenewInterval is the ZooKeeper elector's renew interval for the
// configured session timeout, tickTime and election.renew_interval
// (lease.Compute, the elector's arithmetic: a configured interval below
// tickTime/2 + 5% renews at that; the elector publishes it as renew_ms).
// A timing that does not fit still has its interval: validation refuses
// it on its own.
func zooKeeperRenewInterval(t config.Timing) time.Duration {
	lt, _ := lease.Compute(t.SessionTimeout, t.TickTime, t.DemoteBudget, t.Lease, t.RenewInterval)
	return lt.Renew
}

// etcdRenewInterval is the etcd session's renew interval for the
// configured lease TTL and election.renew_interval (the Conn renews at a
// configured interval, else at DefaultRenewInterval).
func etcdRenewInterval(t config.Timing) time.Duration {
	if t.RenewInterval > 0 {
		return t.RenewInterval
	}
	return etcdcluster.DefaultRenewInterval(t.LeaseTTL)
}
