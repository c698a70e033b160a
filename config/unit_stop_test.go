package config_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/config"
)

// A graceful stop the shipped unit would cut with SIGKILL draws a
// warning naming node.shutdown_timeout and the TimeoutStopSec it needs;
// the default does not.
func TestShutdownTimeoutLongerThanTheUnitWarning(t *testing.T) {
	for _, tc := range []struct {
		shutdown time.Duration
		want     string // substring; "": no warning
	}{
		{config.DefaultShutdownTimeout, ""},
		{40 * time.Second, ""},
		{41 * time.Second, "raise TimeoutStopSec to at least 46s"},
		{2 * time.Minute, "node.shutdown_timeout: 2m0s plus 5s for the exit is more than the shipped systemd unit's TimeoutStopSec=45s"},
	} {
		cfg := config.Default()
		cfg.ZooKeeper.TickTime = config.Duration(2 * time.Second)
		cfg.Node.Host = "127.0.0.1"
		cfg.Node.ShutdownTimeout = config.Duration(tc.shutdown)
		w := strings.Join(cfg.Warnings(), "\n")
		if tc.want == "" && w != "" || tc.want != "" && !strings.Contains(w, tc.want) {
			t.Errorf("shutdown_timeout %v: warnings %q, want %q", tc.shutdown, w, tc.want)
		}
	}
}

// UnitTimeoutStop is the shipped unit's TimeoutStopSec.
func TestUnitTimeoutStopMatchesTheUnit(t *testing.T) {
	b, err := os.ReadFile("../configs/failoverd.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("configs/failoverd.service sets no TimeoutStopSec")
	}
	d, err := time.ParseDuration(string(m[1]))
	if err != nil || d != config.UnitTimeoutStop {
		t.Errorf("the unit's TimeoutStopSec=%s, config.UnitTimeoutStop %v", m[1], config.UnitTimeoutStop)
	}
}
