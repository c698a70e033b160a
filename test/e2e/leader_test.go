package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// leaderAnswer is one answer of GET /v1/leader.
type leaderAnswer struct {
	node   string // who was asked
	at     time.Time
	code   int // 0: no answer
	leader adminapi.Leader
	err    string
}

// askLeader asks n's GET /v1/leader.
func askLeader(n *clustertest.Node) leaderAnswer {
	a := leaderAnswer{node: n.ID}
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + n.AdminAddr + adminapi.LeaderPath)
	a.at = time.Now()
	if err != nil {
		return a
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a.code = resp.StatusCode
	if a.code == http.StatusOK {
		if err := json.Unmarshal(b, &a.leader); err != nil {
			a.err = "undecodable: " + string(b)
		}
		return a
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		a.err = "undecodable: " + string(b)
	} else {
		a.err = e.Error
	}
	return a
}

// waitAllAnswer waits until every node of nodes answers GET /v1/leader
// as ok says.
func waitAllAnswer(t *testing.T, nodes []*clustertest.Node, d time.Duration, what string, ok func(leaderAnswer) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var bad []leaderAnswer
		for _, n := range nodes {
			if a := askLeader(n); !ok(a) {
				bad = append(bad, a)
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, not every node answers GET /v1/leader with %s: %+v", d, what, bad)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// otherThan returns a node that is neither a nor b.
func otherThan(c *clustertest.Cluster, a, b *clustertest.Node) *clustertest.Node {
	for _, n := range c.Nodes {
		if n != a && n != b {
			return n
		}
	}
	return nil
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// names reports whether l is n's leadership at epoch.
func names(l adminapi.Leader, n *clustertest.Node, epoch int64) bool {
	return l.NodeID == n.ID && l.Epoch == epoch && l.Host == "127.0.0.1" && l.AdminURL == "http://"+n.AdminAddr
}

// watchLine is one line of failoverd leader --watch --json.
type watchLine struct {
	at     time.Time
	leader *adminapi.Leader // nil: {"error":"no leader"}
	raw    string
}

// Leader discovery through a crash: every node's GET /v1/leader names the
// promoted leader; while the leader is killed and its successor fences and
// promotes, every node answers 503 or a leader that was promoted at that
// moment (the old one at its epoch, or the new one only once its promote
// hook ran, which is after the fencing), epochs never go back, and in the
// end every survivor names the new leader. failoverd leader --watch --json
// printed the old leader, then possibly "no leader", then the new one, and
// exits 0 on SIGINT.
func TestLeaderDiscoveryThroughACrash(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		if old == nil {
			t.Fatal("no leader")
		}
		oldEpoch := epochOf(t, old)
		waitAllAnswer(t, c.Nodes, 30*time.Second, "the leader", func(a leaderAnswer) bool {
			return a.code == 200 && names(a.leader, old, oldEpoch)
		})

		// The watching CLI, with a survivor's config (any node's would do).
		survivor := otherThan(c, old, nil)
		fd, _ := clustertest.Binaries(t)
		watch := exec.Command(fd, "leader", "-c", survivor.Config, "--watch", "--json")
		stdout, err := watch.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		watch.Stderr = &stderr
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		defer watch.Process.Kill()
		var wmu sync.Mutex
		var lines []watchLine
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				l := watchLine{at: time.Now(), raw: sc.Text()}
				var v adminapi.Leader
				if err := json.Unmarshal(sc.Bytes(), &v); err == nil && v.NodeID != "" {
					l.leader = &v
				}
				wmu.Lock()
				lines = append(lines, l)
				wmu.Unlock()
			}
		}()
		watched := func() []watchLine {
			wmu.Lock()
			defer wmu.Unlock()
			return append([]watchLine(nil), lines...)
		}
		waitFor(t, 30*time.Second, "the watch to print the leader", func() bool { return len(watched()) > 0 })

		// Poll every node throughout the failover.
		stop := make(chan struct{})
		var pmu sync.Mutex
		var answers []leaderAnswer
		var pollers sync.WaitGroup
		for _, n := range c.Nodes {
			pollers.Add(1)
			go func() {
				defer pollers.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					a := askLeader(n)
					pmu.Lock()
					answers = append(answers, a)
					pmu.Unlock()
				}
			}()
		}
		defer func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			pollers.Wait()
		}()

		killed := time.Now()
		old.Kill(syscall.SIGKILL)
		next := c.WaitLeader(old.ID, 60*time.Second)
		newEpoch := epochOf(t, next)
		if newEpoch <= oldEpoch {
			t.Fatalf("new epoch %d not above %d", newEpoch, oldEpoch)
		}
		survivors := []*clustertest.Node{next, otherThan(c, old, next)}
		waitAllAnswer(t, survivors, 30*time.Second, "the new leader", func(a leaderAnswer) bool {
			return a.code == 200 && names(a.leader, next, newEpoch)
		})
		t.Logf("every survivor names %s (epoch %d) %v after %s was killed", next.ID, newEpoch, time.Since(killed).Round(time.Millisecond), old.ID)
		close(stop)
		pollers.Wait()

		// The new leader counts as promoted from its promote hook's start (its
		// member record says leader only after the hook succeeded), which is
		// after it fenced the old one.
		var promotedAt time.Time
		for _, p := range promotesOf(c, next.ID) {
			if p.KV["epoch"] == strconv.FormatInt(newEpoch, 10) {
				promotedAt = p.At
			}
		}
		if promotedAt.IsZero() {
			t.Fatalf("no promote event of %s at epoch %d", next.ID, newEpoch)
		}
		fences := clustertest.Find(c.Events(), "fence", "target", old.ID)
		if len(fences) == 0 || fences[0].At.After(promotedAt) {
			t.Fatalf("fence of %s %v, promote of %s at %v", old.ID, fences, next.ID, promotedAt)
		}
		lastEpoch := map[string]int64{}
		counts := map[string]int{}
		for _, a := range answers {
			switch {
			case a.code == 0:
				counts["no answer"]++ // the killed node
				continue
			case a.code == 503 && a.err != "":
				counts["503"]++
				continue
			case a.code != 200 || a.err != "":
				t.Errorf("%s answered %d %q", a.node, a.code, a.err)
				continue
			case names(a.leader, old, oldEpoch):
				counts["old"]++
			case names(a.leader, next, newEpoch):
				counts["new"]++
				if a.at.Before(promotedAt) {
					t.Errorf("%s named %s at %s, before its promote hook ran at %s (still fencing)",
						a.node, next.ID, a.at.Format("15:04:05.000000"), promotedAt.Format("15:04:05.000000"))
				}
			default:
				t.Errorf("%s named %+v, neither the old leader nor the new one", a.node, a.leader)
			}
			if a.leader.Epoch < lastEpoch[a.node] {
				t.Errorf("%s named epoch %d after %d", a.node, a.leader.Epoch, lastEpoch[a.node])
			}
			lastEpoch[a.node] = a.leader.Epoch
		}
		t.Logf("answers during the failover: %v", counts)

		// The watch: the old leader, then maybe "no leader", then the new one.
		waitFor(t, 30*time.Second, "the watch to print the new leader", func() bool {
			ls := watched()
			l := ls[len(ls)-1].leader
			return l != nil && l.NodeID == next.ID
		})
		ls := watched()
		for i, l := range ls {
			switch {
			case i == 0 && (l.leader == nil || l.leader.NodeID != old.ID || l.leader.Epoch != oldEpoch):
				t.Errorf("watch line %d %q, want the old leader %s", i, l.raw, old.ID)
			case i == len(ls)-1 && (l.leader == nil || l.leader.NodeID != next.ID || l.leader.Epoch != newEpoch ||
				l.leader.Since.IsZero() || l.at.Before(promotedAt)):
				t.Errorf("watch line %d %q at %v, want the new leader %s after its promotion", i, l.raw, l.at, next.ID)
			case i > 0 && i < len(ls)-1 && l.raw != `{"error":"no leader"}`:
				t.Errorf("watch line %d %q, want no leader between the two", i, l.raw)
			}
		}
		watch.Process.Signal(syscall.SIGINT)
		if err := watch.Wait(); err != nil {
			t.Errorf("leader --watch after SIGINT: %v (stderr %q), want exit 0", err, stderr.String())
		}
		c.CheckNoOverlap()
	})
}

