package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// roleSample is what every toy service said its role was at one moment.
type roleSample struct {
	at    time.Time // when the probe began asking
	roles map[string]string
}

// probeRoles asks every toy service for its role every 20 ms until stop is
// called, which returns the samples.
func probeRoles(c *clustertest.Cluster) (stop func() []roleSample) {
	var (
		mu      sync.Mutex
		samples []roleSample
		wg      sync.WaitGroup
	)
	quit := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s := roleSample{at: time.Now(), roles: map[string]string{}}
			for _, n := range c.Nodes {
				s.roles[n.ID] = n.Role()
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() []roleSample {
		close(quit)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return samples
	}
}

// primaries lists the nodes whose service answered primary.
func (s roleSample) primaries() []string {
	var p []string
	for id, r := range s.roles {
		if r == "primary" {
			p = append(p, id)
		}
	}
	return p
}

// logLine is one line of a failoverd text log.
type logLine struct {
	At   time.Time
	Text string
}

// daemonLog reads a node's failoverd log (slog text format), keeping the
// lines at or after since that contain every one of want.
func daemonLog(t *testing.T, n *clustertest.Node, since time.Time, want ...string) []logLine {
	t.Helper()
	f, err := os.Open(filepath.Join(n.Dir(), "failoverd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for sc.Scan() {
		text := sc.Text()
		stamp, ok := strings.CutPrefix(text, "time=")
		if !ok {
			continue
		}
		stamp, _, _ = strings.Cut(stamp, " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || at.Before(since.Truncate(time.Millisecond)) {
			continue
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				continue lines
			}
		}
		out = append(out, logLine{At: at, Text: text})
	}
	return out
}

// waitEvent waits until the events log has an event of kind matching kv,
// written at or after since.
func waitEvent(t *testing.T, c *clustertest.Cluster, since time.Time, timeout time.Duration, kind string, kv ...string) (clustertest.Event, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, e := range clustertest.Find(c.Events(), kind, kv...) {
			if !e.At.Before(since) {
				return e, true
			}
		}
		if time.Now().After(deadline) {
			return clustertest.Event{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServiceBackFromHostCrashIsDemotedBeforeItsDaemonJoins: a leader's host
// crashes (failoverd and service killed together), a successor takes over
// (its fence cannot reach the dead service), then the old service comes back
// first, believing it is still primary at its old epoch, and only then its
// failoverd. The daemon must stand the service down before it joins the
// election, and from that demote on no two services are ever primary.
func TestServiceBackFromHostCrashIsDemotedBeforeItsDaemonJoins(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	old := c.Leader()
	oldEpoch := epochOf(t, old)

	old.KillToy()
	old.Kill(syscall.SIGKILL)
	next := c.WaitLeader(old.ID, 30*time.Second)
	if len(clustertest.Find(c.Events(), "fence", "target", old.ID)) == 0 {
		t.Fatal("the crashed leader was not fenced")
	}

	// The service comes back as it was: primary at the old epoch.
	old.ReviveToyAsIs()
	if r := old.Role(); r != "primary" {
		t.Fatalf("restarted service of %s says %q; the test needs it to believe it is primary", old.ID, r)
	}
	if r := next.Role(); r != "primary" {
		t.Fatalf("successor's service says %q, want primary", r)
	}

	stop := probeRoles(c)
	started := time.Now()
	old.Start()
	demote, ok := waitEvent(t, c, started, 20*time.Second, "demote", "node", old.ID, "reason", "startup")
	joinDeadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(joinDeadline) {
		if s, up := old.Status(); up && s.State == controller.StateStandby {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // keep probing while the cluster settles
	samples := stop()

	// It demoted before it joined the election (the controller says
	// standby, with reason healthy, right before it starts campaigning).
	joins := daemonLog(t, old, started, `msg="state transition"`, "to=standby")
	if len(joins) == 0 {
		t.Fatalf("%s never joined the election after its restart", old.ID)
	}
	from, what := joins[0].At, "it joined the election"
	if !ok {
		t.Errorf("%s's failoverd did not demote its service at startup (no demote event with reason startup)", old.ID)
	} else {
		t.Logf("startup demote %v after the daemon was started, %v before it joined the election",
			demote.At.Sub(started).Round(time.Millisecond), joins[0].At.Sub(demote.At).Round(time.Millisecond))
		if !demote.At.Before(joins[0].At) {
			t.Errorf("%s joined the election at %s, before its startup demote at %s",
				old.ID, joins[0].At.Format("15:04:05.000"), demote.At.Format("15:04:05.000000"))
		}
		from, what = demote.At, "the startup demote"
	}

	// From the startup demote on, never two primaries, and never the old one.
	var checked, bad int
	for _, s := range samples {
		if !s.at.After(from) {
			continue
		}
		checked++
		if p := s.primaries(); len(p) > 1 || s.roles[old.ID] == "primary" {
			if bad++; bad == 1 {
				t.Errorf("at %s (%v after %s) primaries: %v",
					s.at.Format("15:04:05.000"), s.at.Sub(from).Round(time.Millisecond), what, p)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d role samples after %s show two primaries or the old one", bad, checked, what)
	} else if checked < 20 {
		t.Errorf("only %d role samples after %s; the probe proves little", checked, what)
	}
	if r := old.Role(); r != "standby" {
		t.Errorf("old service role %q, want standby", r)
	}
	if l := c.Leader(); l == nil || l.ID != next.ID {
		t.Errorf("leader after the old node came back = %v, want %s", l, next.ID)
	}
	for _, p := range promotesOf(c, old.ID) {
		if p.At.After(started) {
			t.Errorf("%s promoted again after its restart: %v", old.ID, p.KV)
		}
	}
	t.Logf("old leader epoch %d; successor %s at epoch %d", oldEpoch, next.ID, epochOf(t, next))
	c.CheckNoOverlap()
}

// TestLeaderThatLostItsZnodeBeforeTheBreadcrumbWriteCannotWriteIt holds a
// newly elected leader right before its breadcrumb write (the test-only
// failpoint controller.FailpointPauseBeforeBreadcrumb), deletes its election
// znode so that a successor wins, fences and writes its own breadcrumb, then
// lets the old one write as if the write had already been on its way: only
// the guard in ZooKeeper (the write is a multi that checks the election
// znode) stands between it and the successor's breadcrumb. It must neither
// overwrite the breadcrumb nor promote.
func TestLeaderThatLostItsZnodeBeforeTheBreadcrumbWriteCannotWriteIt(t *testing.T) {
	pauseFile := func(n *clustertest.Node) string { return filepath.Join(n.Dir(), "pause-before-breadcrumb") }
	c := clustertest.Start(t, clustertest.Options{DaemonEnv: func(n *clustertest.Node) []string {
		return []string{controller.FailpointPauseBeforeBreadcrumb + "=" + pauseFile(n)}
	}})
	first := c.Leader()
	for _, n := range c.Nodes {
		if n != first {
			if err := os.WriteFile(pauseFile(n), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	first.Kill(syscall.SIGTERM)

	// The next in line stops at the failpoint; the other must not.
	var paused *clustertest.Node
	deadline := time.Now().Add(30 * time.Second)
	for paused == nil && time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if _, err := os.Stat(pauseFile(n) + ".reached"); err == nil {
				paused = n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if paused == nil {
		t.Fatal("no node reached the failpoint before its breadcrumb write")
	}
	for _, n := range c.Nodes {
		if n != paused {
			os.Remove(pauseFile(n))
		}
	}
	if s, _ := paused.Status(); s.State != controller.StateFencing {
		t.Fatalf("%s at the failpoint reports %q, want %q", paused.ID, s.State, controller.StateFencing)
	}

	// Take its election znode away; the successor wins.
	sess := openSession(t, c)
	dir := controller.ElectionDir("/failoverd", "e2e")
	kids, err := sess.Children(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	deleted := false
	for _, k := range kids {
		b, _, err := sess.Get(t.Context(), dir+"/"+k)
		var cand struct {
			NodeID string `json:"node_id"`
		}
		if err != nil || json.Unmarshal(b, &cand) != nil || cand.NodeID != paused.ID {
			continue
		}
		if err := sess.Delete(t.Context(), dir+"/"+k, -1); err != nil {
			t.Fatalf("deleting %s's election znode %s: %v", paused.ID, k, err)
		}
		deleted = true
	}
	if !deleted {
		t.Fatalf("no election znode of %s among %v", paused.ID, kids)
	}
	next := c.WaitLeader(paused.ID, 30*time.Second)
	nextEpoch := epochOf(t, next)
	bc := breadcrumb.Path("/failoverd", "e2e")
	if rec, _, err := breadcrumb.Read(t.Context(), sess, bc); err != nil || rec.NodeID != next.ID {
		t.Fatalf("breadcrumb before the release: %+v, %v; want %s's", rec, err, next.ID)
	}

	// Let the old leader write.
	released := time.Now()
	if err := os.Remove(pauseFile(paused)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for len(daemonLog(t, paused, released, "test failpoint: released")) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // room for a wrong write or promotion to show

	rec, _, err := breadcrumb.Read(t.Context(), sess, bc)
	if err != nil {
		t.Fatalf("reading the breadcrumb: %v", err)
	}
	if rec.NodeID != next.ID || rec.Epoch != nextEpoch {
		t.Errorf("breadcrumb names %s at epoch %d, want the successor %s at epoch %d: the old leader wrote it after losing its znode",
			rec.NodeID, rec.Epoch, next.ID, nextEpoch)
	}
	if p := promotesOf(c, paused.ID); len(p) > 0 {
		t.Errorf("%s promoted after losing its election znode: %v", paused.ID, p[0].KV)
	}
	for _, l := range daemonLog(t, paused, released, "breadcrumb") {
		t.Logf("old leader after the release: %s", l.Text)
	}
	if l := c.Leader(); l == nil || l.ID != next.ID {
		t.Errorf("leader after the release = %v, want %s", l, next.ID)
	}
	c.CheckNoOverlap()
}
