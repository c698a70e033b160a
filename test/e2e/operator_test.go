package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// The operator's controls with real processes: election.max_lag against a
// winner that fell behind on purpose, and a maintenance pause across a
// leader's lost lease.

// cedeNode asks n to stay out of the election for d.
func cedeNode(t *testing.T, c *clustertest.Cluster, n *clustertest.Node, d time.Duration) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.AdminAddr+"/v1/cede?for="+d.String(), nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("cede %s: %v", n.ID, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("cede %s: %s", n.ID, resp.Status)
	}
}

// positionFiles stands in for replication: every node's service.position
// is `cat` of a file the test writes every 50ms with one counter growing
// 1000/s, except for the nodes it froze.
type positionFiles struct {
	dir    string
	start  time.Time
	mu     sync.Mutex
	frozen map[string]int64
	stop   chan struct{}
	done   chan struct{}
}

const (
	e2eMaxLag      = 1500 // 1.5 s of writes: three position intervals
	e2ePosInterval = 500 * time.Millisecond
)

func newPositionFiles(t *testing.T) *positionFiles {
	p := &positionFiles{dir: t.TempDir(), start: time.Now(), frozen: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		p.write(id, 1000)
	}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			p.mu.Lock()
			v := p.now()
			for _, id := range []string{"node-a", "node-b", "node-c"} {
				if _, ok := p.frozen[id]; !ok {
					p.write(id, v)
				}
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(p.stop); <-p.done })
	return p
}

func (p *positionFiles) now() int64 { return 1000 + time.Since(p.start).Milliseconds() }

func (p *positionFiles) write(id string, v int64) {
	f := filepath.Join(p.dir, id)
	if os.WriteFile(f+".tmp", []byte(strconv.FormatInt(v, 10)+"\n"), 0o644) == nil {
		os.Rename(f+".tmp", f)
	}
}

// thaw lets id's position catch up again.
func (p *positionFiles) thaw(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.frozen, id)
	p.write(id, p.now())
}

// freeze stops id's position where it is now and returns that value.
func (p *positionFiles) freeze(id string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.now()
	p.write(id, v)
	p.frozen[id] = v
	return v
}

func (p *positionFiles) yaml(n *clustertest.Node) string {
	return fmt.Sprintf("  position:\n    command: [cat, %s]\n    interval: %s\n    timeout: %s\n", filepath.Join(p.dir, n.ID), e2ePosInterval, e2ePosInterval)
}

// A standby that fell behind on purpose (its position frozen, the leader
// publishing ever further ahead) wins the election when the leader's
// failoverd is killed, while the only other candidate is out (ceded):
// election.max_lag is all that keeps it from promoting. It must decline,
// and the caught-up node promotes when it is back. A build that ignores
// max_lag promotes the lagging node (with another candidate of the same
// priority campaigning it would only hand over, for the more advanced
// position, which is why that one is kept out).
func TestLaggingWinnerDeclinesAndACaughtUpNodeTakesOver(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{ElectionYAML: fmt.Sprintf("  max_lag: %d\n", e2eMaxLag)}, func(t *testing.T, o clustertest.Options) {
		pos := newPositionFiles(t)
		o.ServiceYAML = pos.yaml
		c := clustertest.Start(t, o)
		// On a loaded machine a leader can lose its lease while the test
		// waits; the roles are then drawn again (at most three times).
		var leader, lagging, caughtUp *clustertest.Node
		var v int64
		for attempt := 1; ; attempt++ {
			leader = c.WaitLeader("", 30*time.Second)
			lagging, caughtUp = nil, nil
			for _, n := range c.Nodes {
				switch {
				case n == leader:
				case lagging == nil:
					lagging = n
				default:
					caughtUp = n
				}
			}
			v = pos.freeze(lagging.ID)
			// The caught-up node rejoins behind the lagging one, so that the
			// lagging one is next in the fair queue.
			cedeNode(t, c, caughtUp, 300*time.Millisecond)
			waitState(t, caughtUp, 15*time.Second, controller.StateStandby, true)
			// The leader publishes a position more than max_lag ahead (sampled
			// and written once an interval): 1.5 s of lag, two intervals, slack.
			time.Sleep(e2eMaxLag*time.Millisecond + 2*e2ePosInterval + 1500*time.Millisecond)
			if c.Leader() == leader {
				break
			}
			if attempt == 3 {
				t.Fatalf("the leader changed while the test waited, three times")
			}
			t.Logf("leader moved away from %s while the test waited (attempt %d); again", leader.ID, attempt)
			pos.thaw(lagging.ID)
			time.Sleep(2 * time.Second)
		}
		// Out well past the lagging node's win: the session timeout after the
		// kill, its decision, a retry.
		const out = 14 * time.Second
		cedeNode(t, c, caughtUp, out)
		t0 := time.Now()
		leader.Kill(syscall.SIGKILL)

		// The lagging node wins and declines.
		var declined []logLine
		waitFor(t, out-2*time.Second, lagging.ID+" declining its win as lagging", func() bool {
			if p := since(c, t0, "promote", "node", lagging.ID); len(p) != 0 {
				t.Fatalf("%s promoted although it lagged more than max_lag (frozen at %d): %+v", lagging.ID, v, p)
			}
			declined = daemonLog(t, lagging, t0, "elected but not promoting")
			return len(declined) > 0
		})
		t.Logf("%s (frozen at %d) declined: %s", lagging.ID, v, declined[0].Text)
		if p := since(c, t0, "promote", "node", lagging.ID); len(p) != 0 {
			t.Fatalf("%s promoted although it lagged more than max_lag: %+v", lagging.ID, p)
		}
		// The caught-up node takes over once it is back.
		next := c.WaitLeader(leader.ID, out+30*time.Second)
		if next != caughtUp {
			t.Fatalf("%s leads, want the caught-up %s", next.ID, caughtUp.ID)
		}
		if p := since(c, t0, "promote", "node", lagging.ID); len(p) != 0 {
			t.Fatalf("%s promoted although it lagged more than max_lag: %+v", lagging.ID, p)
		}
		c.CheckNoOverlap()
	})
}

