package proc_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/internal/proc"
	"github.com/failoverd/failoverd/internal/proc/proctest"
)

func TestRunExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		env      []string
		wantCode int
		wantOut  string
	}{
		{name: "success", body: "echo hello", wantCode: 0, wantOut: "hello"},
		{name: "env delivered", body: `echo "x=$PROC_TEST_X"`, env: []string{"PROC_TEST_X=42"}, wantOut: "x=42"},
		{name: "env overrides inherited", body: `echo "home=$HOME"`, env: []string{"HOME=/nowhere"}, wantOut: "home=/nowhere"},
		{name: "stderr captured", body: "echo oops >&2; exit 3", wantCode: 3, wantOut: "oops"},
		{name: "stdin is empty", body: "cat; echo eof", wantOut: "eof"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := proctest.Script(t, tc.body)
			res, err := proc.Run(t.Context(), proc.Spec{Argv: []string{script}, Env: tc.env, Timeout: 30 * time.Second})
			if res.ExitCode != tc.wantCode {
				t.Errorf("ExitCode = %d, want %d (err %v)", res.ExitCode, tc.wantCode, err)
			}
			if !strings.Contains(res.Output, tc.wantOut) {
				t.Errorf("Output = %q, want it to contain %q", res.Output, tc.wantOut)
			}
			if res.TimedOut {
				t.Error("TimedOut = true, want false")
			}
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("Run() = %v, want nil", err)
				}
				return
			}
			var exitErr *proc.ExitError
			if !errors.As(err, &exitErr) {
				t.Fatalf("Run() = %v, want *proc.ExitError", err)
			}
			if exitErr.Code != tc.wantCode {
				t.Errorf("ExitError.Code = %d, want %d", exitErr.Code, tc.wantCode)
			}
			for _, want := range []string{"exit status 3", tc.wantOut} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestRunCannotStart(t *testing.T) {
	for _, argv := range [][]string{nil, {""}, {"/nonexistent/failoverd-test"}} {
		res, err := proc.Run(t.Context(), proc.Spec{Argv: argv})
		if err == nil {
			t.Fatalf("Run(%q) = nil, want an error", argv)
		}
		var exitErr *proc.ExitError
		if errors.As(err, &exitErr) {
			t.Errorf("Run(%q) = %v, must not be an *ExitError", argv, err)
		}
		if res.ExitCode != -1 {
			t.Errorf("Run(%q).ExitCode = %d, want -1", argv, res.ExitCode)
		}
	}
}

func TestRunTimeoutKillsGroup(t *testing.T) {
	for _, tc := range []struct {
		name              string
		leaderIgnoresTerm bool
	}{
		{"leader exits on sigterm", false},
		{"leader ignores sigterm", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, pidFile := proctest.HangingScript(t, tc.leaderIgnoresTerm)
			const timeout = proctest.HangTimeout
			res, err := proc.Run(t.Context(), proc.Spec{Argv: argv, Timeout: timeout, KillGrace: 200 * time.Millisecond})
			if err == nil || !strings.Contains(err.Error(), "timed out after "+timeout.String()) {
				t.Fatalf("Run() = %v, want a timeout error", err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Run() = %v, want errors.Is(err, context.DeadlineExceeded)", err)
			}
			var exitErr *proc.ExitError
			if errors.As(err, &exitErr) {
				t.Errorf("Run() = %v, a timeout must not be an *ExitError", err)
			}
			if !res.TimedOut {
				t.Error("TimedOut = false, want true")
			}
			if !strings.Contains(err.Error(), "ready") {
				t.Errorf("error %q does not carry the output", err)
			}
			if res.Duration < timeout || res.Duration > timeout+10*time.Second {
				t.Errorf("Duration = %v, want about %v", res.Duration, timeout)
			}
			proctest.RequireGone(t, proctest.ReadPID(t, pidFile))
		})
	}
}

