package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
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
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
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
		// A service just started on a loaded machine can miss the probe's
		// 1s timeout: ask again for a while before concluding.
		if r := roleOf(old, 10*time.Second); r != "primary" {
			t.Fatalf("restarted service of %s says %q; the test needs it to believe it is primary", old.ID, r)
		}
		if r := roleOf(next, 10*time.Second); r != "primary" {
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
	})
}

// TestLeaderThatLostItsZnodeBeforeTheBreadcrumbWriteCannotWriteIt holds a
// newly elected leader right before its breadcrumb write (the test-only
// failpoint controller.FailpointPauseBeforeBreadcrumb) and deletes its
// election record (its znode, or its key on etcd), so that a successor wins;
// the successor is held at the same point, before its own write. Then the
// old leader writes as if its write had already been on its way: the
// breadcrumb is still what the old leader read (nobody wrote since), so a
// compare-and-set on the breadcrumb's version alone would let it through;
// only the guard in the coordination service stops it (on ZooKeeper the
// write is a multi that checks the election znode, on etcd a transaction
// that compares the election key's create revision). It must neither write
// nor promote; then the successor writes and promotes.
func TestLeaderThatLostItsZnodeBeforeTheBreadcrumbWriteCannotWriteIt(t *testing.T) {
	pauseFile := func(n *clustertest.Node) string { return filepath.Join(n.Dir(), "pause-before-breadcrumb") }
	clustertest.ForEachBackend(t, clustertest.Options{DaemonEnv: func(n *clustertest.Node) []string {
		return []string{controller.FailpointPauseBeforeBreadcrumb + "=" + pauseFile(n)}
	}}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		first := c.Leader()
		for _, n := range c.Nodes {
			if n != first {
				if err := os.WriteFile(pauseFile(n), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A crash, so that the breadcrumb stays and names the first leader.
		first.Kill(syscall.SIGKILL)
		old := waitAtFailpoint(t, c, pauseFile, first)

		before, beforeVersion, err := readBreadcrumb(t, c)
		if err != nil || before.NodeID != first.ID {
			t.Fatalf("breadcrumb while %s is held: %+v, %v; want %s's", old.ID, before, err, first.ID)
		}
		deleted := time.Now()
		if err := c.DeleteElectionRecord(t.Context(), old); err != nil {
			t.Fatal(err)
		}
		next := waitAtFailpoint(t, c, pauseFile, first, old)

		// The old leader writes now, its leadership over, nobody else written.
		released := time.Now()
		if err := os.Remove(pauseFile(old)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for len(daemonLog(t, old, released, "test failpoint: released")) == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(3 * time.Second) // room for a wrong write or promotion to show
		rec, version, err := readBreadcrumb(t, c)
		if err != nil || rec != before || version != beforeVersion {
			t.Errorf("breadcrumb after the old leader's write: %s at epoch %d (version %d, err %v), want %s's unchanged at version %d: %s wrote it after losing its election record",
				rec.NodeID, rec.Epoch, version, err, first.ID, beforeVersion, old.ID)
		}
		for _, l := range daemonLog(t, old, released, "breadcrumb") {
			t.Logf("old leader after the release: %s", l.Text)
		}

		// The successor goes on: it writes and promotes.
		if err := os.Remove(pauseFile(next)); err != nil {
			t.Fatal(err)
		}
		if l := c.WaitLeader(old.ID, 30*time.Second); l != next {
			t.Fatalf("leader %s, want the successor %s", l.ID, next.ID)
		}
		nextEpoch := epochOf(t, next)
		rec, _, err = readBreadcrumb(t, c)
		if err != nil || rec.NodeID != next.ID || rec.Epoch != nextEpoch {
			t.Errorf("breadcrumb %s at epoch %d (%v), want the successor %s at epoch %d", rec.NodeID, rec.Epoch, err, next.ID, nextEpoch)
		}
		// (It may have led before the first leader, if it lost a lease at
		// the start: only what follows the deletion counts.)
		if p := since(c, deleted, "promote", "node", old.ID); len(p) > 0 {
			t.Errorf("%s promoted after losing its election record: %v", old.ID, p[0].KV)
		}
		c.CheckNoOverlap()
	})
}

// waitAtFailpoint waits until a node other than the skipped ones is held at
// the breadcrumb failpoint, checks that it says so, and returns it.
func waitAtFailpoint(t *testing.T, c *clustertest.Cluster, pauseFile func(*clustertest.Node) string, skip ...*clustertest.Node) *clustertest.Node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.Nodes {
			if slices.Contains(skip, n) {
				continue
			}
			if _, err := os.Stat(pauseFile(n) + ".reached"); err == nil {
				if s, _ := n.Status(); s.State != controller.StateFencing {
					t.Fatalf("%s at the failpoint reports %q, want %q", n.ID, s.State, controller.StateFencing)
				}
				return n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no node reached the failpoint before its breadcrumb write")
	return nil
}

// roleOf asks n's service for its role until it answers, for at most d
// ("" when it never did).
func roleOf(n *clustertest.Node, d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		if r := n.Role(); r != "" || time.Now().After(deadline) {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readBreadcrumb reads the breadcrumb as stored, with its version (any
// write changes it).
func readBreadcrumb(t *testing.T, c *clustertest.Cluster) (breadcrumb.Record, int64, error) {
	t.Helper()
	b, version, err := c.ReadRecord(t.Context(), c.Layout().Breadcrumb())
	if err != nil {
		return breadcrumb.Record{}, 0, err
	}
	rec, err := breadcrumb.Decode(b)
	return rec, version, err
}
