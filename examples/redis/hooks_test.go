package redis

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/redistest"
)

// startRedis runs a redis-server on a free loopback port, started as the
// shipped configs start it: a read-only replica of the parking address.
func startRedis(t *testing.T) string {
	t.Helper()
	redistest.Require(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--replicaof", "127.0.0.1", "1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if v, err := redistest.Command(addr, time.Second, "PING"); err == nil && v == "PONG" {
			return addr
		}
	}
	t.Fatalf("redis-server on %s did not answer", addr)
	return ""
}

// freeAddr is a loopback address where nothing listens.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// hook runs hooks/NAME.sh with args and FAILOVERD_* variables (KEY=VALUE),
// and returns its exit code and its event line.
func hook(t *testing.T, name string, env []string, args ...string) (int, string) {
	t.Helper()
	events := filepath.Join(t.TempDir(), "events.log")
	cmd := exec.Command(filepath.Join("hooks", name+".sh"), args...)
	cmd.Env = append(append(os.Environ(), "FAILOVERD_EVENTS_LOG="+events, "FAILOVERD_NODE_ID=node-a", "FAILOVERD_CLUSTER=redis"), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s.sh: %v", name, err)
	}
	ev, _ := os.ReadFile(events)
	t.Logf("%s.sh %v → exit %d: %s", name, args, code, strings.TrimSpace(string(out)))
	return code, strings.TrimSpace(string(ev))
}

func role(t *testing.T, addr string) redistest.Role {
	t.Helper()
	r := redistest.ReadRole(addr)
	if r.Err != nil {
		t.Fatalf("ROLE on %s: %v", addr, r.Err)
	}
	return r
}

func get(t *testing.T, addr, key string) any {
	t.Helper()
	v, err := redistest.Command(addr, 2*time.Second, "GET", key)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, addr, err)
	}
	return v
}

// The promote hook makes a primary at failoverd's epoch, is idempotent,
// and refuses an epoch below the newest this Redis has seen, before it
// touches the role.
func TestPromoteHook(t *testing.T) {
	r := startRedis(t)
	if code, ev := hook(t, "promote", []string{"FAILOVERD_EPOCH=100"}, r); code != 0 || !strings.Contains(ev, "event=promote") || !strings.Contains(ev, "epoch=100") || !strings.Contains(ev, "result=ok") {
		t.Fatalf("promote: exit %d, event %q", code, ev)
	}
	if got := role(t, r); got.Role != "master" {
		t.Fatalf("after promote: %v, want master", got)
	}
	if v := get(t, r, "failoverd:epoch"); v != "100" {
		t.Errorf("failoverd:epoch = %v, want 100", v)
	}
	if code, _ := hook(t, "promote", []string{"FAILOVERD_EPOCH=100"}, r); code != 0 {
		t.Errorf("promote again at the same epoch: exit %d, want 0", code)
	}

	// A stale epoch on a replica that has seen 100: refused, still a replica.
	if code, _ := hook(t, "demote", nil, r); code != 0 {
		t.Fatalf("demote: exit %d", code)
	}
	code, ev := hook(t, "promote", []string{"FAILOVERD_EPOCH=99"}, r)
	if code != 1 || !strings.Contains(ev, "result=failed") || !strings.Contains(ev, "stale epoch 99") {
		t.Errorf("promote at a stale epoch: exit %d, event %q; want exit 1, stale epoch", code, ev)
	}
	if got := role(t, r); got.Role != "slave" {
		t.Errorf("after a refused promote: %v, want it left a replica", got)
	}
	if code, _ := hook(t, "promote", nil, r); code != 1 {
		t.Errorf("promote without FAILOVERD_EPOCH: exit %d, want 1", code)
	}
	if code, _ := hook(t, "promote", []string{"FAILOVERD_EPOCH=101"}, freeAddr(t)); code != 1 {
		t.Errorf("promote of a Redis that is not running: exit %d, want 1", code)
	}
}

// The demote hook parks a primary (a read-only replica of the parking
// address), leaves a replica's primary alone, and counts a Redis that
// refuses connections as demoted.
func TestDemoteHook(t *testing.T) {
	primary, replica := startRedis(t), startRedis(t)
	hook(t, "promote", []string{"FAILOVERD_EPOCH=7"}, primary)
	if _, err := redistest.Command(replica, time.Second, "REPLICAOF", "127.0.0.1", strings.Split(primary, ":")[1]); err != nil {
		t.Fatal(err)
	}

	code, ev := hook(t, "demote", []string{"FAILOVERD_REASON=unhealthy"}, primary)
	if code != 0 || !strings.Contains(ev, "how=parked") {
		t.Fatalf("demote of a primary: exit %d, event %q", code, ev)
	}
	if got := role(t, primary); got.Role != "slave" || got.MasterAddr != "127.0.0.1:1" {
		t.Errorf("after demote: %v, want a replica of 127.0.0.1:1", got)
	}
	if _, err := redistest.Command(primary, time.Second, "SET", "k", "v"); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Errorf("a write after demote: %v, want READONLY", err)
	}

	code, ev = hook(t, "demote", nil, replica)
	if code != 0 || !strings.Contains(ev, "how=already-replica") {
		t.Errorf("demote of a replica: exit %d, event %q", code, ev)
	}
	if got := role(t, replica); got.MasterAddr != primary {
		t.Errorf("a demoted replica replicates from %s, want its primary %s kept", got.MasterAddr, primary)
	}

	code, ev = hook(t, "demote", nil, freeAddr(t))
	if code != 0 || !strings.Contains(ev, "how=not-running") {
		t.Errorf("demote of a Redis that is not running: exit %d, event %q; want 0, not-running", code, ev)
	}
	if code, _ := hook(t, "demote", nil); code != 2 {
		t.Errorf("demote without an address: exit %d, want 2", code)
	}
}

