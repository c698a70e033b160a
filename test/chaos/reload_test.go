package chaos

import (
	"strings"
	"testing"
	"time"
)

// The reload nemeses rewrite one hook's timeout in a clustertest config
// and leave the other hooks alone.
func TestConfigTimeoutEdits(t *testing.T) {
	const cfg = "service:\n  promote:\n    command: [/x/promote.sh]\n    timeout: 5s\n  demote:\n    command: [/x/demote.sh]\n    timeout: 2.2s\n" +
		"  pre_promote:\n    command: [/x/pre_promote.sh]\n    timeout: 5s\n"
	got, err := withPromoteTimeout(cfg, 16*time.Second)
	if err != nil || got != strings.Replace(cfg, "promote.sh]\n    timeout: 5s", "promote.sh]\n    timeout: 16s", 1) {
		t.Errorf("withPromoteTimeout: %v\n%s", err, got)
	}
	got, err = lowerDemoteTimeout(cfg)
	if err != nil || got != strings.Replace(cfg, "timeout: 2.2s", "timeout: 1.1s", 1) {
		t.Errorf("lowerDemoteTimeout: %v\n%s", err, got)
	}
	if _, err := withPromoteTimeout("service: {}\n", time.Second); err == nil {
		t.Error("withPromoteTimeout accepted a config without a promote hook")
	}
}
