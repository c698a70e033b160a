package policy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/redistest"
)

// exampleMaxLag is election.max_lag in the shipped Redis example configs.
const exampleMaxLag = 1 << 20

// Data freshness, with the Redis example (service.position:
// hooks/position.sh, election.max_lag 1 MiB): one replica stops
// replicating (REPLICAOF the parking address: its follow hook runs only
// when the leader changes, so nothing repairs it meanwhile), the primary
// takes more than max_lag of writes, the caught-up replica holds them all
// and the leader publishes its position; then the primary dies (kill -9
// of failoverd and Redis). The lagging replica is next in the election
// queue (the caught-up one rejoined behind it), so it wins first and must
// refuse: the caught-up one is promoted with every write, the lagging one
// never runs promote, and its log, status and failoverd status say why.
func TestLaggingReplicaNotPromoted(t *testing.T) {
	began := time.Now()
	c := redistest.Start(t, redistest.Options{})
	primary := c.CurrentLeader()
	if primary == nil {
		t.Fatal("no leader after start")
	}
	others := c.Others(primary)
	lagging, caught := others[0], others[1]

	// caught rejoins the election behind lagging.
	caught.Kill(syscall.SIGTERM)
	caught.Start()
	waitStatus(t, caught, 30*time.Second, "a standby with a position", func(s controller.Status) bool {
		return s.State == controller.StateStandby && s.Position != nil
	})
	checkQueue(t, caught, primary.ID, lagging.ID, caught.ID)
	for _, n := range c.Nodes {
		waitStatus(t, n, 30*time.Second, "a position", func(s controller.Status) bool { return s.Position != nil })
	}

	if _, err := redistest.Do(lagging, "REPLICAOF", "127.0.0.1", "1"); err != nil {
		t.Fatal(err)
	}
	before := replOffset(t, lagging)
	writeBytes(t, primary, 2*exampleMaxLag)
	target := replOffset(t, primary)
	if target-before <= exampleMaxLag {
		t.Fatalf("the primary's offset moved %d, want more than max_lag %d", target-before, exampleMaxLag)
	}
	deadline := time.Now().Add(20 * time.Second)
	for replOffset(t, caught) < target {
		if time.Now().After(deadline) {
			t.Fatalf("%s's Redis never received the writes (offset %d < %d)", caught.ID, replOffset(t, caught), target)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := replOffset(t, lagging); got != before {
		t.Fatalf("%s's Redis moved from %d to %d while cut off", lagging.ID, before, got)
	}
	waitStatus(t, caught, 10*time.Second, "its position published", func(s controller.Status) bool {
		return s.Position != nil && *s.Position >= target
	})
	var lp *cluster.LeaderPosition
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if lp = leaderPosition(t, caught); lp != nil && lp.NodeID == primary.ID && lp.Position >= target {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader position record is %+v, want %s's at %d or more", lp, primary.ID, target)
		}
	}
	lagPos := int64(-1)
	if s, ok := lagging.Status(); ok && s.Position != nil {
		lagPos = *s.Position
	}
	if lagPos < 0 || lp.Position-lagPos <= exampleMaxLag {
		t.Fatalf("%s publishes position %d; want it more than %d behind the leader's %d", lagging.ID, lagPos, exampleMaxLag, lp.Position)
	}
	// failoverd status shows it too (the primary's replication pings move
	// the numbers on a little meanwhile).
	out, code := caught.CLI("status")
	if lag := statusLag(out, lagging.ID); code != 0 || !strings.Contains(out, "Leader position: ") || lag <= exampleMaxLag {
		t.Errorf("failoverd status (exit %d) shows %s's LAG %d, want more than %d, and the leader position:\n%s",
			code, lagging.ID, lag, exampleMaxLag, out)
	}

	checkQueue(t, caught, primary.ID, lagging.ID, caught.ID)
	killed := time.Now()
	primary.Kill(syscall.SIGKILL)
	primary.CrashService()
	next := c.WaitLeader(primary.ID, 45*time.Second)
	if next != caught {
		t.Fatalf("%s was promoted; want %s, the caught-up replica (%s is %d behind the leader's last position)",
			next.ID, caught.ID, lagging.ID, lp.Position-lagPos)
	}
	if got := replOffset(t, caught); got < target {
		t.Errorf("the new primary's offset %d is below the old one's %d", got, target)
	}
	if promotes := clustertest.Find(c.EventsSince(killed), "promote", "node", lagging.ID); len(promotes) > 0 {
		t.Errorf("%s ran promote although it lagged: %v", lagging.ID, promotes)
	}

	// Why, from the lagging node (it won the election first): its log,
	// its status and its metrics.
	log := lagging.DaemonLog()
	if !strings.Contains(log, "lagging") || !strings.Contains(log, "behind") || !strings.Contains(log, "max_lag") {
		t.Errorf("%s's log does not say that it lags (want 'lagging', 'behind' and 'max_lag'); it ends:\n%s", lagging.ID, tailOf(log, 3000))
	}
	if s, ok := lagging.Status(); !ok || !strings.Contains(s.LastError, "lagging") {
		t.Errorf("%s's status last_error %q, want it to say it lags", lagging.ID, s.LastError)
	}
	m := scrape(t, lagging)
	if !strings.Contains(m, "\nfailoverd_position ") || counter(m, `failoverd_promotion_declined_total{reason="lagging"}`) < 1 {
		t.Errorf("%s's /metrics: want failoverd_position and failoverd_promotion_declined_total{reason=\"lagging\"} >= 1:\n%s",
			lagging.ID, grepLines(m, "failoverd_position", "failoverd_promotion_declined"))
	}
	t.Logf("took %v (the lagging replica %s was %d behind, max_lag %d)", time.Since(began).Round(time.Second), lagging.ID, lp.Position-lagPos, exampleMaxLag)
}

// waitStatus waits until n's /v1/status satisfies ok.
func waitStatus(t *testing.T, n *redistest.Node, d time.Duration, what string, ok func(controller.Status) bool) controller.Status {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s, up := n.Status()
		if up && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %s within %v (status %+v)", n.ID, what, d, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// replOffset is master_repl_offset of n's Redis (what position.sh prints).
func replOffset(t *testing.T, n *redistest.Node) int64 {
	t.Helper()
	v, err := redistest.Do(n, "INFO", "replication")
	if err != nil {
		t.Fatalf("INFO on %s: %v", n.ID, err)
	}
	s, _ := v.(string)
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_repl_offset:"); ok {
			off, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: master_repl_offset %q", n.ID, v)
			}
			return off
		}
	}
	t.Fatalf("%s: no master_repl_offset in %q", n.ID, s)
	return 0
}

