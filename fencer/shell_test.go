package fencer_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/proc"
	"github.com/failoverd/failoverd/internal/proc/proctest"
)

// syncBuffer is a log sink safe for concurrent writes (stdout and stderr
// lines are logged from two goroutines).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestShellEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	script := proctest.Script(t, `
{
	echo "id=$FAILOVERD_TARGET_ID"
	echo "host=$FAILOVERD_TARGET_HOST"
	echo "admin_url=$FAILOVERD_TARGET_ADMIN_URL"
	echo "epoch=$FAILOVERD_TARGET_EPOCH"
	echo "address=$FAILOVERD_TARGET_ADDRESS"
	echo "cluster=$FAILOVERD_CLUSTER"
	echo "node_id=$FAILOVERD_NODE_ID"
	if read -r line; then echo "stdin=open"; else echo "stdin=closed"; fi
	echo "args=$#"
} > "$1"
`)
	// Shell syntax in target data must arrive as plain text.
	tg := fencer.Target{NodeID: "node-a", Host: "db1; touch /tmp/pwned", AdminURL: "http://db1:9000/$(id)", Epoch: 42, ServiceAddress: "db1:6379"}
	s := newShell(t, fencer.ShellConfig{Argv: []string{script, out}, Timeout: 30 * time.Second, Cluster: "orders", NodeID: "node-b"}, fencer.Deps{})
	if err := s.Fence(t.Context(), tg); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := `id=node-a
host=db1; touch /tmp/pwned
admin_url=http://db1:9000/$(id)
epoch=42
address=db1:6379
cluster=orders
node_id=node-b
stdin=closed
args=1
`
	if string(got) != want {
		t.Errorf("script saw:\n%s\nwant:\n%s", got, want)
	}
}

func TestShellFailure(t *testing.T) {
	script := proctest.Script(t, `echo "pdu 3: outlet 7 did not switch off" >&2; exit 2`)
	err := newShell(t, fencer.ShellConfig{Argv: []string{script}, Timeout: 30 * time.Second}, fencer.Deps{}).Fence(t.Context(), target)
	if err == nil {
		t.Fatal("Fence() = nil, want an error")
	}
	for _, want := range []string{"exit status 2", "outlet 7 did not switch off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Fence() = %q, want it to contain %q", err, want)
		}
	}
	if exitErr, ok := errors.AsType[*proc.ExitError](err); !ok || exitErr.Code != 2 {
		t.Errorf("Fence() = %v, want a *proc.ExitError with code 2", err)
	}
}

func TestShellNotConfigured(t *testing.T) {
	for _, cfg := range []fencer.ShellConfig{{}, {Argv: []string{""}}, {Argv: []string{"/bin/true"}, Timeout: -time.Second}} {
		if _, err := fencer.NewShell(cfg, fencer.Deps{}); err == nil {
			t.Errorf("NewShell(%+v) = nil error, want one", cfg)
		}
	}
}

func TestShellLogsOutputLines(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	script := proctest.Script(t, `echo "powering off outlet 7"; echo "warning: slow pdu" >&2; echo done`)
	s := newShell(t, fencer.ShellConfig{Argv: []string{script}, Timeout: 30 * time.Second}, fencer.Deps{Logger: logger})
	if err := s.Fence(t.Context(), target); err != nil {
		t.Fatalf("Fence() = %v, want nil", err)
	}
	logs := buf.String()
	for _, want := range []string{
		`msg="fence command output" method=shell target=node-a stream=stdout line="powering off outlet 7"`,
		`msg="fence command output" method=shell target=node-a stream=stderr line="warning: slow pdu"`,
		`msg="fence command output" method=shell target=node-a stream=stdout line=done`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

func TestShellTimeoutKillsProcessGroup(t *testing.T) {
	argv, pidFile := proctest.HangingScript(t, true)
	s := newShell(t, fencer.ShellConfig{Argv: argv, Timeout: proctest.HangTimeout, KillGrace: 200 * time.Millisecond}, fencer.Deps{})
	err := s.Fence(t.Context(), target)
	if err == nil || !strings.Contains(err.Error(), "timed out after "+proctest.HangTimeout.String()) {
		t.Fatalf("Fence() = %v, want a timeout", err)
	}
	proctest.RequireGone(t, proctest.ReadPID(t, pidFile))
}

func TestShellInChainTimeoutKillsProcessGroup(t *testing.T) {
	// The chain's step timeout, not the shell's own, cuts the command.
	argv, pidFile := proctest.HangingScript(t, true)
	c, err := fencer.NewChain([]fencer.Step{
		{Method: newShell(t, fencer.ShellConfig{Argv: argv, KillGrace: 200 * time.Millisecond}, fencer.Deps{}), Timeout: proctest.HangTimeout},
	}, fencer.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Fence(t.Context(), target)
	if err == nil || !strings.Contains(err.Error(), "shell: ") {
		t.Fatalf("Fence() = %v, want a shell failure", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Fence took %v, want about %v", elapsed, proctest.HangTimeout)
	}
	proctest.RequireGone(t, proctest.ReadPID(t, pidFile))
}

func newShell(t *testing.T, cfg fencer.ShellConfig, deps fencer.Deps) *fencer.Shell {
	t.Helper()
	s, err := fencer.NewShell(cfg, deps)
	if err != nil {
		t.Fatalf("NewShell: %v", err)
	}
	return s
}

// TestShellStepTimeout: a chain step of the shell method outlasts the
// command's timeout, its kill grace and the wait for it to go after
// SIGKILL, so that the command's own error is what the chain reports.
func TestShellStepTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout, grace, want time.Duration
	}{
		{30 * time.Second, 0, 30*time.Second + proc.DefaultKillGrace + proc.ReapWait},
		{5 * time.Second, 250 * time.Millisecond, 5*time.Second + 250*time.Millisecond + proc.ReapWait},
	} {
		s := newShell(t, fencer.ShellConfig{Argv: []string{"/bin/true"}, Timeout: tc.timeout, KillGrace: tc.grace}, fencer.Deps{})
		if got := s.StepTimeout(); got != tc.want {
			t.Errorf("StepTimeout() with timeout %v, kill grace %v = %v, want %v", tc.timeout, tc.grace, got, tc.want)
		}
	}
}
