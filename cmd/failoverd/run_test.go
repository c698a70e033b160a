package main

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// A graceful stop runs the controller's stop (here a demote hook that hangs
// until its timeout) while the admin API and the ZooKeeper session are
// still up: a successor's rpc fence and an operator's status must be
// answered until the controller is done, and only then do the admin API and
// the session stop, each actor logging "stopping X" and "X stopped" in the
// order run.Group interrupts them.
func TestGracefulStopKeepsAdminUpUntilControllerStopped(t *testing.T) {
	// A 9s session gives the demote hook 2.7s (clustertest's demote timeout).
	c := clustertest.Start(t, clustertest.Options{Nodes: 1, SessionTimeout: 9 * time.Second})
	n := c.Nodes[0]
	if !n.WaitState(60*time.Second, string(controller.StateLeader)) {
		t.Fatal("the node did not become leader within 60s")
	}
	if err := os.WriteFile(filepath.Join(n.Dir(), "demote-hang"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	n.Signal(syscall.SIGTERM)
	start := time.Now()
	var lastAnswer time.Duration
	var states []controller.State
	for n.Running() && time.Since(start) < 60*time.Second {
		if s, ok := n.Status(); ok {
			lastAnswer = time.Since(start)
			if len(states) == 0 || states[len(states)-1] != s.State {
				states = append(states, s.State)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := n.Wait(30 * time.Second); !ok {
		t.Fatal("the daemon still runs 90s after SIGTERM")
	}
	t.Logf("states seen after SIGTERM: %v; last answer %v after it", states, lastAnswer)
	// The demote hook hangs for its whole 2.7s timeout; the API answered
	// through most of it.
	if !slices.Contains(states, controller.StateDemoting) || lastAnswer < 2*time.Second {
		t.Errorf("after SIGTERM the admin API answered states %v until %v, want demoting and answers for at least 2s (the hanging demote hook)", states, lastAnswer)
	}

	lines, err := clustertest.ReadLog(n.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"stopping health monitor", "health monitor stopped",
		"stopping controller", "controller stopped",
		"stopping admin api", "admin api stopped",
		"stopping zookeeper session", "zookeeper session stopped",
	}
	var got []string
	for _, l := range lines {
		if slices.Contains(want, l.Msg) {
			got = append(got, l.Msg)
		}
	}
	// The monitor's "stopped" may come before or after "stopping
	// controller"; the rest is ordered by the interrupts.
	pos := func(msg string) int { return slices.Index(got, msg) }
	for _, pair := range [][2]string{
		{"stopping health monitor", "stopping controller"},
		{"stopping controller", "controller stopped"},
		{"controller stopped", "stopping admin api"},
		{"stopping admin api", "admin api stopped"},
		{"controller stopped", "stopping zookeeper session"},
		{"stopping zookeeper session", "zookeeper session stopped"},
	} {
		if a, b := pos(pair[0]), pos(pair[1]); a < 0 || b < 0 || a > b {
			t.Errorf("log lacks %q before %q; stop lines in order: %q", pair[0], pair[1], got)
		}
	}
}