// writeBytes writes about size bytes of values to n's Redis.
func writeBytes(t *testing.T, n *redistest.Node, size int) {
	t.Helper()
	conn, err := redistest.Dial(n.ServiceAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	value := strings.Repeat("v", 1024)
	for i := range size / len(value) {
		if _, err := conn.Do("SET", "lag:"+strconv.Itoa(i), value); err != nil {
			t.Fatalf("SET on %s: %v", n.ID, err)
		}
	}
}

// checkQueue fails the test unless the election queue is want: the test
// is about what the lagging node does when it wins first.
func checkQueue(t *testing.T, n *redistest.Node, want ...string) {
	t.Helper()
	out, code := n.CLI("status", "--json")
	var v struct {
		Queue []string `json:"election_queue"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || strings.Join(v.Queue, " ") != strings.Join(want, " ") {
		t.Fatalf("election queue %v (exit %d), want %v (did a node leave the election meanwhile?)", v.Queue, code, want)
	}
}

// leaderPosition is the leader position record as failoverd status
// --json shows it (nil: none).
func leaderPosition(t *testing.T, n *redistest.Node) *cluster.LeaderPosition {
	t.Helper()
	out, code := n.CLI("status", "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d\n%s", code, out)
	}
	var v struct {
		LeaderPosition *cluster.LeaderPosition `json:"leader_position"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return v.LeaderPosition
}

// statusLag is the LAG column of node id's row in failoverd status's
// table (-1: none). The table is aligned: the value starts where its
// header does.
func statusLag(out, id string) int64 {
	col := -1
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "NODE") {
			col = strings.Index(line+" ", " LAG ") + 1
			continue
		}
		if f := strings.Fields(line); col > 0 && len(f) > 0 && f[0] == id && len(line) > col {
			if v := strings.Fields(line[col:]); len(v) > 0 {
				if lag, err := strconv.ParseInt(v[0], 10, 64); err == nil {
					return lag
				}
			}
		}
	}
	return -1
}

// scrape reads n's /metrics.
func scrape(t *testing.T, n *redistest.Node) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://%s/metrics", n.AdminAddr))
	if err != nil {
		t.Errorf("GET /metrics of %s: %v", n.ID, err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// counter is the value of the series named exactly so in a /metrics text
// (-1: absent).
func counter(metrics, series string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// grepLines keeps the lines of s that contain one of words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
