// Package proc is the one place where failoverd runs external commands:
// exec health checks, the shell fencing method and the promote/demote hooks.
//
// Every command runs from an argv (never through a shell), with stdin on
// /dev/null, in its own process group, under a timeout, with bounded output.
// When the timeout expires or the context is canceled, the whole group gets
// SIGTERM, and SIGKILL once the command has exited and closed its output, or
// KillGrace later at the latest. After the command has been waited for, the
// group is always sent SIGKILL, so that background children and grandchildren
// never outlive the command, even when it exited on its own. A background
// child that keeps the command's output open delays Run by up to KillGrace.
//
// # Commands that cannot be killed
//
// A process in uninterruptible sleep (a umount on a dead disk, a hard NFS
// mount) does not go away even on SIGKILL. Run never waits for it without a
// bound: once the context is done, Run returns at the latest KillGrace +
// ReapWait later, with an error wrapping ErrUnkillable, and leaves a
// goroutine that reaps the process whenever it finally exits;
// Result.Reaped is closed then. Callers must treat such a command as still
// running (and its effects as unknown) until Reaped is closed.
//
// # Exit codes
//
// Exit status 0 is success; Run returns nil. Any other status, including
// death by a signal the command did not get from us, is returned as an
// *ExitError carrying the code and the tail of the output. A timeout or a
// canceled context is reported as such, whatever the exit status was, and is
// never an *ExitError: callers use that to tell "the command said no" from
// "the command did not answer".
//
// Only Linux-like systems are supported (process groups, kill(-pgid)).
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults applied by Run to zero fields of Spec.
const (
	DefaultKillGrace   = 2 * time.Second
	DefaultOutputLimit = 64 << 10
)

// ReapWait is how long Run waits for a command to go after SIGKILL before it
// gives up on it with ErrUnkillable. A killed process normally goes within
// milliseconds; this only has to absorb a loaded machine.
const ReapWait = time.Second

// ErrUnkillable reports a command that was still there ReapWait after
// SIGKILL (see the package documentation).
var ErrUnkillable = errors.New("did not exit after SIGKILL")

// MaxDuration is the longest Run takes for a command run with timeout and
// killGrace (0: DefaultKillGrace) when ctx has no earlier deadline.
func MaxDuration(timeout, killGrace time.Duration) time.Duration {
	if killGrace <= 0 {
		killGrace = DefaultKillGrace
	}
	return timeout + killGrace + ReapWait
}

// errTailBytes bounds how much output an error message carries; Result.Output
// has the rest.
const errTailBytes = 1024

// Spec describes one command to run.
type Spec struct {
	// Argv is the program and its arguments. Argv[0] is looked up in PATH
	// when it contains no slash. Required.
	Argv []string
	// Env holds extra KEY=VALUE pairs appended to os.Environ(); a key given
	// here overrides the inherited one.
	Env []string
	// Timeout bounds the whole run. Zero means only ctx bounds it.
	Timeout time.Duration
	// KillGrace bounds how long the command may take to exit after SIGTERM,
	// and how long its output is read after it exited, before the group is
	// sent SIGKILL. Default DefaultKillGrace.
	KillGrace time.Duration
	// OutputLimit is how many bytes of combined stdout and stderr are kept;
	// beyond it, the head and the tail are kept and the middle is dropped.
	// Default DefaultOutputLimit.
	OutputLimit int
	// OnLine, if set, is called for every line of output, with stream
	// "stdout" or "stderr" and the line without its newline. Calls for one
	// stream are sequential; calls for the two streams may be concurrent.
	// Very long lines are split.
	OnLine func(stream, line string)
}

// Result describes a finished command.
type Result struct {
	// ExitCode is the exit status, or -1 when the command did not start or
	// was killed by a signal.
	ExitCode int
	// Output is the combined stdout and stderr, bounded by Spec.OutputLimit.
	Output string
	// Duration is the wall time from start until the command was reaped.
	Duration time.Duration
	// TimedOut reports that the command was stopped because Spec.Timeout or
	// a deadline of ctx expired.
	TimedOut bool
	// Reaped is closed once the command's process has been waited for. It
	// is already closed when Run returns, except after ErrUnkillable (and
	// nil when the command did not start).
	Reaped <-chan struct{}
}

