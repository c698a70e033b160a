// End-to-end tests: real failoverd binaries, real ZooKeeper, the example
// toy service, hooks that log every event. See test/clustertest.
package e2e

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

func epochOf(t *testing.T, n *clustertest.Node) int64 {
	t.Helper()
	s, ok := n.Status()
	if !ok {
		t.Fatalf("%s does not answer", n.ID)
	}
	return s.Epoch
}

func promotesOf(c *clustertest.Cluster, node string) []clustertest.Event {
	return clustertest.Find(c.Events(), "promote", "node", node)
}

func TestExactlyOnePromotedAndGracefulHandover(t *testing.T) {
	// A 6s session gives the demote hook 1.8s (with the default 2s, 600ms:
	// under load the shutdown demote could time out, and a handover that is
	// graceful by design needed fencing). On etcd a 5s lease gives it 2.2s.
	clustertest.ForEachBackend(t, clustertest.Options{SessionTimeout: 6 * time.Second, EtcdLeaseTTL: 5 * time.Second}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		if old == nil {
			t.Fatal("no leader")
		}
		time.Sleep(time.Second) // settle: nobody else promotes
		if n := len(clustertest.Find(c.Events(), "promote")); n != 1 {
			t.Fatalf("%d promotions at start, want 1", n)
		}
		if old.Role() != "primary" {
			t.Errorf("leader's service role = %q, want primary", old.Role())
		}
		oldEpoch := epochOf(t, old)

		start := time.Now()
		old.Signal(syscall.SIGTERM)
		err, exited := old.Wait(20 * time.Second)
		if !exited {
			t.Fatal("leader did not exit within 20s of SIGTERM")
		}
		if err != nil {
			t.Errorf("leader exited with %v, want 0", err)
		}
		next := c.WaitLeader(old.ID, 20*time.Second)
		t.Logf("graceful handover %s -> %s in %v", old.ID, next.ID, time.Since(start))
		if ep := epochOf(t, next); ep <= oldEpoch {
			t.Errorf("new epoch %d not above %d", ep, oldEpoch)
		}
		evs := c.Events()
		if f := clustertest.Find(evs, "fence_attempt"); len(f) != 0 {
			t.Errorf("graceful handover fenced: %v", f)
		}
		if d := clustertest.Find(evs, "demote", "node", old.ID, "reason", "shutdown"); len(d) != 1 {
			t.Errorf("old leader demote events with reason shutdown: %d, want 1", len(d))
		}
		if old.Role() != "standby" {
			t.Errorf("old service role = %q, want standby", old.Role())
		}
		c.CheckNoOverlap()
	})
}

func TestCrashedLeaderIsFencedBeforeSuccessorPromotes(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		oldEpoch := epochOf(t, old)
		old.Kill(syscall.SIGKILL)
		next := c.WaitLeader(old.ID, 30*time.Second)
		evs := c.Events()
		fences := clustertest.Find(evs, "fence", "target", old.ID)
		if len(fences) == 0 {
			t.Fatal("crashed leader was not fenced")
		}
		f := fences[0]
		if f.KV["target_epoch"] != strconv.FormatInt(oldEpoch, 10) || f.KV["node"] != next.ID {
			t.Errorf("fence event %v, want target_epoch=%d by %s", f.KV, oldEpoch, next.ID)
		}
		p := promotesOf(c, next.ID)
		if len(p) == 0 || p[len(p)-1].At.Before(f.At) {
			t.Fatalf("successor promoted before fencing finished: %v / %v", p, f)
		}
		last := p[len(p)-1]
		if last.KV["prev"] != old.ID || last.KV["prev_epoch"] != strconv.FormatInt(oldEpoch, 10) {
			t.Errorf("promote env prev=%s prev_epoch=%s, want %s/%d", last.KV["prev"], last.KV["prev_epoch"], old.ID, oldEpoch)
		}
		if ep, _ := strconv.ParseInt(last.KV["epoch"], 10, 64); ep <= oldEpoch {
			t.Errorf("new epoch %d not above %d", ep, oldEpoch)
		}
		// The old service was stood down by the fence.
		if old.Role() != "standby" {
			t.Errorf("old service role %q after fencing, want standby", old.Role())
		}
		c.CheckNoOverlap()
	})
}

