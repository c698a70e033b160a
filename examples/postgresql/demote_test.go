package postgresql

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/internal/proc/proctest"
	"github.com/failoverd/failoverd/test/freeport"
	"github.com/failoverd/failoverd/test/pgtest"
)

// TestDemoteLeavesAStartingStandbyAlone runs the demote hook against a real
// PostgreSQL: a primary is stopped and comes back as a standby; a crashed
// primary that is restarting as a standby (held in recovery by a
// restore_command that waits, while pg_control still says "in
// production") is not a primary: the demote hook and the shell fence
// leave it running and succeed.
func TestDemoteLeavesAStartingStandbyAlone(t *testing.T) {
	pg := newPG(t)
	pg.script("bootstrap.sh")
	pg.script("hooks/start.sh")
	pg.pgctl("promote", "-w", "-t", "60")
	waitFor(t, "a primary", func() bool { return pg.query("SELECT pg_is_in_recovery()") == "f" })

	// A running primary is stopped and started again as a standby.
	code, ev := pg.demote()
	if code != 0 || !strings.Contains(ev, "how=stopped-") {
		t.Fatalf("demote of a primary: exit %d, event %q; want 0 and how=stopped-*", code, ev)
	}
	waitFor(t, "a standby after the demote", func() bool { return pg.query("SELECT pg_is_in_recovery()") == "t" })

	// Primary again, then a crash; it restarts as a standby (start.sh, as
	// the unit does) and stays in recovery until the hold file goes.
	pg.pgctl("promote", "-w", "-t", "60")
	waitFor(t, "a primary", func() bool { return pg.query("SELECT pg_is_in_recovery()") == "f" })
	hold, entered := filepath.Join(pg.dir, "hold"), filepath.Join(pg.dir, "entered")
	if err := os.WriteFile(hold, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(pg.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "restore_command = 'touch %s; while [ -e %s ]; do sleep 0.05; done; false'\n", entered, hold)
	f.Close()
	pg.crash()
	start := pg.cmd(filepath.Join("hooks", "start.sh"), pg.env)
	var startOut strings.Builder
	start.Stdout, start.Stderr = &startOut, &startOut
	if err := start.Start(); err != nil {
		t.Fatal(err)
	}
	started := false
	defer func() {
		if !started {
			os.Remove(hold)
			start.Wait()
		}
	}()
	waitFor(t, "the restarting server's restore_command", func() bool { _, err := os.Stat(entered); return err == nil })
	pid := pg.pid()
	if pid == 0 {
		t.Fatal("no postmaster while it starts")
	}
	t.Logf("postmaster.pid status %q, %s", pg.pmStatus(), pg.controlState())

	code, ev = pg.demote()
	if code != 0 || strings.Contains(ev, "how=stopped") || !strings.Contains(ev, "result=ok") {
		t.Errorf("demote of a starting standby: exit %d, event %q; want 0, ok and no stop", code, ev)
	}
	if got := pg.pid(); got != pid {
		t.Errorf("postmaster %d after the demote, want %d still running", got, pid)
	}
	// The shell fence reads it the same way.
	code, ev = pg.hook("fence", []string{"FAILOVERD_TARGET_ID=node-a", "FAILOVERD_TARGET_EPOCH=7"}, "node-a="+pg.env)
	if code != 0 || !strings.Contains(ev, "how=standby") {
		t.Errorf("fence of a starting standby: exit %d, event %q; want 0 and how=standby", code, ev)
	}
	if got := pg.pid(); got != pid {
		t.Errorf("postmaster %d after the fence, want %d still running", got, pid)
	}
	os.Remove(hold)
	started = true
	if err := start.Wait(); err != nil {
		t.Fatalf("start.sh: %v\n%s", err, startOut.String())
	}
	waitFor(t, "a standby", func() bool { return pg.query("SELECT pg_is_in_recovery()") == "t" })
	if got := pg.pid(); got != pid {
		t.Errorf("postmaster %d once started, want %d", got, pid)
	}
}

// pgNode is one PostgreSQL of the example, set up as render.sh would.
type pgNode struct {
	t              *testing.T
	dir, data, env string
	port           int
}

func newPG(t *testing.T) *pgNode {
	t.Helper()
	pgtest.Require(t)
	root := t.TempDir()
	dir := filepath.Join(root, "node-a")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	osUser := currentUser(t)
	if os.Geteuid() == 0 {
		osUser = "postgres"
		u, err := user.Lookup(osUser)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		openUp(t, root)
		hooks, _ := filepath.Abs("hooks")
		openUp(t, hooks)
	}
	pg := &pgNode{t: t, dir: dir, data: filepath.Join(dir, "data"), env: filepath.Join(dir, "pg.env"),
		port: freeport.Take(t, 1)[0]}
	env := fmt.Sprintf("PGDATA=%s\nPG_HOST=127.0.0.1\nPG_PORT=%d\nPG_NAME=node_a\nPG_BINDIR=%s\nPG_OS_USER=%s\nPG_LOG=%s\nPG_START_OPTS=\"-k %s\"\n",
		pg.data, pg.port, pgtest.BinDir(), osUser, filepath.Join(dir, "postgresql.log"), dir)
	if err := os.WriteFile(pg.env, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pg.pid() != 0 {
			pg.cmd(filepath.Join(pgtest.BinDir(), "pg_ctl"), "stop", "-D", pg.data, "-m", "immediate", "-w").Run()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "postgresql.log"))
			t.Logf("postgresql.log:\n%s", b)
		}
	})
	return pg
}

