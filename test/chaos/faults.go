package chaos

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// Tools for the nemeses: a private name service for the
// daemons (zk-names), a holder that makes hook processes unreapable
// (hook-unkillable), and a check that a node can still lead after a fault.

// --- Private name service -------------------------------------------------

// netNS is the daemons' own view of name resolution. Every failoverd runs
// in a mount namespace (unshare -m) where /etc/resolv.conf names
// 127.0.0.1 (nothing listens there: a lookup that reaches DNS fails at once,
// and no query leaves loopback) and /etc/hosts is a file of this run, which
// the zk-names nemesis edits to make a server name resolve or not.
type netNS struct {
	dir, hosts, resolv string
}

// namesScript bind-mounts the run's files over the system ones inside the
// namespace, then execs the daemon (same pid: signals and samples reach it).
const namesScript = `mount --bind "$FAILOVERD_CHAOS_RESOLV" /etc/resolv.conf && mount --bind "$FAILOVERD_CHAOS_HOSTS" /etc/hosts && exec "$@"`

// newNetNS writes the files and checks that this machine can run a
// command in a mount namespace. It returns nil (and why) when it cannot.
func newNetNS(dir string) (*netNS, error) {
	n := &netNS{dir: dir, hosts: filepath.Join(dir, "hosts"), resolv: filepath.Join(dir, "resolv.conf")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(n.resolv, []byte("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(n.hosts, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("unshare", n.wrap([]string{"true"})[1:]...)
	cmd.Env = append(os.Environ(), n.env()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("unshare -m (needs root or CAP_SYS_ADMIN, util-linux): %v: %s", err, bytes.TrimSpace(out))
	}
	return n, nil
}

func (n *netNS) env() []string {
	return []string{"FAILOVERD_CHAOS_RESOLV=" + n.resolv, "FAILOVERD_CHAOS_HOSTS=" + n.hosts}
}

func (n *netNS) wrap(argv []string) []string {
	return append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c", namesScript, "sh"}, argv...)
}

// setName makes name resolve to 127.0.0.1 (on) or not at all (off). The
// file is rewritten in place: it is bind-mounted, so a rename would not be
// seen. Go's resolver re-reads it when its mtime changes, at most every 5s.
func (n *netNS) setName(name string, on bool) error {
	b, err := os.ReadFile(n.hosts)
	if err != nil {
		return err
	}
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[1] == name {
			continue
		}
		out.WriteString(sc.Text() + "\n")
	}
	if on {
		out.WriteString("127.0.0.1 " + name + "\n")
	}
	return os.WriteFile(n.hosts, []byte(out.String()), 0o644)
}

// MissingServer is a server name that never resolves (the namespace's DNS
// refuses every query).
const MissingServer = "zk-missing.invalid:2181"

// flapName is the name of node's first ZooKeeper server in zk-names.
func flapName(node string) string { return "zk-flap-" + node + ".chaos.test" }

var serversRE = regexp.MustCompile(`(?m)^(\s*servers: )\[(.*)\]$`)

// namesConfig rewrites a node's config for zk-names: a server that never
// resolves first, then its first server under a name that flaps, then the
// others as they were (so a quorum always resolves).
func namesConfig(cfg []byte, node string) ([]byte, error) {
	m := serversRE.FindSubmatchIndex(cfg)
	if m == nil {
		return nil, fmt.Errorf("no servers line in the config")
	}
	servers := strings.Split(string(cfg[m[4]:m[5]]), ", ")
	_, port, ok := strings.Cut(servers[0], ":")
	if !ok {
		return nil, fmt.Errorf("server %q is not host:port", servers[0])
	}
	list := append([]string{MissingServer, flapName(node) + ":" + port}, servers[1:]...)
	var b bytes.Buffer
	b.Write(cfg[:m[4]])
	b.WriteString(strings.Join(list, ", "))
	b.Write(cfg[m[5]:])
	return b.Bytes(), nil
}

// --- Unreapable hooks -----------------------------------------------------

// hookHolder makes hook processes behave like a process in uninterruptible
// sleep (a demote doing umount on a dead disk): it attaches with ptrace
// (PTRACE_SEIZE) to every pid the hook writes to its pids file. A traced
// process stops at every signal but SIGKILL, and once killed it stays a
// zombie that only its tracer can see (Linux cascades the exit to the real
// parent when the tracer reaps it or detaches), so the daemon's wait for its
// hook does not return, whatever the daemon kills. ptrace needs no helper
// binary: the test process is the hook's ancestor (allowed even under
// Yama's ptrace_scope 1) and root here.
type hookHolder struct {
	pids string
	log  func(kind string, kv ...any)
	stop chan struct{}
	done chan struct{}
	held []int
}

const (
	ptraceSeize = 0x4206
)

func holdHooks(pidsFile string, log func(string, ...any)) *hookHolder {
	os.Remove(pidsFile)
	h := &hookHolder{pids: pidsFile, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	go h.run(ready)
	<-ready
	return h
}

// run traces from one locked OS thread (ptrace requests must come from the
// tracer thread). The thread is unlocked, not ended, when done: a Go thread
// that exits would also fire the Pdeathsig of any daemon it once started.
func (h *hookHolder) run(ready chan struct{}) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(h.done)
	close(ready)
	seen := map[int]bool{}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			h.releaseAll()
			return
		case <-tick.C:
		}
		b, _ := os.ReadFile(h.pids)
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || seen[pid] {
				continue
			}
			seen[pid] = true
			_, _, errno := syscall.Syscall6(syscall.SYS_PTRACE, ptraceSeize, uintptr(pid), 0, 0, 0, 0)
			if errno != 0 {
				h.log("hook_hold", "pid", pid, "held", false, "err", errno.Error())
				continue
			}
			h.held = append(h.held, pid)
			h.log("hook_hold", "pid", pid, "held", true)
		}
	}
}