func TestPausedLeaderIsFencedAndNeverActsAgain(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		old.Signal(syscall.SIGSTOP)
		next := c.WaitLeader(old.ID, 30*time.Second)
		if len(clustertest.Find(c.Events(), "fence", "target", old.ID)) == 0 {
			t.Error("paused leader was not fenced")
		}
		old.Signal(syscall.SIGCONT)
		// It must notice its lost lease/session, demote, and never promote again.
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if s, ok := old.Status(); ok && s.State != controller.StateLeader && s.State != controller.StateDemoting {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(3 * time.Second)
		if s, _ := old.Status(); s.State == controller.StateLeader {
			t.Fatalf("woken leader still reports leader")
		}
		if n := len(promotesOf(c, old.ID)); n != 1 {
			t.Errorf("old leader promoted %d times, want 1 (never again after the pause)", n)
		}
		if l := c.Leader(); l == nil || l.ID != next.ID {
			t.Errorf("leader after wake-up = %v, want %s", l, next.ID)
		}
		if len(clustertest.Find(c.Events(), "demote", "node", old.ID)) == 0 {
			t.Error("woken leader did not run its demote hook")
		}
		c.CheckNoOverlap()
	})
}

func TestUnhealthyLeaderStepsDownAndRejoins(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		old.SetHealthy(false)
		next := c.WaitLeader(old.ID, 30*time.Second)
		if d := clustertest.Find(c.Events(), "demote", "node", old.ID, "reason", "unhealthy"); len(d) == 0 {
			t.Error("no demote with reason unhealthy")
		}
		old.SetHealthy(true)
		deadline := time.Now().Add(15 * time.Second)
		for {
			s, _ := old.Status()
			if s.State == controller.StateStandby && s.Health == "healthy" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("old leader did not rejoin as standby: %+v", s)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if l := c.Leader(); l == nil || l.ID != next.ID {
			t.Errorf("leader changed when the old one rejoined: %v", l)
		}
		c.CheckNoOverlap()
	})
}

