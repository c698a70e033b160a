// Package proctest helps tests prove that commands run through package proc
// leave no process behind.
package proctest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// HangTimeout is a timeout for runs of a HangingScript: long enough for the
// script to record its grandchild on a loaded machine before it is cut.
const HangTimeout = 3 * time.Second

// HangingScript writes an executable script into a temporary directory and
// returns the argv to run it and the file where it records a grandchild's
// pid. The script starts a grandchild that ignores SIGTERM, waits until the
// grandchild has written its pid, prints "ready" and then waits forever; with
// leaderIgnoresTerm the script itself ignores SIGTERM too. Only SIGKILL of
// the whole process group gets rid of both.
func HangingScript(t testing.TB, leaderIgnoresTerm bool) (argv []string, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	pidFile = filepath.Join(dir, "grandchild.pid")
	trap := ""
	if leaderIgnoresTerm {
		trap = "trap '' TERM\n"
	}
	script := "#!/bin/sh\n" + trap + `
sh -c 'trap "" TERM; echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 300' grandchild "$1" &
while [ ! -s "$1" ]; do sleep 0.01; done
echo ready
wait
`
	path := filepath.Join(dir, "hang.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{path, pidFile}, pidFile
}

// Script writes body into an executable /bin/sh script in a temporary
// directory and returns its path.
func Script(t testing.TB, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// ReadPID returns the pid stored in path, failing t if there is none.
func ReadPID(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %s holds %q", path, b)
	}
	return pid
}

// Alive reports whether pid exists and is not a zombie. Zombies count as
// dead: an orphan is only reaped by pid 1, which in a container may never do
// it.
func Alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	state, _, ok := stat(strconv.Itoa(pid))
	return ok && state != 'Z' && state != 'X'
}

// Children lists the pids whose parent is pid.
func Children(pid int) []int {
	var kids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if _, ppid, ok := stat(filepath.Base(d)); ok && ppid == pid {
			if k, err := strconv.Atoi(filepath.Base(d)); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// stat reads the state and the parent of /proc/PID/stat.
func stat(pid string) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": the command name may itself contain
	// spaces or parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}

// RequireGone fails t unless pid is dead within a generous bound. Commands
// run through proc are killed before Run returns, but the kernel finishes
// the job asynchronously.
func RequireGone(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for Alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // don't leak it past the test
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tracerEnv makes a test binary that calls TracerMain act as a tracer.
const tracerEnv = "PROCTEST_TRACE_PID"

// tracerWait as tracerEnv's value: read the pid from stdin.
const tracerWait = "stdin"

// TracerMain turns this process into the tracer of Unkillable when the test
// binary was started for that; call it first thing in TestMain. Otherwise it
// returns at once.
//
// The tracer attaches to a pid with PTRACE_SEIZE, prints "attached" and then
// never waits for its tracee until its stdin closes. A traced process that
// gets a signal stops for its tracer, and once killed it is a zombie that
// only its tracer can see: its real parent's wait4 does not return. To the
// parent that is exactly a process in uninterruptible sleep that does not go
// away on SIGKILL; when the tracer exits, the parent reaps it.
func TracerMain() {
	s := os.Getenv(tracerEnv)
	if s == "" {
		return
	}
	if s == tracerWait {
		// Started ahead of the tracee: its pid comes as one line on stdin.
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil {
			fmt.Fprintln(os.Stderr, "tracer: reading the pid:", err)
			os.Exit(2)
		}
		s = strings.TrimSpace(line)
	}
	pid, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracer: bad pid", s)
		os.Exit(2)
	}
	runtime.LockOSThread() // ptrace ties the tracee to this thread
	const ptraceSeize = 0x4206
	if _, _, errno := syscall.Syscall6(syscall.SYS_PTRACE, ptraceSeize, uintptr(pid), 0, 0, 0, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "tracer: PTRACE_SEIZE:", errno)
		os.Exit(1)
	}
	fmt.Println("attached")
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// Unkillable returns a piece of shell script that, when a script run
// through proc executes it, never returns and whose process (the script's
// $$, the group leader when the script is the command itself) cannot be
// reaped after SIGKILL until release is called or the test ends. It needs
// TracerMain in the test binary's TestMain and permission to ptrace one's
// own children (root, or yama ptrace_scope <= 1 with the same uid).
//
// The snippet records its pid and loops; a goroutine starts the tracer on
// it. Once traced, the script stops at its next signal (SIGCHLD of its own
// sleep, or our SIGTERM). A command that ran the snippet and was not
// attached in time just times out; Run returning ErrUnkillable proves the
// tracer held it. Each snippet works once.
func Unkillable(t testing.TB) (snippet string, release func()) {
	t.Helper()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "traced.pid")
	snippet = fmt.Sprintf(`echo $$ > %[1]q.tmp; mv %[1]q.tmp %[1]q
while :; do sleep 0.1; done
`, pidFile)

	stop := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var tracer *exec.Cmd
	var tracerIn io.WriteCloser
	release = func() {
		once.Do(func() { close(stop) })
		mu.Lock()
		defer mu.Unlock()
		if tracer != nil {
			tracerIn.Close()
			_ = tracer.Process.Kill()
			_ = tracer.Wait()
			tracer = nil
		}
	}
	t.Cleanup(release)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The tracer is started now, before the command runs, and told the pid
	// once the snippet wrote it: starting it only then (a re-exec of a
	// large -race test binary) took longer than a short hook timeout on a
	// loaded machine, and the command was killed before it was traced.
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), tracerEnv+"="+tracerWait)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the tracer: %v", err)
	}
	mu.Lock()
	tracer, tracerIn = cmd, in
	mu.Unlock()
	go func() {
		var pid []byte
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
				pid = b
				break
			}
		}
		mu.Lock()
		_, err := fmt.Fprintf(in, "%s\n", strings.TrimSpace(string(pid)))
		mu.Unlock()
		if err != nil {
			return // released meanwhile
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "attached" {
			select {
			case <-stop: // released before it attached
			default:
				t.Error("proctest: cannot ptrace the test command (needed to simulate an unkillable process)")
			}
		}
	}()
	return snippet, release
}
