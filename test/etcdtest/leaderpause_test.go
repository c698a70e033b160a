package etcdtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/test/etcdtest"
)

// BenchmarkLeaderPauseLeaseLoss measures how often etcd deletes a lease
// its holder kept alive, when the etcd leader is SIGSTOPped past the
// lease's TTL and then continued (run it with `make etcd-probe`).
//
// Each trial: a client renews a 5 s lease every 1.5 s through a follower
// while the leader is stopped for 7 s (the other two elect a new leader,
// which answers the renewals) and for 5 s after it is continued. A trial
// counts as lost when the key bound to the lease disappears although the
// last renewal before that answered with a TTL. On waking, the old
// leader's lessor can still believe it is the primary and propose the
// revoke of every lease that expired in its view; once its raft has
// stepped down the proposal is forwarded to the new leader and commits
// (etcd issues 12528 and 15247; the guard added for them checks the
// leadership only while raft ticks have stalled, and after SIGCONT they
// resume at once). failoverd's safety does not rest on etcd keeping the
// lease (docs/safety.md): the successor fences the old leader first.
func BenchmarkLeaderPauseLeaseLoss(b *testing.B) {
	for _, srv := range etcdtest.Servers(b) {
		b.Run(srv.Name, func(b *testing.B) {
			c := etcdtest.Start(b, etcdtest.Options{Server: srv})
			lost := 0
			for i := 0; i < b.N; i++ {
				if trialLeaseLost(b, c, i) {
					lost++
				}
			}
			b.ReportMetric(float64(lost)/float64(b.N), "lost/trial")
			b.Logf("%s: %d of %d leases lost after the etcd leader was continued", srv.Name, lost, b.N)
		})
	}
}

func trialLeaseLost(b *testing.B, c *etcdtest.Cluster, trial int) bool {
	const ttl, renew, pause, after = 5, 1500 * time.Millisecond, 7 * time.Second, 5 * time.Second
	leader := c.Leader()
	cli := c.Client((leader + 1) % 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	g, err := cli.Grant(ctx, ttl)
	cancel()
	if err != nil {
		b.Fatalf("grant: %v", err)
	}
	key := fmt.Sprintf("/probe/%d", trial)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	_, err = cli.Put(ctx, key, "x", clientv3.WithLease(g.ID))
	cancel()
	if err != nil {
		b.Fatalf("put: %v", err)
	}
	c.Pause(leader)
	end := time.Now().Add(pause + after)
	resumed := false
	for time.Now().Before(end) {
		if !resumed && time.Now().After(end.Add(-after)) {
			c.Resume(leader)
			resumed = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ka, kerr := cli.KeepAliveOnce(ctx, g.ID)
		r, gerr := cli.Get(ctx, key)
		cancel()
		if kerr == nil && ka.TTL > 0 && gerr == nil && len(r.Kvs) == 0 {
			b.Logf("trial %d: key gone (continued: %v, %v after) while the lease renewed (TTL %d)", trial, resumed, time.Since(end.Add(-after)).Round(time.Millisecond), ka.TTL)
			return true
		}
		if kerr != nil && gerr == nil && len(r.Kvs) == 0 {
			b.Logf("trial %d: lease and key gone (continued: %v, %v after): %v", trial, resumed, time.Since(end.Add(-after)).Round(time.Millisecond), kerr)
			return true
		}
		time.Sleep(renew)
	}
	if !resumed {
		c.Resume(leader)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	cli.Revoke(ctx, g.ID)
	cancel()
	return false
}
