package main

import (
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// A reload that raises service.demote.graceful_timeout beyond what
// node.shutdown_timeout holds is refused, by a real daemon: the default
// (30s, the key unset) is fixed, not derived, so the refusal says it is
// the default and what to set; an explicit value that became too small
// is refused the same way; one that holds the graceful demote applies.
func TestReloadGracefulTimeoutBeyondShutdownTimeout(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 1, SessionTimeout: 4 * time.Second})
	n := c.Leader()
	s0, _ := n.Status()

	editConfig(t, n, "  shutdown_timeout: 15s\n", "", "  demote:\n", "  demote:\n    graceful_timeout: 40s\n")
	out, code := n.CLI("reload")
	if code != 1 || !strings.Contains(out, "node.shutdown_timeout: 30s (the default: the key is not set) is shorter than service.demote.graceful_timeout plus its kill grace (40.25s)") ||
		!strings.Contains(out, "set node.shutdown_timeout to at least 40.25s") {
		t.Fatalf("reload raising the graceful timeout with node.shutdown_timeout unset: exit %d\n%s\nwant 1, naming the default and what to set", code, out)
	}
	if s, _ := n.Status(); s.ConfigHash != s0.ConfigHash {
		t.Errorf("after a refused reload the config hash is %s, want %s (nothing applied)", s.ConfigHash, s0.ConfigHash)
	}

	editConfig(t, n, "  host: 127.0.0.1\n", "  host: 127.0.0.1\n  shutdown_timeout: 20s\n")
	out, code = n.CLI("reload")
	if code != 1 || !strings.Contains(out, "node.shutdown_timeout: 20s is shorter than service.demote.graceful_timeout plus its kill grace (40.25s)") ||
		strings.Contains(out, "the default") {
		t.Fatalf("reload with an explicit node.shutdown_timeout too small: exit %d\n%s\nwant 1, naming the value set", code, out)
	}

	editConfig(t, n, "  shutdown_timeout: 20s\n", "  shutdown_timeout: 45s\n")
	out, code = n.CLI("reload")
	if code != 0 || !strings.Contains(out, "node.shutdown_timeout") || !strings.Contains(out, "service.demote.graceful_timeout") {
		t.Fatalf("reload with node.shutdown_timeout holding the graceful demote: exit %d\n%s\nwant 0, both keys applied", code, out)
	}
	if s, _ := n.Status(); s.ConfigHash == s0.ConfigHash {
		t.Errorf("after an applied reload the config hash is still %s", s.ConfigHash)
	}
}
