package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
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

	cl, err := zk.NewClient(zk.Config{Servers: c.ZK.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
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
	req := cluster.FailoverRequest{To: target.ID, Deadline: time.Now().Add(-time.Hour), TimeoutMS: 60000, ID: "test-request"}
	data, _ := json.Marshal(req)
	path := cluster.Layout{Root: "/failoverd", Cluster: "e2e"}.Failover()
	if _, _, err := sess.Create(ctx, path, data, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	next := c.WaitLeader(old.ID, 25*time.Second)
	if next != target {
		t.Fatalf("%s leads after a failover request to %s", next.ID, target.ID)
	}
	var got cluster.FailoverRequest
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

// Review #4b: a failover request lives only while its requester waits. The
// target is frozen (it will not take over), the CLI waits with a 60s
// timeout; when the CLI is interrupted (Ctrl-C) it withdraws the request at
// once, and when it is killed (-9) ZooKeeper deletes the request with its
// session. Either way the other nodes elect a leader long before the 60s
// are over (before, an interrupted CLI left a persistent request, and the
// nodes stood aside for its whole timeout, again after every restart).
func TestFailoverRequestGoesWithTheCLI(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{SessionTimeout: 6 * time.Second})
	fd, _ := clustertest.Binaries(t)
	old := c.Leader()
	target := otherThan(c, old, nil)
	time.Sleep(time.Second) // every member published healthy
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			waitState(t, target, controller.StateStandby, 60*time.Second)
			waitMember(t, old, target.ID, 60*time.Second)
			target.Signal(syscall.SIGSTOP) // its member record stays for a session timeout
			defer target.Signal(syscall.SIGCONT)
			cmd := exec.Command(fd, "failover", "-c", old.Config, "--to", target.ID, "--timeout", "60s")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			requested := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if strings.Contains(sc.Text(), "requested") {
						requested <- true
					}
				}
				close(requested)
			}()
			select {
			case ok := <-requested:
				if !ok {
					cmd.Wait()
					t.Fatalf("the CLI exited without a request: %s", stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the CLI did not write its request")
			}
			// Wait until the leader stood aside and the frozen target's
			// session is gone: nobody can lead now but for the request.
			time.Sleep(8 * time.Second)
			if l := c.Leader(); l != nil {
				t.Fatalf("%s leads while the failover request to the frozen %s stands", l.ID, target.ID)
			}
			cmd.Process.Signal(sig)
			cmd.Wait()
			gone := time.Now()
			next := c.WaitLeader(target.ID, 25*time.Second)
			t.Logf("%s leads %v after the CLI got %s (stderr %q)", next.ID, time.Since(gone).Round(time.Millisecond), sig, stderr.String())
		})
	}
	c.CheckNoOverlap()
}

func waitState(t *testing.T, n *clustertest.Node, want controller.State, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if s, _ := n.Status(); s.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not %s after %v", n.ID, want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMember waits until the cluster's members (as ZooKeeper sees them)
// list id as healthy.
func waitMember(t *testing.T, via *clustertest.Node, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, _ := via.CLI("status", "--json")
		var v clusterView
		if json.Unmarshal([]byte(out), &v) == nil {
			for _, m := range v.Members {
				if m.NodeID == id && m.Health == "healthy" {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not a healthy member after %v", id, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