// ExitError reports a command that ran to its end and exited unsuccessfully.
type ExitError struct {
	Argv0  string
	Code   int    // exit status, -1 when killed by a signal
	Status string // as printed by os.ProcessState, e.g. "exit status 3"
	Output string // tail of the combined output, trimmed
}

func (e *ExitError) Error() string {
	if e.Output == "" {
		return fmt.Sprintf("running %s: %s", e.Argv0, e.Status)
	}
	return fmt.Sprintf("running %s: %s: output: %s", e.Argv0, e.Status, e.Output)
}

// Run runs the command described by s and waits for it and its process
// group to be gone. The error is nil only for exit status 0; see the package
// documentation for the other cases. Result is filled in as far as possible
// in every case.
func Run(ctx context.Context, s Spec) (Result, error) {
	res := Result{ExitCode: -1}
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return res, errors.New("proc: empty argv")
	}
	if s.KillGrace <= 0 {
		s.KillGrace = DefaultKillGrace
	}
	if s.OutputLimit <= 0 {
		s.OutputLimit = DefaultOutputLimit
	}
	parent := ctx
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.Timeout)
		defer cancel()
	}

	out := newHeadTail(s.OutputLimit)
	stdout := &lineWriter{stream: "stdout", out: out, onLine: s.OnLine}
	stderr := &lineWriter{stream: "stderr", out: out, onLine: s.OnLine}

	start := time.Now()
	cmd := exec.CommandContext(ctx, s.Argv[0], s.Argv[1:]...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdin = nil // /dev/null: a command waiting for input must not hang us
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	// Its own group, so that one signal reaches everything it spawned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var canceledAfter time.Duration // for the error message; Wait orders it before our read
	cmd.Cancel = func() error {
		canceledAfter = time.Since(start)
		return signalGroup(cmd.Process.Pid, syscall.SIGTERM)
	}
	// After SIGTERM (or after the leader exited while children still hold
	// its output pipes), wait this long, then SIGKILL the leader and stop
	// reading; the group-wide SIGKILL below takes care of the rest.
	cmd.WaitDelay = s.KillGrace

	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("starting %s: %w", s.Argv[0], err)
	}
	pid := cmd.Process.Pid
	reaped := make(chan struct{})
	res.Reaped = reaped
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		// Always: reap stragglers so that nothing started by the command
		// survives it, even if the leader exited by itself.
		_ = signalGroup(pid, syscall.SIGKILL)
		close(reaped)
		waited <- err
	}()
	waitErr, ok := waitBounded(ctx, waited, pid, s.KillGrace)
	res.Duration = time.Since(start)
	if !ok {
		res.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
		// The output pipes may still be written to; only what Wait's copy
		// goroutines collected so far is read, under the buffer's lock.
		res.Output = out.String()
		return res, withOutput(fmt.Errorf("running %s (pid %d): %v, and it %w (sent %s ago); left behind, reaped when it exits",
			s.Argv[0], pid, context.Cause(ctx), ErrUnkillable, ReapWait), res.Output)
	}
	stdout.flush()
	stderr.flush()
	res.Output = out.String()
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}

	// The context first: a command we killed exits non-zero, but the reason
	// is the timeout, not its answer.
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			res.TimedOut = true
			limit := s.Timeout
			if parent.Err() != nil || limit == 0 { // the caller's deadline, not ours
				limit = canceledAfter
				if limit == 0 { // it exited by itself just as the deadline came
					limit = res.Duration
				}
				limit = limit.Round(time.Millisecond)
			}
			return res, withOutput(fmt.Errorf("running %s: timed out after %s: %w", s.Argv[0], limit, err), res.Output)
		}
		return res, withOutput(fmt.Errorf("running %s: %w", s.Argv[0], context.Cause(ctx)), res.Output)
	}
	if cmd.ProcessState != nil && !cmd.ProcessState.Success() {
		return res, &ExitError{
			Argv0:  s.Argv[0],
			Code:   res.ExitCode,
			Status: cmd.ProcessState.String(),
			Output: tail(res.Output, errTailBytes),
		}
	}
	// Exit status 0. exec.ErrWaitDelay only means a background child kept
	// the output open after the command exited; it has been killed above.
	if waitErr != nil && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("running %s: %w", s.Argv[0], waitErr)
	}
	return res, nil
}

