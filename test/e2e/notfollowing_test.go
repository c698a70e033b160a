package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// get returns the status code and body of GET http://addr+path.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitNotFollowing waits until n's status says not following with reason
// ("": following) and returns it.
func waitNotFollowing(t *testing.T, n *clustertest.Node, reason string, timeout time.Duration) controller.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, ok := n.Status()
		if ok && s.State == controller.StateStandby && (reason == "" && s.NotFollowing == "" || reason != "" && strings.HasPrefix(s.NotFollowing, reason+": ")) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after %v: state %s, not following %q; want %q", n.ID, timeout, s.State, s.NotFollowing, reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A standby whose follow hook fails towards the new leader (it still
// replicates from the crashed one) is not following: its status says
// why, failoverd_standby_not_following is 1 and /standby answers 503;
// once the hook works again, all three say it follows.
func TestStandbyWhoseFollowFailsIsNotFollowing(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Follow: true})
	old := c.Leader()
	waitFollowed(t, c, without(c.Nodes, old.ID), old.ID, epochOf(t, old), 30*time.Second)
	// Both standbys' follow hooks fail from now on; the one that does not
	// take over is the one tested.
	survivors := without(c.Nodes, old.ID)
	for _, n := range survivors {
		waitNotFollowing(t, n, "", 30*time.Second)
		if code, body := get(t, n.AdminAddr, "/standby"); code != 200 {
			t.Fatalf("/standby of a following standby = %d %s", code, body)
		}
		if err := os.WriteFile(filepath.Join(n.Dir(), "follow-fail"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	old.Kill(syscall.SIGKILL)
	next := c.WaitLeader(old.ID, 30*time.Second)
	stuck := without(survivors, next.ID)[0]
	s := waitNotFollowing(t, stuck, controller.NotFollowingFailing, 60*time.Second)
	if !strings.Contains(s.NotFollowing, "towards the leader "+next.ID) {
		t.Errorf("not following %q, want it to name %s", s.NotFollowing, next.ID)
	}
	if code, body := get(t, stuck.AdminAddr, "/standby"); code != 503 || !strings.Contains(body, `"not_following":"follow_failing: `) {
		t.Errorf("/standby of a standby that does not follow = %d %s, want 503 naming the reason", code, body)
	}
	if _, body := get(t, stuck.AdminAddr, "/metrics"); !strings.Contains(body, "\nfailoverd_standby_not_following 1\n") {
		t.Errorf("metrics lack failoverd_standby_not_following 1")
	}
	if out, code := next.CLI("status"); code != 0 || !strings.Contains(out, "Not following: "+stuck.ID+": follow_failing") {
		t.Errorf("status exit %d, want %s not following:\n%s", code, stuck.ID, out)
	}

	if err := os.Remove(filepath.Join(stuck.Dir(), "follow-fail")); err != nil {
		t.Fatal(err)
	}
	waitNotFollowing(t, stuck, "", 60*time.Second) // the next retry, 30s apart at most
	if code, body := get(t, stuck.AdminAddr, "/standby"); code != 200 {
		t.Errorf("/standby after the follow worked = %d %s", code, body)
	}
	if _, body := get(t, stuck.AdminAddr, "/metrics"); !strings.Contains(body, "\nfailoverd_standby_not_following 0\n") {
		t.Errorf("metrics lack failoverd_standby_not_following 0")
	}
}
