package e2e

import (
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// waitFollowed waits until every node in nodes ran its follow hook to the
// end towards leader at epoch, and returns those follow_done events.
func waitFollowed(t *testing.T, c *clustertest.Cluster, nodes []*clustertest.Node, leader string, epoch int64, timeout time.Duration) map[string]clustertest.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done := map[string]clustertest.Event{}
		evs := c.Events()
		for _, n := range nodes {
			if d := clustertest.Find(evs, "follow_done", "node", n.ID, "leader", leader, "leader_epoch", strconv.FormatInt(epoch, 10)); len(d) > 0 {
				done[n.ID] = d[0]
			}
		}
		if len(done) == len(nodes) {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v only %d of %d nodes followed %s at epoch %d: %v", timeout, len(done), len(nodes), leader, epoch, clustertest.Find(evs, "follow"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func without(nodes []*clustertest.Node, ids ...string) []*clustertest.Node {
	return slices.DeleteFunc(slices.Clone(nodes), func(n *clustertest.Node) bool { return slices.Contains(ids, n.ID) })
}

// After the leader is killed, every surviving standby's follow hook runs
// with the new leader's id, host, service address and epoch, only after
// the new leader's promote hook ended; no node's follow runs while that
// node promotes, and none towards itself.
func TestStandbysFollowTheNewLeaderAfterACrash(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{Nodes: 4, Follow: true}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		oldEpoch := epochOf(t, old)
		waitFollowed(t, c, without(c.Nodes, old.ID), old.ID, oldEpoch, 30*time.Second)
		for _, e := range clustertest.Find(c.Events(), "follow") {
			if e.KV["reason"] != "startup" || e.KV["role"] != "standby" || e.KV["cluster"] != "e2e" {
				t.Errorf("first follow %v, want reason startup, role standby, cluster e2e", e.KV)
			}
		}

		old.Kill(syscall.SIGKILL)
		next := c.WaitLeader(old.ID, 30*time.Second)
		nextEpoch := epochOf(t, next)
		survivors := without(c.Nodes, old.ID, next.ID)
		followed := waitFollowed(t, c, survivors, next.ID, nextEpoch, 30*time.Second)

		evs := c.Events()
		promoted := clustertest.Find(evs, "promote_done", "node", next.ID, "epoch", strconv.FormatInt(nextEpoch, 10))
		if len(promoted) != 1 {
			t.Fatalf("promote_done events of %s at epoch %d: %v", next.ID, nextEpoch, promoted)
		}
		if a := promoted[0].KV["prev_address"]; a != old.ToyAddr {
			t.Errorf("the new leader's promote got FAILOVERD_PREVIOUS_ADDRESS=%q, want %s", a, old.ToyAddr)
		}
		var last time.Duration
		for _, n := range survivors {
			runs := clustertest.Find(evs, "follow", "node", n.ID, "leader", next.ID)
			if len(runs) == 0 {
				t.Fatalf("%s: no follow run towards %s", n.ID, next.ID)
			}
			f := runs[0]
			if !f.At.After(promoted[0].At) {
				t.Errorf("%s followed %s at %s, before its promote ended at %s", n.ID, next.ID,
					f.At.Format("15:04:05.000000"), promoted[0].At.Format("15:04:05.000000"))
			}
			want := map[string]string{"reason": "leader_changed", "role": "standby", "leader_host": "127.0.0.1",
				"leader_address": next.ToyAddr, "leader_epoch": strconv.FormatInt(nextEpoch, 10), "cluster": "e2e"}
			for k, v := range want {
				if f.KV[k] != v {
					t.Errorf("%s's follow got %s=%q, want %q (%v)", n.ID, k, f.KV[k], v, f.KV)
				}
			}
			last = max(last, followed[n.ID].At.Sub(promoted[0].At))
		}
		t.Logf("new leader's promote end to the last standby's follow end: %v", last)

		// No follow while its own node promotes, none towards itself.
		for _, n := range c.Nodes {
			for _, e := range clustertest.Find(evs, "follow", "leader", n.ID) {
				if e.KV["node"] == n.ID {
					t.Errorf("%s followed itself: %v", n.ID, e.KV)
				}
			}
			promotes := clustertest.Find(evs, "promote", "node", n.ID)
			dones := clustertest.Find(evs, "promote_done", "node", n.ID)
			for i, p := range promotes {
				end := time.Now()
				if i < len(dones) {
					end = dones[i].At
				}
				for _, kind := range []string{"follow", "follow_done"} {
					for _, f := range clustertest.Find(evs, kind, "node", n.ID) {
						if !f.At.Before(p.At) && !f.At.After(end) {
							t.Errorf("%s: %s at %s while its promote ran (%s..%s)", n.ID, kind, f.At.Format("15:04:05.000000"),
								p.At.Format("15:04:05.000000"), end.Format("15:04:05.000000"))
						}
					}
				}
			}
		}

		// Status and `failoverd status` show whom each node follows.
		deadline := time.Now().Add(10 * time.Second)
		for _, n := range survivors {
			for {
				s, ok := n.Status()
				if ok && s.Following == next.ID && s.FollowingEpoch == nextEpoch && !s.FollowingSince.IsZero() && s.ServiceAddress == n.ToyAddr {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s status %+v, want following %s at epoch %d", n.ID, s, next.ID, nextEpoch)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		out, code := next.CLI("status")
		want := next.ID + "@" + strconv.FormatInt(nextEpoch, 10)
		if code != 0 || !strings.Contains(out, "FOLLOWING") || strings.Count(out, want) < len(survivors) {
			t.Errorf("failoverd status (exit %d) does not show %d nodes following %s:\n%s", code, len(survivors), want, out)
		}
		c.CheckNoOverlap()
	})
}

// A leader that demotes (its service turned unhealthy) follows its
// successor once that one is promoted (reason demoted), after its own
// demote; a node restarted after a crash follows the leader after its
// startup demote (reason startup).
func TestDemotedAndRestartedNodesFollow(t *testing.T) {
	// A 6s session gives the demote hook 1.8s (with the default 2s, 600ms,
	// which a loaded machine can overrun: the demote event is then missing).
	clustertest.ForEachBackend(t, clustertest.Options{Follow: true, SessionTimeout: 6 * time.Second, EtcdLeaseTTL: 5 * time.Second}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		old.SetHealthy(false)
		next := c.WaitLeader(old.ID, 30*time.Second)
		nextEpoch := epochOf(t, next)
		done := waitFollowed(t, c, []*clustertest.Node{old}, next.ID, nextEpoch, 30*time.Second)[old.ID]
		evs := c.Events()
		runs := clustertest.Find(evs, "follow", "node", old.ID, "leader", next.ID)
		demotes := clustertest.Find(evs, "demote", "node", old.ID, "reason", "unhealthy")
		promoted := clustertest.Find(evs, "promote_done", "node", next.ID, "epoch", strconv.FormatInt(nextEpoch, 10))
		if len(runs) == 0 || len(demotes) == 0 || len(promoted) == 0 {
			t.Fatalf("follow runs %v, demotes %v, promote_done %v", runs, demotes, promoted)
		}
		if f := runs[0]; f.KV["reason"] != "demoted" || !f.At.After(demotes[0].At) || !f.At.After(promoted[0].At) {
			t.Errorf("old leader's follow %v at %s; want reason demoted after its demote (%s) and the successor's promote end (%s)", f.KV,
				f.At.Format("15:04:05.000000"), demotes[0].At.Format("15:04:05.000000"), promoted[0].At.Format("15:04:05.000000"))
		}
		t.Logf("successor's promote end to the demoted leader's follow end: %v", done.At.Sub(promoted[0].At))

		// A crash and restart of a standby: it demotes at start-up, then follows.
		old.SetHealthy(true)
		old.Kill(syscall.SIGKILL)
		if _, ok := old.Wait(10 * time.Second); !ok {
			t.Fatal("killed daemon did not exit")
		}
		before := len(clustertest.Find(c.Events(), "follow", "node", old.ID))
		old.Start()
		deadline := time.Now().Add(30 * time.Second)
		for {
			evs = c.Events()
			runs = clustertest.Find(evs, "follow", "node", old.ID)
			if len(runs) > before {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("restarted %s never followed: %v", old.ID, runs)
			}
			time.Sleep(50 * time.Millisecond)
		}
		f := runs[before]
		startup := clustertest.Find(evs, "demote", "node", old.ID, "reason", "startup")
		if f.KV["reason"] != "startup" || f.KV["leader"] != next.ID || len(startup) == 0 || !f.At.After(startup[len(startup)-1].At) {
			t.Errorf("restarted node's follow %v at %s, startup demotes %v: want reason startup towards %s after its startup demote", f.KV,
				f.At.Format("15:04:05.000000"), startup, next.ID)
		}
		c.CheckNoOverlap()
	})
}