// releaseAll kills every held hook (the disk came back) and reaps it as its
// tracer, which hands its exit to the daemon waiting for it.
func (h *hookHolder) releaseAll() {
	for _, pid := range h.held {
		syscall.Kill(pid, syscall.SIGKILL)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG|syscall.WALL, nil)
			if err != nil || (got == pid && (ws.Exited() || ws.Signaled())) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// release ends the hold.
func (h *hookHolder) release() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

// --- Can the node still lead? ---------------------------------------------

// MakeLeader makes n the leader by ceding whoever else leads, until n
// reports leader or timeout passes. A node that cannot reach ZooKeeper (it
// never connects, or its requests all fail) never gets there.
func (e *Env) MakeLeader(n *clustertest.Node, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	var lastCede time.Time
	for time.Now().Before(deadline) {
		if s, ok := n.Status(); ok && s.State == controller.StateLeader {
			return true
		}
		// Ceded nodes stay out long enough for the next cede to come
		// first, so they cannot queue up again ahead of n.
		if l := e.Leader(); l != nil && l != n && time.Since(lastCede) > 2*time.Second {
			cede(e, l, 6*time.Second)
			lastCede = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// checkRejoin logs whether n could lead again after fault id; the checker
// reports a node that could not as node_locked_out.
func (e *Env) checkRejoin(n *clustertest.Node, id int, kind string) bool {
	start := time.Now()
	ok := e.MakeLeader(n, RejoinBound)
	e.Log(KindRejoin, "node", n.ID, "ok", ok, "fault", id, "kind", kind, "took", time.Since(start).Round(time.Millisecond))
	return ok
}

// RejoinBound: how long a node has to become leader again when asked
// (ceding the others one by one): its reconnect and re-authentication,
// two graceful handovers of about a second each, the other nodes' cedes,
// with the liveness bound's slack for a loaded machine.
const RejoinBound = LivenessBound