// The coordination service (every ZooKeeper server, every etcd member)
// goes: the leader demotes within its session (etcd: its lease), and
// nobody promotes until the service is back. On etcd a 5s lease gives the
// demote hook 2.2s (with the default 3s, 1.1s, which a loaded machine's
// bash and curl can overrun: the demote event is then missing).
func TestCoordinationOutageDemotesWithinLease(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{SessionTimeout: 2 * time.Second, EtcdLeaseTTL: 5 * time.Second}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		stopped := time.Now()
		c.StopCoordination()
		// The servers are killed one after the other; a loaded machine
		// takes a while, and etcd keeps its quorum (and answers renewals)
		// until the second member is dead. The outage is complete when
		// StopCoordination returns: the lease counts from there.
		down := time.Now()
		deadline := time.Now().Add(10 * time.Second)
		var demotedAt time.Time
		for demotedAt.IsZero() && time.Now().Before(deadline) {
			for _, d := range clustertest.Find(c.Events(), "demote", "node", old.ID) {
				if d.At.After(stopped) {
					demotedAt = d.At
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if demotedAt.IsZero() {
			t.Fatalf("leader did not demote while %s was down", c.BackendName())
		}
		t.Logf("leader demoted %v after %s was down (stopping it took %v; session %v)",
			demotedAt.Sub(down), c.BackendName(), down.Sub(stopped), c.SessionTimeout())
		if d := demotedAt.Sub(down); d > c.SessionTimeout() {
			t.Errorf("demote %v after the outage was complete, later than the session timeout (%v)", d, c.SessionTimeout())
		}
		promotes := len(clustertest.Find(c.Events(), "promote"))
		time.Sleep(3 * time.Second)
		if n := len(clustertest.Find(c.Events(), "promote")); n != promotes {
			t.Errorf("someone promoted while %s was down", c.BackendName())
		}
		c.StartCoordination()
		c.WaitLeader("", 60*time.Second)
		c.CheckNoOverlap()
	})
}

func TestFailedFencingBlocksPromotionUntilItWorks(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{NoRPCFence: true}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		failFile := filepath.Join(c.Dir, "fence-fail")
		if err := os.WriteFile(failFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		old := c.Leader()
		old.Kill(syscall.SIGKILL)
		// Fencing fails: nobody may promote.
		deadline := time.Now().Add(8 * time.Second)
		for time.Now().Before(deadline) {
			if l := c.Leader(); l != nil {
				t.Fatalf("%s promoted although fencing fails", l.ID)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n := len(clustertest.Find(c.Events(), "fence_failed")); n == 0 {
			t.Fatal("no fencing attempt failed; the test proves nothing")
		}
		os.Remove(failFile)
		next := c.WaitLeader(old.ID, 60*time.Second)
		if len(clustertest.Find(c.Events(), "fence", "target", old.ID)) == 0 {
			t.Errorf("%s promoted without a successful fence", next.ID)
		}
		c.CheckNoOverlap()
	})
}

func TestManualFailover(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		var target *clustertest.Node
		for _, n := range c.Nodes {
			if n != old {
				target = n
			}
		}
		// Wait until every member is published healthy.
		time.Sleep(time.Second)
		out, code := old.CLI("failover", "--to", target.ID, "--timeout", "20s")
		if code != 0 {
			t.Fatalf("failover exit %d: %s", code, out)
		}
		t.Logf("failover: %s", strings.TrimSpace(out))
		if l := c.Leader(); l == nil || l.ID != target.ID {
			t.Fatalf("leader after failover = %v, want %s", l, target.ID)
		}
		evs := c.Events()
		if f := clustertest.Find(evs, "fence_attempt"); len(f) != 0 {
			t.Errorf("manual failover needed fencing: %v", f)
		}
		// No third node grabbed leadership in between.
		for _, p := range clustertest.Find(evs, "promote") {
			if p.KV["node"] != old.ID && p.KV["node"] != target.ID {
				t.Errorf("third node %s promoted during the failover", p.KV["node"])
			}
		}
		// Refusals: unknown node, and status output.
		if out, code := old.CLI("failover", "--to", "nope", "--timeout", "2s"); code == 0 || !strings.Contains(out, "not a member") {
			t.Errorf("failover to unknown node: exit %d, %s", code, out)
		}
		out, code = old.CLI("status")
		if code != 0 || !strings.Contains(out, target.ID) || !strings.Contains(out, "leader") || !strings.Contains(out, "Breadcrumb: "+target.ID) {
			t.Errorf("status exit %d:\n%s", code, out)
		}
		c.CheckNoOverlap()
	})
}

