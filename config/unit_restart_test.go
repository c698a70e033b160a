package config_test

import (
	"os"
	"regexp"
	"testing"
	"time"
)

// The shipped unit restarts a daemon that died within a second: a leader's
// daemon back within its session ends its own old term
// (election.end_own_term_on_restart), and the successor takes over at once.
func TestUnitRestartsWithinASecond(t *testing.T) {
	b, err := os.ReadFile("../configs/failoverd.service")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^Restart=on-failure$`).Match(b) {
		t.Error("configs/failoverd.service does not restart on failure")
	}
	m := regexp.MustCompile(`(?m)^RestartSec=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("configs/failoverd.service sets no RestartSec (systemd's default is 100ms, but say it)")
	}
	d, err := time.ParseDuration(string(m[1]))
	if err != nil || d <= 0 || d >= time.Second {
		t.Errorf("the unit's RestartSec=%s; want more than 0 and under a second", m[1])
	}
}