func TestRunCallerDeadline(t *testing.T) {
	argv, pidFile := proctest.HangingScript(t, false)
	ctx, cancel := context.WithTimeout(t.Context(), proctest.HangTimeout)
	defer cancel()
	res, err := proc.Run(ctx, proc.Spec{Argv: argv, KillGrace: 200 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after") {
		t.Fatalf("Run() = %v, want a timeout", err)
	}
	if !res.TimedOut {
		t.Error("TimedOut = false, want true")
	}
	proctest.RequireGone(t, proctest.ReadPID(t, pidFile))
}

func TestRunCancelKillsGroup(t *testing.T) {
	argv, pidFile := proctest.HangingScript(t, true)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res, err := proc.Run(ctx, proc.Spec{
		Argv:      argv,
		KillGrace: 200 * time.Millisecond,
		OnLine: func(_, line string) {
			if line == "ready" {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run() = %v, want context.Canceled", err)
	}
	if res.TimedOut {
		t.Error("TimedOut = true after a cancel, want false")
	}
	proctest.RequireGone(t, proctest.ReadPID(t, pidFile))
}

func TestRunKillsStragglersAfterNormalExit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		redirect string
	}{
		{name: "straggler holds output", redirect: ""},
		{name: "straggler detached from output", redirect: ">/dev/null 2>&1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := t.TempDir() + "/straggler.pid"
			script := proctest.Script(t, `
sh -c 'trap "" TERM; echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 300' straggler "$1" `+tc.redirect+` &
while [ ! -s "$1" ]; do sleep 0.01; done
echo done
`)
			res, err := proc.Run(t.Context(), proc.Spec{Argv: []string{script, pidFile}, KillGrace: 200 * time.Millisecond})
			if err != nil {
				t.Fatalf("Run() = %v, want nil", err)
			}
			if !strings.Contains(res.Output, "done") {
				t.Errorf("Output = %q, want it to contain %q", res.Output, "done")
			}
			if res.Duration > 10*time.Second {
				t.Errorf("Duration = %v, a straggler must not hold Run for long", res.Duration)
			}
			proctest.RequireGone(t, proctest.ReadPID(t, pidFile))
		})
	}
}

func TestRunOutputBounded(t *testing.T) {
	// About 1 MB of output between a first and a last line.
	script := proctest.Script(t, `
echo FIRST
i=0
while [ $i -lt 20000 ]; do echo "0123456789012345678901234567890123456789012345678"; i=$((i+1)); done
echo LAST
`)
	var mu sync.Mutex
	lines := 0
	res, err := proc.Run(t.Context(), proc.Spec{
		Argv:        []string{script},
		Timeout:     60 * time.Second,
		OutputLimit: 1024,
		OnLine: func(string, string) {
			mu.Lock()
			lines++
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	if len(res.Output) > 1024+100 {
		t.Errorf("len(Output) = %d, want about 1024", len(res.Output))
	}
	if !strings.HasPrefix(res.Output, "FIRST\n") || !strings.HasSuffix(res.Output, "LAST\n") || !strings.Contains(res.Output, "bytes omitted") {
		t.Errorf("Output = %q, want head, omission marker and tail", res.Output)
	}
	if lines != 20002 {
		t.Errorf("OnLine called %d times, want 20002", lines)
	}
}

func TestRunOnLine(t *testing.T) {
	script := proctest.Script(t, `
echo one
echo two >&2
printf 'three\r\n'
printf 'no newline'
`)
	var mu sync.Mutex
	got := map[string][]string{}
	_, err := proc.Run(t.Context(), proc.Spec{
		Argv:    []string{script},
		Timeout: 30 * time.Second,
		OnLine: func(stream, line string) {
			mu.Lock()
			got[stream] = append(got[stream], line)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	want := map[string][]string{"stdout": {"one", "three", "no newline"}, "stderr": {"two"}}
	for stream, lines := range want {
		if strings.Join(got[stream], "|") != strings.Join(lines, "|") {
			t.Errorf("%s lines = %q, want %q", stream, got[stream], lines)
		}
	}
}

func TestRunLongLineSplit(t *testing.T) {
	script := proctest.Script(t, `head -c 10000 /dev/zero | tr '\0' x`)
	var got []int
	_, err := proc.Run(t.Context(), proc.Spec{
		Argv:    []string{script},
		Timeout: 30 * time.Second,
		OnLine:  func(_, line string) { got = append(got, len(line)) },
	})
	if err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	total := 0
	for _, n := range got {
		if n > 4096 {
			t.Errorf("OnLine got a %d-byte line, want at most 4096", n)
		}
		total += n
	}
	if total != 10000 || len(got) < 3 {
		t.Errorf("OnLine got pieces %v, want 10000 bytes in at least 3 pieces", got)
	}
}

func TestMain(m *testing.M) {
	proctest.TracerMain()
	os.Exit(m.Run())
}

// A command that does not go away on SIGKILL (simulated with a tracer that
// never lets its parent reap it, see proctest.Unkillable) must not hold Run
// for ever: Run returns ErrUnkillable after timeout + grace + ReapWait, and
// Reaped closes once the process can finally be reaped.
func TestRunUnkillable(t *testing.T) {
	snippet, release := proctest.Unkillable(t)
	script := proctest.Script(t, snippet)
	const timeout, grace = 5 * time.Second, 200 * time.Millisecond
	start := time.Now()
	res, err := proc.Run(t.Context(), proc.Spec{Argv: []string{script}, Timeout: timeout, KillGrace: grace})
	took := time.Since(start)
	if !errors.Is(err, proc.ErrUnkillable) {
		t.Fatalf("Run() = %v, want ErrUnkillable", err)
	}
	if !res.TimedOut {
		t.Error("TimedOut = false, want true")
	}
	if bound := proc.MaxDuration(timeout, grace); took < timeout || took > bound+3*time.Second {
		t.Errorf("Run took %v, want between %v and %v plus slack", took, timeout, bound)
	}
	select {
	case <-res.Reaped:
		t.Fatal("Reaped closed while the process could not be reaped")
	default:
	}
	release()
	select {
	case <-res.Reaped:
	case <-time.After(10 * time.Second):
		t.Fatal("Reaped not closed after the tracer let go")
	}
}
