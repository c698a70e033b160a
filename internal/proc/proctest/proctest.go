// Package proctest helps tests prove that commands run through package proc
// leave no process behind.
package proctest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain spaces or parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
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