func TestAdminAPIRefusesMutatingCallsWithoutToken(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		n := c.Leader()
		for _, path := range []string{"/v1/demote", "/v1/cede?for=10s"} {
			for _, auth := range []string{"", "Bearer wrong"} {
				req, _ := http.NewRequest("POST", "http://"+n.AdminAddr+path, strings.NewReader(`{}`))
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("POST %s with %q: %d, want 401", path, auth, resp.StatusCode)
				}
			}
		}
		if l := c.Leader(); l == nil || l.ID != n.ID {
			t.Error("leadership changed after refused calls")
		}
		resp, err := http.Get("http://" + n.AdminAddr + "/leader")
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("GET /leader on the leader: %v %v", resp, err)
		}
		resp.Body.Close()
		resp, err = http.Get("http://" + n.AdminAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1<<20)
		k, _ := resp.Body.Read(b)
		resp.Body.Close()
		if !strings.Contains(string(b[:k]), "failoverd_") {
			t.Error("/metrics has no failoverd_ series")
		}
		// A standby ceded for a moment reports "out", then "standby" again.
		var sb *clustertest.Node
		for _, o := range c.Nodes {
			if o != n {
				sb = o
			}
		}
		req, _ := http.NewRequest("POST", "http://"+sb.AdminAddr+"/v1/cede?for=2s", nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		resp, err = http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("cede standby with token: %v %v", resp, err)
		}
		resp.Body.Close()
		if s, _ := sb.Status(); s.State != controller.StateOut {
			t.Errorf("ceded standby state %q, want out", s.State)
		}
		back := time.Now().Add(10 * time.Second)
		for {
			if s, _ := sb.Status(); s.State == controller.StateStandby {
				break
			}
			if time.Now().After(back) {
				t.Fatal("ceded standby did not report standby again after the cede ended")
			}
			time.Sleep(50 * time.Millisecond)
		}
		// With the token, cede hands over.
		req, _ = http.NewRequest("POST", "http://"+n.AdminAddr+"/v1/cede?for=20s", nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		resp, err = http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("cede with token: %v %v", resp, err)
		}
		resp.Body.Close()
		c.WaitLeader(n.ID, 20*time.Second)
		c.CheckNoOverlap()
	})
}

func TestACLsKeepOthersFromDeletingOurZnodes(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Auth: true})
	sess := openSession(t, c)
	bc := cluster.Layout{Root: "/failoverd", Cluster: "e2e"}.Breadcrumb()
	data, _, err := sess.Get(t.Context(), bc)
	if err != nil {
		t.Fatalf("world cannot read the breadcrumb: %v", err)
	}
	if _, err := breadcrumb.Decode(data); err != nil {
		t.Fatalf("the breadcrumb world reads: %v", err)
	}
	if err := sess.Delete(t.Context(), bc, -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("unauthenticated delete of the breadcrumb: %v, want ErrNoAuth", err)
	}
	dir := cluster.Layout{Root: "/failoverd", Cluster: "e2e"}.ElectionDir()
	kids, err := sess.Children(t.Context(), dir)
	if err != nil || len(kids) == 0 {
		t.Fatalf("election znodes: %v %v", kids, err)
	}
	for _, k := range kids {
		if err := sess.Delete(t.Context(), dir+"/"+k, -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("unauthenticated delete of election znode %s: %v, want ErrNoAuth", k, err)
		}
	}
}

func TestValidateNamesBadKeys(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 1})
	n := c.Nodes[0]
	if out, code := n.CLI("validate"); code != 0 || strings.TrimSpace(out) != "ok" {
		t.Errorf("validate good config: exit %d, %s", code, out)
	}
	bad := filepath.Join(c.Dir, "bad.yaml")
	os.WriteFile(bad, []byte("cluster: x\nnode: {id: a, host: h, tokn: 1}\nzookeeper: {servers: [nohostport]}\nfencing: {methods: [{ssh: {user: root, known_hosts: /nonexistent, kill_port: 5432}}]}\n"), 0o644)
	fd, _ := clustertest.Binaries(t)
	out, code := runCmd(fd, "validate", "-c", bad)
	if code != 2 || !strings.Contains(out, "node.tokn") {
		t.Errorf("validate bad config: exit %d, want 2 naming node.tokn:\n%s", code, out)
	}
	os.WriteFile(bad, []byte("cluster: x\nnode: {id: a, host: h}\nzookeeper: {servers: [nohostport]}\nhealth: {tcp: {address: 127.0.0.1:1}}\nfencing: {methods: [{ssh: {user: root, known_hosts: /nonexistent, kill_port: 5432}}]}\n"), 0o644)
	out, code = runCmd(fd, "validate", "-c", bad)
	for _, want := range []string{"zookeeper.servers[0]", "fencing.methods[0].ssh.known_hosts"} {
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("validate: exit %d, want 2 and %q in:\n%s", code, want, out)
		}
	}
	if _, code := runCmd(fd, "validate"); code != 2 {
		t.Errorf("validate without -c: exit %d, want 2", code)
	}
	if out, code := runCmd(fd, "run", "--help"); code != 0 || !strings.Contains(out, "-c") {
		t.Errorf("run --help: exit %d: %s", code, out)
	}
}

