package clustertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a child process a harness started (a failoverd, a service),
// its output appended to a log file and its exit awaited in the
// background.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProcess starts cmd with its output appended to logPath; it dies
// with the test binary (Pdeathsig).
func StartProcess(t testing.TB, cmd *exec.Cmd, logPath string) *Process {
	t.Helper()
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); out.Close(); close(p.done) }()
	return p
}

// Pid is the process id (0 for a nil Process).
func (p *Process) Pid() int {
	if p == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Running reports whether the process is alive.
func (p *Process) Running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process (nothing for a nil Process).
func (p *Process) Signal(sig syscall.Signal) {
	if p != nil {
		p.cmd.Process.Signal(sig)
	}
}

// Wait waits up to timeout for the process to exit and returns its exit
// error; ok is false when it still runs (true for a nil Process).
func (p *Process) Wait(timeout time.Duration) (exit error, ok bool) {
	if p == nil {
		return nil, true
	}
	select {
	case <-p.done:
		return p.err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// Kill sends SIGKILL and waits up to timeout for the exit.
func (p *Process) Kill(timeout time.Duration) bool {
	p.Signal(syscall.SIGKILL)
	_, ok := p.Wait(timeout)
	return ok
}

// KillNaming sends SIGKILL to every process (but this one) whose command
// line contains s: what a host crash ends besides the processes a harness
// tracks (the hooks a killed failoverd was running, each in its own
// process group, and what they run).
func KillNaming(s string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Tail is the last max bytes of the file at path (or why it cannot be read).
func Tail(path string, max int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