// With no leader (every service unhealthy) every node answers GET
// /v1/leader with 503 "no leader" and failoverd leader exits 3; once the
// coordination service (ZooKeeper or etcd) has been gone for longer than
// the session timeout (etcd: the lease TTL), the nodes answer 503 "cannot
// tell" and failoverd leader fails (exit 1).
func TestLeaderNoneAndCoordinationGone(t *testing.T) {
	clustertest.ForEachBackend(t, clustertest.Options{}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		old := c.Leader()
		for _, n := range c.Nodes {
			if n != old {
				n.SetHealthy(false)
			}
		}
		for _, n := range c.Nodes {
			if n != old {
				waitState(t, n, 30*time.Second, controller.StateOut, false)
			}
		}
		old.SetHealthy(false)
		waitState(t, old, 30*time.Second, controller.StateOut, false)
		waitAllAnswer(t, c.Nodes, 30*time.Second, "503 no leader", func(a leaderAnswer) bool {
			return a.code == 503 && a.err == "no leader"
		})
		if out, code := old.CLI("leader"); code != 3 || out != "no leader\n" {
			t.Fatalf("failoverd leader without a leader: exit %d, %q; want 3", code, out)
		}

		// A healthy node again: it leads, and everybody says so.
		old.SetHealthy(true)
		next := c.WaitLeader("", 60*time.Second)
		epoch := epochOf(t, next)
		waitAllAnswer(t, c.Nodes, 30*time.Second, "the leader", func(a leaderAnswer) bool {
			return a.code == 200 && names(a.leader, next, epoch)
		})
		if out, code := old.CLI("leader"); code != 0 || !strings.HasPrefix(out, "leader "+next.ID+" host=127.0.0.1 address= epoch="+strconv.FormatInt(epoch, 10)+" since=") {
			t.Fatalf("failoverd leader: exit %d, %q", code, out)
		}

		// The coordination service goes: for a session timeout (etcd: the
		// lease TTL) after their last answered sync (asked every T/5) the
		// nodes may still answer their last view; after it they cannot tell.
		stopped := time.Now()
		c.StopCoordination()
		waitAllAnswer(t, c.Nodes, 30*time.Second, "503 cannot tell", func(a leaderAnswer) bool {
			return a.code == 503 && strings.Contains(a.err, "cannot tell")
		})
		if d, min := time.Since(stopped), c.SessionTimeout()*4/5; d < min {
			t.Errorf("a node could not tell %v after %s stopped, before the session timeout less one sync interval (%v)", d, c.BackendName(), min)
		}
		start := time.Now()
		if out, code := old.CLI("leader"); code != 1 || !strings.Contains(out, "cannot reach "+c.BackendName()) || time.Since(start) > 30*time.Second {
			t.Fatalf("failoverd leader without %s: exit %d after %v, %q", c.BackendName(), code, time.Since(start), out)
		}
	})
}