func TestFailedPromotionDemotesAndBacksOff(t *testing.T) {
	// A 6s session gives the demote hook 1.8s instead of 600ms (load).
	clustertest.ForEachBackend(t, clustertest.Options{SessionTimeout: 6 * time.Second, EtcdLeaseTTL: 5 * time.Second}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		for _, n := range c.Nodes {
			if n != old {
				if err := os.WriteFile(filepath.Join(n.Dir(), "promote-fail"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		old.Kill(syscall.SIGTERM)
		deadline := time.Now().Add(30 * time.Second)
		for len(clustertest.Find(c.Events(), "promote_failed")) < 2 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		failed := clustertest.Find(c.Events(), "promote_failed")
		if len(failed) < 2 {
			t.Fatalf("%d failed promotions, want at least 2", len(failed))
		}
		// The demote follows the failed promote hook: wait for it (bounded)
		// instead of looking right after the promote_failed event.
		for _, f := range failed {
			deadline := time.Now().Add(15 * time.Second)
			for len(clustertest.Find(c.Events(), "demote", "node", f.KV["node"], "reason", "promote_failed")) == 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if d := clustertest.Find(c.Events(), "demote", "node", f.KV["node"], "reason", "promote_failed"); len(d) == 0 {
				t.Errorf("%s did not demote within 15s after its promote hook failed", f.KV["node"])
			}
		}
		if l := c.Leader(); l != nil {
			t.Fatalf("%s reports leader although its promote hook failed", l.ID)
		}
		for _, n := range c.Nodes {
			os.Remove(filepath.Join(n.Dir(), "promote-fail"))
		}
		c.WaitLeader(old.ID, 60*time.Second)
		c.CheckNoOverlap()
	})
}

func TestUnreadableBreadcrumbBlocksPromotionUntilCleared(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		if err := c.WriteRecord(t.Context(), c.Layout().Breadcrumb(), []byte("{garbage")); err != nil {
			t.Fatal(err)
		}
		old.Kill(syscall.SIGKILL)
		killed := time.Now()
		counted := func() bool {
			for _, n := range c.Nodes {
				if n == old {
					continue
				}
				resp, err := http.Get("http://" + n.AdminAddr + "/metrics")
				if err != nil {
					continue
				}
				b := new(strings.Builder)
				_, _ = io.Copy(b, resp.Body)
				resp.Body.Close()
				for _, line := range strings.Split(b.String(), "\n") {
					if strings.HasPrefix(line, "failoverd_breadcrumb_unreadable_total ") && !strings.HasSuffix(line, " 0") {
						return true
					}
				}
			}
			return false
		}
		// Nobody may promote: for the session expiry and several attempts,
		// and (on a loaded machine the first attempt can come later) until
		// a node counted the unreadable breadcrumb, within a minute.
		hold, deadline := c.SessionTimeout()+4*time.Second, killed.Add(60*time.Second)
		refused := false
		for {
			if l := c.Leader(); l != nil {
				t.Fatalf("%s promoted over an unreadable breadcrumb", l.ID)
			}
			refused = refused || counted()
			if (refused && time.Since(killed) >= hold) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !refused {
			t.Errorf("no node counted the unreadable breadcrumb within %v", deadline.Sub(killed))
		}
		out, code := c.Nodes[1].CLI("breadcrumb", "show")
		if code == 0 || !strings.Contains(out, "garbage") {
			t.Errorf("breadcrumb show: exit %d, %s", code, out)
		}
		if out, code := c.Nodes[1].CLI("breadcrumb", "clear"); code != 0 {
			t.Fatalf("breadcrumb clear: exit %d, %s", code, out)
		}
		c.WaitLeader(old.ID, 60*time.Second)
	})
}
