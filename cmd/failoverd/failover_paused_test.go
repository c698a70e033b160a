package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// A failover --to while the cluster is paused, whose target does not take
// over, leaves the cluster without a leader until the operator acts (the
// old leader handed over, nobody else campaigns while paused): the CLI
// says so instead of promising that the others rejoin and elect one.
func TestFailoverWhilePausedSaysNobodyElseTakesOver(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{SessionTimeout: 6 * time.Second})
	old := c.Leader()
	target := otherThan(c, old, nil)
	waitMember(t, old, target.ID, 60*time.Second)
	if out, code := old.CLI("pause", "--reason", "review"); code != 0 {
		t.Fatalf("pause: exit %d\n%s", code, out)
	}
	t.Cleanup(func() { old.CLI("resume") })
	target.Signal(syscall.SIGSTOP) // healthy by its record, but it will not take over
	defer target.Signal(syscall.SIGCONT)
	out, code := old.CLI("failover", "--to", target.ID, "--timeout", "3s")
	if code == 0 || !strings.Contains(out, "the cluster is paused") || strings.Contains(out, "still ends with a leader") {
		t.Fatalf("failover --to a target that does not take over while paused: exit %d\n%s\nwant a failure saying the cluster is paused", code, out)
	}
}