// openUp lets the postgres user reach dir (t.TempDir makes 0700 ones).
func openUp(t *testing.T, dir string) {
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o011 != 0o011 {
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// cmd is a command run as the PostgreSQL OS user when the test is root
// (the hooks switch users themselves: they run as they are).
func (pg *pgNode) cmd(name string, args ...string) *exec.Cmd {
	if strings.HasSuffix(name, ".sh") {
		abs, err := filepath.Abs(name)
		if err != nil {
			pg.t.Fatal(err)
		}
		name = abs
	} else if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres", "--", name}, args...)
		name = "runuser"
	}
	c := exec.Command(name, args...)
	c.Dir = pg.dir
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return c
}

func (pg *pgNode) script(name string) {
	pg.t.Helper()
	if b, err := pg.cmd(name, pg.env).CombinedOutput(); err != nil {
		pg.t.Fatalf("%s: %v\n%s", name, err, b)
	}
}

func (pg *pgNode) pgctl(args ...string) {
	pg.t.Helper()
	args = append([]string{args[0], "-D", pg.data}, args[1:]...)
	if b, err := pg.cmd(filepath.Join(pgtest.BinDir(), "pg_ctl"), args...).CombinedOutput(); err != nil {
		pg.t.Fatalf("pg_ctl %v: %v\n%s", args, err, b)
	}
}

// demote runs hooks/demote.sh as failoverd's rpc fence would, and returns
// its exit code and event line.
func (pg *pgNode) demote() (int, string) {
	pg.t.Helper()
	return pg.hook("demote", []string{"FAILOVERD_EPOCH=7", "FAILOVERD_REASON=fence", "FAILOVERD_TIMEOUT_MS=3000"},
		"-t", "3", pg.env)
}

// hook runs hooks/NAME.sh with args and FAILOVERD_* variables (KEY=VALUE),
// and returns its exit code and event line.
func (pg *pgNode) hook(name string, env []string, args ...string) (int, string) {
	pg.t.Helper()
	events := filepath.Join(pg.t.TempDir(), "events.log")
	c := pg.cmd(filepath.Join("hooks", name+".sh"), args...)
	c.Env = append(append(os.Environ(), "FAILOVERD_EVENTS_LOG="+events, "FAILOVERD_NODE_ID=node-a"), env...)
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		pg.t.Fatalf("%s.sh: %v", name, err)
	}
	ev, _ := os.ReadFile(events)
	pg.t.Logf("%s.sh → exit %d: %s", name, code, strings.TrimSpace(string(out)))
	return code, strings.TrimSpace(string(ev))
}

// query runs sql on the server ("" when it does not answer).
func (pg *pgNode) query(sql string) string {
	v, err := pgtest.Query1("127.0.0.1:"+strconv.Itoa(pg.port), sql, 3*time.Second)
	if err != nil {
		return ""
	}
	return v
}

func (pg *pgNode) pidLines() []string {
	b, err := os.ReadFile(filepath.Join(pg.data, "postmaster.pid"))
	if err != nil {
		return nil
	}
	return strings.Split(string(b), "\n")
}

// pid is the running postmaster's pid, or 0.
func (pg *pgNode) pid() int {
	l := pg.pidLines()
	if len(l) == 0 {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(l[0]))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

func (pg *pgNode) pmStatus() string {
	if l := pg.pidLines(); len(l) >= 8 {
		return strings.TrimSpace(l[7])
	}
	return ""
}

func (pg *pgNode) controlState() string {
	out, _ := exec.Command(filepath.Join(pgtest.BinDir(), "pg_controldata"), "-D", pg.data).Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Database cluster state:") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return "no cluster state"
}

// crash kills the postmaster and its children and waits until they are
// gone, as a supervisor that cleans up would see a crash.
func (pg *pgNode) crash() {
	pid := pg.pid()
	if pid == 0 {
		pg.t.Fatal("crash: no postmaster")
	}
	kids := proctest.Children(pid)
	syscall.Kill(pid, syscall.SIGKILL)
	for _, k := range append(kids, proctest.Children(pid)...) {
		syscall.Kill(k, syscall.SIGKILL)
	}
	// A zombie postmaster still answers kill(pid, 0), and so PostgreSQL's
	// own lock-file check: wait (a while) until it is reaped.
	for deadline := time.Now().Add(30 * time.Second); syscall.Kill(pid, 0) == nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	for _, k := range kids {
		waitFor(pg.t, "the crashed postmaster's children to go", func() bool { return !proctest.Alive(k) })
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