// since lists the events of kind (with key=value filters) at or after t0.
func since(c *clustertest.Cluster, t0 time.Time, kind string, kv ...string) []clustertest.Event {
	var out []clustertest.Event
	for _, e := range clustertest.Find(c.Events(), kind, kv...) {
		if !e.At.Before(t0) {
			out = append(out, e)
		}
	}
	return out
}

// waitPaused waits until every running node reports the pause (on) or
// reports none (off).
func waitPaused(t *testing.T, c *clustertest.Cluster, on bool) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("every node to report paused=%t", on), func() bool {
		for _, n := range c.Nodes {
			if st, ok := n.Status(); !ok || (st.Paused != nil) != on {
				return false
			}
		}
		return true
	})
}

// While the cluster is paused, the leader is cut off from the coordination
// service (ZooKeeper or etcd): its lease ends and it demotes (cut off, it cannot know whether the pause
// still holds), and for three session timeouts nobody else fences or
// promotes (the standbys stay out of the election, though the leader's
// session expires). After the resume a standby fences the old leader and
// promotes. A build that ignores the pause fails over a session timeout
// after the cut.
func TestPausedClusterDoesNotReplaceALeaderThatLostItsLease(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{ThroughProxy: true}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		// On a loaded machine a leader can lose its lease around the pause;
		// the test then resumes and pauses again (at most three times).
		var leader *clustertest.Node
		for attempt := 1; ; attempt++ {
			leader = c.WaitLeader("", 30*time.Second)
			if out, code := leader.CLI("pause", "--reason", "e2e maintenance"); code != 0 {
				t.Fatalf("failoverd pause: exit %d\n%s", code, out)
			}
			waitPaused(t, c, true)
			time.Sleep(time.Second) // a takeover under way ends either way
			if c.Leader() == leader {
				break
			}
			if attempt == 3 {
				t.Fatalf("the leader changed around the pause, three times")
			}
			t.Logf("leader moved away from %s around the pause (attempt %d); resuming to try again", leader.ID, attempt)
			if out, code := leader.CLI("resume"); code != 0 {
				t.Fatalf("failoverd resume: exit %d\n%s", code, out)
			}
			waitPaused(t, c, false)
		}
		t0 := time.Now()
		leader.CutOff(true)
		if _, ok := waitEvent(t, c, t0, 10*time.Second, "demote", "node", leader.ID, "reason", "lease_expired"); !ok {
			t.Fatalf("%s did not demote when its lease ended while paused", leader.ID)
		}
		hold := 3*c.SessionTimeout() + time.Second
		time.Sleep(hold)
		for _, kind := range []string{"pre_promote", "promote", "fence_attempt", "fence"} {
			if ev := since(c, t0, kind); len(ev) != 0 {
				t.Fatalf("%s while paused, %v after the leader was cut off: %+v", kind, hold, ev)
			}
		}
		if l := c.Leader(); l != nil {
			t.Fatalf("%s leads while paused", l.ID)
		}
		var other *clustertest.Node
		for _, n := range c.Nodes {
			if n != leader {
				other = n
			}
		}
		if out, code := other.CLI("resume"); code != 0 {
			t.Fatalf("failoverd resume: exit %d\n%s", code, out)
		}
		next := c.WaitLeader(leader.ID, 30*time.Second)
		if len(since(c, t0, "promote", "node", next.ID)) == 0 {
			t.Fatalf("%s leads without a promote after the resume", next.ID)
		}
		leader.CutOff(false)
		c.CheckNoOverlap()
	})
}
