package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/zk"
)

func TestFailoverTimeoutCapped(t *testing.T) {
	for _, d := range []string{"0s", "-1s", "11m", "24h"} {
		var stderr strings.Builder
		code := run([]string{"failover", "-c", "/nonexistent.yaml", "--to", "b", "--timeout", d}, io.Discard, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--timeout must be > 0 and <= 10m0s") {
			t.Errorf("failover --timeout %s: exit %d, %q; want a usage error naming the cap", d, code, stderr.String())
		}
	}
}

// otherThan returns a node that is neither a nor b.
func otherThan(c *clustertest.Cluster, a, b *clustertest.Node) *clustertest.Node {
	for _, n := range c.Nodes {
		if n != a && n != b {
			return n
		}
	}
	return nil
}

// Item 9: once the failover target is promoted, the other nodes are
// candidates again. The target dies right after a successful failover with
// a 60s timeout; another node must fence it and take over well before the
// 60s are over.
func TestFailoverTargetDiesRightAfterPromotion(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	old := c.Leader()
	target := otherThan(c, old, nil)
	time.Sleep(time.Second) // every member published healthy
	out, code := old.CLI("failover", "--to", target.ID, "--timeout", "60s")
	if code != 0 {
		t.Fatalf("failover exit %d: %s", code, out)
	}
	killed := time.Now()
	target.Kill(syscall.SIGKILL)
	next := c.WaitLeader(target.ID, 25*time.Second)
	t.Logf("%s leads %v after the failover target %s was killed", next.ID, time.Since(killed).Round(time.Millisecond), target.ID)
	if f := clustertest.Find(c.Events(), "fence", "target", target.ID); len(f) == 0 {
		t.Errorf("%s promoted without fencing the dead target", next.ID)
	}
	c.CheckNoOverlap()
}

// The same when the request stays (a requester that died after writing it,
// or a request of an earlier CLI): the target marks it done when promoted,
// and the other nodes measure the timeout on their own clocks, whatever
// wall-clock deadline the request carries.
func TestFailoverRequestMarkedDoneByTarget(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	old := c.Leader()
	target := otherThan(c, old, nil)
	third := otherThan(c, old, target)
	time.Sleep(time.Second)

	cl, err := zk.NewClient(zk.Config{Servers: c.ZK.Addrs(), SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := cl.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A deadline an hour behind: a requester whose clock is off. Nodes use
	// timeout_ms, measured from when they see the request.
	req := controller.FailoverRequest{To: target.ID, Deadline: time.Now().Add(-time.Hour), TimeoutMS: 60000, ID: "test-request"}
	data, _ := json.Marshal(req)
	path := controller.FailoverPath("/failoverd", "e2e")
	if _, _, err := sess.Create(ctx, path, data, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	next := c.WaitLeader(old.ID, 25*time.Second)
	if next != target {
		t.Fatalf("%s leads after a failover request to %s", next.ID, target.ID)
	}
	var got controller.FailoverRequest
	deadline := time.Now().Add(10 * time.Second)
	for !got.Done && time.Now().Before(deadline) {
		b, _, err := sess.Get(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(b, &got)
		time.Sleep(50 * time.Millisecond)
	}
	if !got.Done || got.Epoch == 0 {
		t.Fatalf("failover request after the target's promotion: %+v, want done with the epoch", got)
	}
	// The others are candidates again.
	for _, n := range []*clustertest.Node{old, third} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, _ := n.Status()
			if s.State == controller.StateStandby {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is %s after the failover target was promoted, want standby", n.ID, s.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	killed := time.Now()
	target.Kill(syscall.SIGKILL)
	after := c.WaitLeader(target.ID, 25*time.Second)
	t.Logf("%s leads %v after the failover target %s was killed", after.ID, time.Since(killed).Round(time.Millisecond), target.ID)
	c.CheckNoOverlap()
}