// The fence hook finds the target's Redis in its NODE=ADDR list or in
// FAILOVERD_TARGET_ADDRESS, and parks a primary there.
func TestFenceHook(t *testing.T) {
	a, b := startRedis(t), startRedis(t)
	hook(t, "promote", []string{"FAILOVERD_EPOCH=7"}, a)
	hook(t, "promote", []string{"FAILOVERD_EPOCH=8"}, b)

	env := []string{"FAILOVERD_TARGET_ID=node-a", "FAILOVERD_TARGET_EPOCH=7", "FAILOVERD_TARGET_HOST=127.0.0.1"}
	code, ev := hook(t, "fence", env, "node-b="+b, "node-a="+a)
	if code != 0 || !strings.Contains(ev, "target=node-a") || !strings.Contains(ev, "how=parked") || !strings.Contains(ev, "redis="+a) {
		t.Fatalf("fence by map: exit %d, event %q", code, ev)
	}
	if got := role(t, a); got.Role != "slave" {
		t.Errorf("fenced Redis: %v, want a replica", got)
	}
	if got := role(t, b); got.Role != "master" {
		t.Errorf("the other Redis: %v, want it untouched", got)
	}

	env = []string{"FAILOVERD_TARGET_ID=node-b", "FAILOVERD_TARGET_EPOCH=8", "FAILOVERD_TARGET_ADDRESS=" + b}
	if code, ev := hook(t, "fence", env); code != 0 || !strings.Contains(ev, "how=parked") {
		t.Errorf("fence by FAILOVERD_TARGET_ADDRESS: exit %d, event %q", code, ev)
	}
	if code, ev := hook(t, "fence", []string{"FAILOVERD_TARGET_ID=node-c"}, "node-a="+a); code != 1 || !strings.Contains(ev, "no Redis address") {
		t.Errorf("fence of an unknown node: exit %d, event %q; want 1", code, ev)
	}
	fail := filepath.Join(t.TempDir(), "fail")
	os.WriteFile(fail, nil, 0o644)
	if code, _ := hook(t, "fence", []string{"FAILOVERD_TARGET_ID=node-a", "FAILOVERD_FENCE_FAIL_FILE=" + fail}, "node-a="+a); code != 1 {
		t.Errorf("fence while FAILOVERD_FENCE_FAIL_FILE exists: exit %d, want 1", code)
	}
	if code, ev := hook(t, "fence", []string{"FAILOVERD_TARGET_ID=node-a"}, "node-a="+freeAddr(t)); code != 0 || !strings.Contains(ev, "how=refused") {
		t.Errorf("fence of a Redis that is not running: exit %d, event %q; want 0, refused", code, ev)
	}
}

// The follow hook re-points a replica at the leader's address, changes
// nothing when it already follows it, parks a primary when there is no
// leader, and refuses to follow this node itself.
func TestFollowHook(t *testing.T) {
	leader, r := startRedis(t), startRedis(t)
	hook(t, "promote", []string{"FAILOVERD_EPOCH=9"}, leader)
	env := []string{"FAILOVERD_LEADER_ID=node-b", "FAILOVERD_LEADER_ADDRESS=" + leader, "FAILOVERD_LEADER_EPOCH=9", "FAILOVERD_REASON=leader_changed"}

	code, ev := hook(t, "follow", env, r)
	if code != 0 || !strings.Contains(ev, "how=repointed") {
		t.Fatalf("follow: exit %d, event %q", code, ev)
	}
	if got := role(t, r); got.Role != "slave" || got.MasterAddr != leader {
		t.Fatalf("after follow: %v, want a replica of %s", got, leader)
	}
	if code, ev := hook(t, "follow", env, r); code != 0 || !strings.Contains(ev, "how=already") {
		t.Errorf("follow again: exit %d, event %q; want already", code, ev)
	}
	deadline := time.Now().Add(30 * time.Second)
	for get(t, r, "failoverd:epoch") != "9" {
		if time.Now().After(deadline) {
			t.Fatal("the replica never received failoverd:epoch from its primary")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// No leader: a primary is parked, a replica keeps its primary.
	noLeader := []string{"FAILOVERD_REASON=no_leader"}
	if code, ev := hook(t, "follow", noLeader, r); code != 0 || !strings.Contains(ev, "how=already-replica") {
		t.Errorf("no-leader follow of a replica: exit %d, event %q", code, ev)
	}
	if code, ev := hook(t, "follow", noLeader, leader); code != 0 || !strings.Contains(ev, "how=parked") {
		t.Errorf("no-leader follow of a primary: exit %d, event %q", code, ev)
	}
	if got := role(t, leader); got.Role != "slave" {
		t.Errorf("after a no-leader follow: %v, want a replica", got)
	}

	self := []string{"FAILOVERD_LEADER_ID=node-a", "FAILOVERD_LEADER_ADDRESS=" + leader}
	if code, _ := hook(t, "follow", self, r); code != 1 {
		t.Errorf("follow of this node itself: exit %d, want 1", code)
	}
	noAddr := []string{"FAILOVERD_LEADER_ID=node-b", "FAILOVERD_LEADER_HOST=127.0.0.1"}
	if code, ev := hook(t, "follow", noAddr, r); code != 1 || !strings.Contains(ev, "no node.service_address") {
		t.Errorf("follow of a leader without an address: exit %d, event %q; want 1", code, ev)
	}
}
