package redis

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/redistest"
)

// position runs hooks/position.sh on addr and returns what failoverd would
// make of its stdout (controller.ParsePosition; -1: unknown) and its exit
// code.
func position(t *testing.T, addr string) (int64, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join("hooks", "position.sh"), "-t", "2", addr)
	cmd.Env = append(os.Environ(), "FAILOVERD_NODE_ID=node-a", "FAILOVERD_CLUSTER=redis")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("position.sh: %v", err)
	}
	pos, perr := controller.ParsePosition(stdout.String())
	if perr != nil {
		if code == 0 {
			t.Fatalf("position.sh %s exited 0 with unusable output %q: %v", addr, stdout.String(), perr)
		}
		pos = -1
	}
	if code != 0 && stdout.Len() > 0 {
		t.Errorf("position.sh %s failed (exit %d) but printed %q on stdout", addr, code, stdout.String())
	}
	t.Logf("position.sh %s → exit %d, %q %s", addr, code, strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()))
	return pos, code
}

// write stores n keys of about 100 bytes on the primary addr.
func write(t *testing.T, addr, prefix string, n int) {
	t.Helper()
	c, err := redistest.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range n {
		if _, err := c.Do("SET", prefix+strconv.Itoa(i), strings.Repeat("x", 100)); err != nil {
			t.Fatalf("SET on %s: %v", addr, err)
		}
	}
}

// The position command against real redis-servers: the primary's and a
// connected replica's positions meet; a replica cut off from its primary
// keeps its position while the primary's grows past it by what was
// written; a promoted replica keeps its position (the offsets carry over);
// a Redis that is not running has no position (exit 1, nothing printed).
func TestPositionHook(t *testing.T) {
	primary, r := startRedis(t), startRedis(t)
	hook(t, "promote", []string{"FAILOVERD_EPOCH=3"}, primary)
	write(t, primary, "a", 50)
	env := []string{"FAILOVERD_LEADER_ID=node-b", "FAILOVERD_LEADER_ADDRESS=" + primary, "FAILOVERD_REASON=leader_changed"}
	if code, ev := hook(t, "follow", env, r); code != 0 {
		t.Fatalf("follow: exit %d, event %q", code, ev)
	}
	var pp, pr int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		pp, _ = position(t, primary)
		pr, _ = position(t, r)
		if pp > 0 && pp == pr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica's position %d never reached the primary's %d", pr, pp)
		}
	}

	// Cut off (its primary address now leads nowhere): it stays behind.
	if _, err := redistest.Command(r, 2*time.Second, "REPLICAOF", "127.0.0.1", "1"); err != nil {
		t.Fatal(err)
	}
	write(t, primary, "b", 100) // > 100 × 100 bytes of stream
	pp2, _ := position(t, primary)
	pr2, _ := position(t, r)
	if pr2 != pr || pp2-pp < 100*100 {
		t.Fatalf("after 100 writes to the primary only: primary %d → %d, cut-off replica %d → %d; want the primary %d+ ahead, the replica unchanged",
			pp, pp2, pr, pr2, 100*100)
	}

	// Promoted, it continues from its own offset (plus promote.sh's
	// write of the epoch key), not from 0 nor from the old primary's.
	if code, _ := hook(t, "promote", []string{"FAILOVERD_EPOCH=4"}, r); code != 0 {
		t.Fatal("promote of the replica failed")
	}
	pr3, code := position(t, r)
	if code != 0 || pr3 < pr2 || pr3 > pr2+1000 {
		t.Errorf("the promoted replica's position %d (exit %d), want about %d", pr3, code, pr2)
	}
	write(t, r, "c", 10)
	if got, _ := position(t, r); got <= pr3 {
		t.Errorf("the promoted replica's position %d did not grow with writes (was %d)", got, pr3)
	}

	if got, code := position(t, freeAddr(t)); code != 1 || got != -1 {
		t.Errorf("position of a Redis that is not running: %d, exit %d; want unknown, exit 1", got, code)
	}
}
