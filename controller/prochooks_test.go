package controller_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/internal/proc/proctest"
)

// The follow hook's environment, as a real process sees it: all four
// FAILOVERD_LEADER_* always set (empty in the no-leader run), no epoch of
// this node's own; and the promote hook's FAILOVERD_PREVIOUS_ADDRESS.
func TestProcHooksEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	script := proctest.Script(t, `env | grep '^FAILOVERD_' | sort > "$OUT"`)
	t.Setenv("OUT", out)
	hook := controller.Hook{Argv: []string{script}, Timeout: 10 * time.Second}
	p := controller.ProcHooks{Promote: hook, Demote: hook, Follow: hook, Cluster: "orders", NodeID: "b"}
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name string
		env  controller.HookEnv
		want string
	}{
		{"follow", controller.HookEnv{Reason: "leader_changed", Leader: &cluster.Leader{NodeID: "a", Host: "db-a", ServiceAddress: "db-a:6379", Epoch: 7}},
			"FAILOVERD_CLUSTER=orders\nFAILOVERD_LEADER_ADDRESS=db-a:6379\nFAILOVERD_LEADER_EPOCH=7\nFAILOVERD_LEADER_HOST=db-a\nFAILOVERD_LEADER_ID=a\n" +
				"FAILOVERD_NODE_ID=b\nFAILOVERD_REASON=leader_changed\nFAILOVERD_ROLE=standby\nFAILOVERD_TIMEOUT_MS=10000\n"},
		{"follow", controller.HookEnv{Reason: "no_leader"},
			"FAILOVERD_CLUSTER=orders\nFAILOVERD_LEADER_ADDRESS=\nFAILOVERD_LEADER_EPOCH=\nFAILOVERD_LEADER_HOST=\nFAILOVERD_LEADER_ID=\n" +
				"FAILOVERD_NODE_ID=b\nFAILOVERD_REASON=no_leader\nFAILOVERD_ROLE=standby\nFAILOVERD_TIMEOUT_MS=10000\n"},
		{"promote", controller.HookEnv{Reason: "elected", Epoch: 9, Previous: &breadcrumb.Record{NodeID: "a", Epoch: 7, ServiceAddress: "db-a:6379"}},
			"FAILOVERD_CLUSTER=orders\nFAILOVERD_EPOCH=9\nFAILOVERD_NODE_ID=b\nFAILOVERD_PREVIOUS_ADDRESS=db-a:6379\nFAILOVERD_PREVIOUS_EPOCH=7\n" +
				"FAILOVERD_PREVIOUS_LEADER=a\nFAILOVERD_REASON=elected\nFAILOVERD_ROLE=leader\nFAILOVERD_TIMEOUT_MS=10000\n"},
		{"promote", controller.HookEnv{Reason: "elected", Epoch: 9, Previous: &breadcrumb.Record{NodeID: "a", Epoch: 7}},
			"FAILOVERD_CLUSTER=orders\nFAILOVERD_EPOCH=9\nFAILOVERD_NODE_ID=b\nFAILOVERD_PREVIOUS_EPOCH=7\n" +
				"FAILOVERD_PREVIOUS_LEADER=a\nFAILOVERD_REASON=elected\nFAILOVERD_ROLE=leader\nFAILOVERD_TIMEOUT_MS=10000\n"},
		// A graceful demote's own timeout replaces the configured one.
		{"demote", controller.HookEnv{Reason: "shutdown", Epoch: 9, Timeout: 30 * time.Second},
			"FAILOVERD_CLUSTER=orders\nFAILOVERD_EPOCH=9\nFAILOVERD_NODE_ID=b\nFAILOVERD_REASON=shutdown\nFAILOVERD_ROLE=standby\nFAILOVERD_TIMEOUT_MS=30000\n"},
	} {
		if _, err := p.Run(context.Background(), tc.name, tc.env); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := read(); got != tc.want {
			t.Errorf("%s %s saw:\n%s\nwant:\n%s", tc.name, tc.env.Reason, got, tc.want)
		}
	}
}

// A follow that overruns its timeout ends with an error the controller
// counts as a timeout (context.DeadlineExceeded), within timeout + kill
// grace.
func TestProcHooksFollowTimeout(t *testing.T) {
	script := proctest.Script(t, `trap '' TERM; sleep 30`)
	p := controller.ProcHooks{Follow: controller.Hook{Argv: []string{script}, Timeout: 200 * time.Millisecond, KillGrace: 250 * time.Millisecond}}
	start := time.Now()
	_, err := p.Run(context.Background(), "follow", controller.HookEnv{Reason: "startup"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("Run() = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}