// waitBounded waits for the command's Wait. Before ctx is done it waits as
// long as it takes (the command is within its time); after, exec.Cmd sends
// SIGTERM at once and SIGKILL to the leader KillGrace later (WaitDelay); we
// SIGKILL the whole group at that point too and wait ReapWait more. ok is
// false when the command was still not reaped then.
func waitBounded(ctx context.Context, waited <-chan error, pid int, killGrace time.Duration) (err error, ok bool) {
	select {
	case err := <-waited:
		return err, true
	case <-ctx.Done():
	}
	grace := time.NewTimer(killGrace)
	defer grace.Stop()
	select {
	case err := <-waited:
		return err, true
	case <-grace.C:
	}
	_ = signalGroup(pid, syscall.SIGKILL)
	reap := time.NewTimer(ReapWait)
	defer reap.Stop()
	select {
	case err := <-waited:
		return err, true
	case <-reap.C:
		return nil, false
	}
}

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// withOutput appends the tail of output to err's message, keeping err
// inspectable with errors.Is.
func withOutput(err error, output string) error {
	t := tail(output, errTailBytes)
	if t == "" {
		return err
	}
	return &outputError{err: err, output: t}
}

type outputError struct {
	err    error
	output string
}

func (e *outputError) Error() string { return e.err.Error() + ": output: " + e.output }
func (e *outputError) Unwrap() error { return e.err }

// tail returns at most the last n bytes of s, trimmed, marking a cut.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return "..." + strings.TrimSpace(s[len(s)-n:])
}

// headTail keeps the first and last limit/2 bytes written to it, so that
// both how a command started and how it ended survive a flood of output.
type headTail struct {
	mu      sync.Mutex
	limit   int
	head    []byte
	tail    []byte // ring buffer once full
	tailPos int    // next write position in tail once full
	dropped int64
}

func newHeadTail(limit int) *headTail {
	return &headTail{limit: limit}
}

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	headMax := h.limit / 2
	tailMax := h.limit - headMax
	if room := headMax - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 {
		if len(h.tail) < tailMax {
			k := min(tailMax-len(h.tail), len(p))
			h.tail = append(h.tail, p[:k]...)
			p = p[k:]
			continue
		}
		// Full: overwrite the oldest bytes.
		k := min(tailMax-h.tailPos, len(p))
		copy(h.tail[h.tailPos:], p[:k])
		h.tailPos = (h.tailPos + k) % tailMax
		h.dropped += int64(k)
		p = p[k:]
	}
	return n, nil
}

func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b bytes.Buffer
	b.Write(h.head)
	if h.dropped > 0 {
		fmt.Fprintf(&b, "\n[... %d bytes omitted ...]\n", h.dropped)
	}
	b.Write(h.tail[h.tailPos:])
	b.Write(h.tail[:h.tailPos])
	return b.String()
}

// maxLine bounds a buffered partial line; longer lines are passed on in
// pieces so a command printing without newlines cannot grow memory.
const maxLine = 4 << 10

// lineWriter copies one stream into the shared output and hands complete
// lines to onLine. exec.Cmd gives each stream its own goroutine, so a
// lineWriter itself needs no lock.
type lineWriter struct {
	stream  string
	out     *headTail
	onLine  func(stream, line string)
	partial []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	_, _ = w.out.Write(p)
	if w.onLine == nil {
		return len(p), nil
	}
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			w.partial = append(w.partial, rest...)
			for len(w.partial) >= maxLine {
				w.emit(w.partial[:maxLine])
				w.partial = w.partial[maxLine:]
			}
			break
		}
		w.partial = append(w.partial, rest[:i]...)
		w.emit(w.partial)
		w.partial = w.partial[:0]
		rest = rest[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) emit(line []byte) {
	w.onLine(w.stream, strings.TrimSuffix(string(line), "\r"))
}

// flush passes on a last line that had no trailing newline. Call it only
// after the command has been waited for.
func (w *lineWriter) flush() {
	if w.onLine != nil && len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = nil
	}
}
