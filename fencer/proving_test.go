package fencer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/proc"
	"github.com/failoverd/failoverd/internal/proc/proctest"
)

// Proving keeps only the steps marked Proves, in their order, each with
// its own timeout; the chain it came from is unchanged.
func TestChainProvingKeepsProvingStepsInOrder(t *testing.T) {
	log := &callLog{}
	rpc := &fake{name: "rpc", err: errRefused, log: log}
	ssh := &fake{name: "ssh", log: log}
	power := &fake{name: "shell", takes: time.Hour, log: log}
	c := newChain(t, []fencer.Step{
		{Method: rpc, Timeout: time.Minute, Proves: true},
		{Method: ssh, Timeout: time.Minute},
		{Method: power, Timeout: 3 * time.Second, Proves: true},
	}, nil, nil)

	p, ok := c.Proving()
	if !ok || p == nil {
		t.Fatalf("Proving() = %v, %v, want a chain", p, ok)
	}
	start := time.Now()
	got, err := p.Fence(t.Context(), target)
	if err == nil || got != "" {
		t.Fatalf("proving chain Fence() = %q, %v, want a failure (rpc refused, the power fence timed out)", got, err)
	}
	if calls := log.names(); !slices.Equal(calls, []string{"rpc", "shell"}) {
		t.Errorf("proving chain called %q, want [rpc shell]: the ssh step proves nothing", calls)
	}
	if d := time.Since(start); d < 3*time.Second || d > 30*time.Second {
		t.Errorf("proving chain took %v, want the shell step's own 3s timeout", d)
	}
	for _, want := range []string{"rpc: connection refused", "shell: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q: the shell step did not end at its timeout", err)
	}

	// The whole chain still runs every method: ssh succeeds after rpc.
	log.calls = nil
	if got, err := c.Fence(t.Context(), target); err != nil || got != "ssh" {
		t.Errorf("whole chain Fence() = %q, %v, want ssh, nil", got, err)
	}
	if calls := log.names(); !slices.Equal(calls, []string{"rpc", "ssh"}) {
		t.Errorf("whole chain called %q, want [rpc ssh]", calls)
	}
}

// A chain without a proving step has no proving chain; neither has an
// empty one.
func TestChainProvingNone(t *testing.T) {
	c := newChain(t, []fencer.Step{
		{Method: &fake{name: "ssh"}, Timeout: time.Minute},
		{Method: &fake{name: "shell"}, Timeout: time.Minute},
	}, nil, nil)
	if p, ok := c.Proving(); ok || p != nil {
		t.Errorf("Proving() of a chain without proving steps = %v, %v, want nil, false", p, ok)
	}
	if p, ok := newChain(t, nil, nil, nil).Proving(); ok || p != nil {
		t.Errorf("Proving() of an empty chain = %v, %v, want nil, false", p, ok)
	}
}

// The proving chain reports to the same metrics and logs through the same
// logger as the chain it came from.
func TestChainProvingSharesLoggerAndMetrics(t *testing.T) {
	var buf bytes.Buffer
	m := &metrics{}
	c := newChain(t, []fencer.Step{
		{Method: &fake{name: "ssh"}, Timeout: time.Minute},
		{Method: &fake{name: "rpc"}, Timeout: time.Minute, Proves: true},
	}, slog.New(slog.NewJSONHandler(&buf, nil)), m)
	p, ok := c.Proving()
	if !ok {
		t.Fatal("Proving() = false, want the rpc step")
	}
	if got, err := p.Fence(t.Context(), target); err != nil || got != "rpc" {
		t.Fatalf("Fence() = %q, %v, want rpc, nil", got, err)
	}
	if len(m.attempts) != 1 || m.attempts[0].method != "rpc" || m.attempts[0].result != "success" {
		t.Errorf("metrics = %+v, want one rpc success", m.attempts)
	}
	var r map[string]any
	if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	if r["msg"] != "fence attempt succeeded" || r["method"] != "rpc" || r["component"] != "fencer" || r["target"] != "node-a" {
		t.Errorf("log record %v, want the chain's success record for rpc", r)
	}
}

// With real processes: the proving chain of [shell that proves nothing,
// shell that kills the target's process and checks that it is gone]
// runs only the second, which leaves the process dead; the first never
// runs. A proving command verifies the death before it exits 0.
func TestChainProvingRunsOnlyProvingCommands(t *testing.T) {
	victim := exec.Command("sleep", "600")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	// kill -0 succeeds on a zombie: reap the victim as soon as it dies.
	reaped := make(chan struct{})
	go func() { _ = victim.Wait(); close(reaped) }()
	t.Cleanup(func() { _ = victim.Process.Kill(); <-reaped })

	ran := filepath.Join(t.TempDir(), "unproving-ran")
	unproving := proctest.Script(t, `echo ran > "$1"`)
	// kill, then wait until the pid is gone (kill -0 fails), at most 10s.
	proving := proctest.Script(t, `
kill -KILL "$1" 2>/dev/null
i=0
while kill -0 "$1" 2>/dev/null; do
	i=$((i+1))
	[ "$i" -gt 100 ] && exit 1
	sleep 0.1
done
exit 0
`)
	pid := strconv.Itoa(victim.Process.Pid)
	c := newChain(t, []fencer.Step{
		{Method: newShell(t, fencer.ShellConfig{Argv: []string{unproving, ran}, Timeout: 30 * time.Second}, fencer.Deps{}),
			Timeout: proc.MaxDuration(30*time.Second, 0)},
		{Method: newShell(t, fencer.ShellConfig{Argv: []string{proving, pid}, Timeout: 30 * time.Second}, fencer.Deps{}),
			Timeout: proc.MaxDuration(30*time.Second, 0), Proves: true},
	}, nil, nil)
	p, ok := c.Proving()
	if !ok {
		t.Fatal("Proving() = false, want the killing shell step")
	}
	if got, err := p.Fence(t.Context(), target); err != nil || got != "shell" {
		t.Fatalf("proving chain Fence() = %q, %v, want shell, nil", got, err)
	}
	select {
	case <-reaped:
	case <-time.After(30 * time.Second):
		t.Fatal("the target process is still there after the proving fence succeeded")
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Errorf("the step that proves nothing ran (stat %s: %v)", ran, err)
	}
}

// ShellConfig.StepTimeout and RPCConfig.StepTimeout are the figures the
// methods built from them give.
func TestConfigStepTimeouts(t *testing.T) {
	sc := fencer.ShellConfig{Argv: []string{"/bin/true"}, Timeout: 7 * time.Second, KillGrace: 300 * time.Millisecond}
	if got, want := sc.StepTimeout(), newShell(t, sc, fencer.Deps{}).StepTimeout(); got != want {
		t.Errorf("ShellConfig.StepTimeout() = %v, Shell.StepTimeout() = %v", got, want)
	}
	for _, timeout := range []time.Duration{0, 2 * time.Second} {
		rc := fencer.RPCConfig{Token: "t", Timeout: timeout}
		r, err := fencer.NewRPC(rc, fencer.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rc.StepTimeout(), r.StepTimeout(); got != want {
			t.Errorf("timeout %v: RPCConfig.StepTimeout() = %v, RPC.StepTimeout() = %v", timeout, got, want)
		}
	}
}
