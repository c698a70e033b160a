package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/fencer"
)

// An rpc fencer that gives up before the old leader's demote hook may end
// fails although the demote may still succeed: validate warns, naming both
// keys.
func TestRPCTimeoutShorterThanDemoteWarning(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rpc, demote time.Duration
		want        []string // substrings; nil: no warning
	}{
		{"set, shorter", 2 * time.Second, 10 * time.Second,
			[]string{"fencing.methods[1].rpc.timeout: 2s is shorter than service.demote.timeout 10s", "set fencing.methods[1].rpc.timeout to service.demote.timeout or more"}},
		{"default, shorter", 0, fencer.DefaultRPCTimeout + time.Second,
			[]string{"fencing.methods[1].rpc.timeout: " + fencer.DefaultRPCTimeout.String() + " (the default) is shorter than service.demote.timeout"}},
		{"equal", 10 * time.Second, 10 * time.Second, nil},
		{"longer", 15 * time.Second, 10 * time.Second, nil},
		{"default, longer than the default demote timeout", 0, config.DefaultDemoteTimeout, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.ZooKeeper.TickTime = config.Duration(2 * time.Second) // no reconnect warning
			cfg.Node.Host = "127.0.0.1"                               // no loopback admin URL warning
			cfg.Service.Demote.Timeout = config.Duration(tc.demote)
			cfg.Fencing.Methods = []config.FencingMethod{
				{Shell: &config.ShellFencing{Command: []string{"/bin/true"}}},
				{RPC: &config.RPCFencing{Timeout: config.Duration(tc.rpc)}},
			}
			w := cfg.Warnings()
			if tc.want == nil {
				if len(w) != 0 {
					t.Fatalf("Warnings() = %q, want none", w)
				}
				return
			}
			if len(w) != 1 {
				t.Fatalf("Warnings() = %q, want one", w)
			}
			for _, s := range tc.want {
				if !strings.Contains(w[0], s) {
					t.Errorf("warning %q lacks %q", w[0], s)
				}
			}
		})
	}
}

// Every rpc method is checked, each under its own path.
func TestRPCTimeoutWarningPerMethod(t *testing.T) {
	cfg := config.Default()
	cfg.ZooKeeper.TickTime = config.Duration(2 * time.Second)
	cfg.Node.Host = "127.0.0.1"
	cfg.Service.Demote.Timeout = config.Duration(20 * time.Second)
	cfg.Fencing.Methods = []config.FencingMethod{
		{RPC: &config.RPCFencing{Timeout: config.Duration(3 * time.Second)}},
		{RPC: &config.RPCFencing{Timeout: config.Duration(30 * time.Second)}},
		{RPC: &config.RPCFencing{Timeout: config.Duration(4 * time.Second)}},
	}
	w := cfg.Warnings()
	if len(w) != 2 || !strings.HasPrefix(w[0], "fencing.methods[0].rpc.timeout: 3s ") || !strings.HasPrefix(w[1], "fencing.methods[2].rpc.timeout: 4s ") {
		t.Fatalf("Warnings() = %q, want methods [0] and [2]", w)
	}
}
