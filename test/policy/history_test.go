// Package policy holds the promotion policy's end-to-end tests (real
// ZooKeeper or etcd, real failoverd processes), one file per rule, apart
// from test/e2e so that both run in parallel.
package policy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/clustertest"
)

// every completed leadership change is in the cluster's history.
// The first leader's start, a kill -9 failover (the successor fences the
// dead leader: rpc finds nobody, the shell method cuts its toy), a
// graceful stop (nothing to fence; the old leader comes from the history)
// and a failover --to: failoverd history --json lists exactly these four,
// in order, with their reasons, epochs and fence methods, and the table
// form prints them.
func TestHistoryListsEachChange(t *testing.T) {
	// A 4 s session (not 2 s) keeps a loaded machine from adding a
	// leadership change of its own: the test wants exactly four.
	clustertest.ForEachBackend(t, clustertest.Options{SessionTimeout: 4 * time.Second, EtcdLeaseTTL: 4 * time.Second}, func(t *testing.T, o clustertest.Options) {
		c := clustertest.Start(t, o)
		first := c.Leader()
		e1 := epoch(t, first)
		h := waitHistory(t, first, 1)
		want := []cluster.HistoryEntry{{NewLeader: first.ID, NewEpoch: e1, Reason: cluster.HistoryStart, FenceMethod: cluster.FenceNone}}
		checkHistory(t, h, want)

		first.Kill(syscall.SIGKILL)
		second := c.WaitLeader(first.ID, 30*time.Second)
		e2 := epoch(t, second)
		want = append(want, cluster.HistoryEntry{OldLeader: first.ID, OldEpoch: e1, NewLeader: second.ID, NewEpoch: e2,
			Reason: cluster.HistoryFailover, FenceMethod: "shell"})
		checkHistory(t, waitHistory(t, second, 2), want)

		second.Signal(syscall.SIGTERM)
		if err, exited := second.Wait(20 * time.Second); !exited || err != nil {
			t.Fatalf("%s after SIGTERM: exited %v, %v", second.ID, exited, err)
		}
		var third *clustertest.Node
		for _, n := range c.Nodes {
			if n != first && n != second {
				third = n
			}
		}
		if l := c.WaitLeader(second.ID, 30*time.Second); l != third {
			t.Fatalf("%s leads, want %s", l.ID, third.ID)
		}
		e3 := epoch(t, third)
		want = append(want, cluster.HistoryEntry{OldLeader: second.ID, OldEpoch: e2, NewLeader: third.ID, NewEpoch: e3,
			Reason: cluster.HistoryHandoff, FenceMethod: cluster.FenceNone})
		checkHistory(t, waitHistory(t, third, 3), want)

		// The gracefully stopped node comes back and is asked to lead.
		second.Start()
		if !second.WaitState(30*time.Second, "standby") {
			t.Fatalf("%s did not become a standby again", second.ID)
		}
		if out, code := third.CLI("failover", "--to", second.ID, "--timeout", "20s"); code != 0 {
			t.Fatalf("failover --to %s: exit %d\n%s", second.ID, code, out)
		}
		e4 := epoch(t, second)
		want = append(want, cluster.HistoryEntry{OldLeader: third.ID, OldEpoch: e3, NewLeader: second.ID, NewEpoch: e4,
			Reason: cluster.HistorySwitchover, FenceMethod: cluster.FenceNone})
		h = waitHistory(t, third, 4)
		checkHistory(t, h, want)
		for i, e := range h {
			if e.DurationMS <= 0 || e.At.IsZero() || e.NewHost == "" || (i > 0 && e.At.Before(h[i-1].At)) {
				t.Errorf("entry %d: at %v, took %d ms, host %q", i, e.At, e.DurationMS, e.NewHost)
			}
		}

		var api []cluster.HistoryEntry
		if err := getJSON("http://"+third.AdminAddr+"/v1/history", &api); err != nil || len(api) != len(h) {
			t.Errorf("GET /v1/history: %d entries, %v; want the %d the CLI lists", len(api), err, len(h))
		} else {
			checkHistory(t, api, want)
		}

		out, code := third.CLI("history")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[0], "TIME") {
			t.Fatalf("history: exit %d\n%s\nwant a header and four rows", code, out)
		}
		for i, w := range want {
			row := strings.Join(strings.Fields(lines[i+1]), " ")
			if !strings.Contains(row, fmt.Sprintf("%s %d %s %s", w.NewLeader, w.NewEpoch, w.Reason, w.FenceMethod)) {
				t.Errorf("history row %d %q, want %s at epoch %d, %s, fence %s", i, row, w.NewLeader, w.NewEpoch, w.Reason, w.FenceMethod)
			}
		}
	})
}

// getJSON decodes the 200 answer of GET url into v.
func getJSON(url string, v any) error {
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// epoch is n's current epoch as its admin API reports it.
func epoch(t *testing.T, n *clustertest.Node) int64 {
	t.Helper()
	st, ok := n.Status()
	if !ok || st.Epoch <= 0 {
		t.Fatalf("status of %s: %+v (answered %v)", n.ID, st, ok)
	}
	return st.Epoch
}

// waitHistory runs failoverd history --json on n until it lists at least
// want entries (the new leader appends in the background, after its
// promote hook) and returns them.
func waitHistory(t *testing.T, n *clustertest.Node, want int) []cluster.HistoryEntry {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, code := n.CLI("history", "--json")
		var h []cluster.HistoryEntry
		if code == 0 && json.Unmarshal([]byte(out), &h) == nil && len(h) >= want {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("history after 20s: exit %d\n%s\nwant %d entries", code, out, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkHistory compares the fields a test can predict.
func checkHistory(t *testing.T, got, want []cluster.HistoryEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("history has %d entries, want %d:\n got %+v\nwant %+v", len(got), len(want), got, want)
	}
	for i := range got {
		g := got[i]
		g.At, g.DurationMS, g.OldHost, g.NewHost, g.RequestedBy = time.Time{}, 0, "", "", ""
		if g != want[i] {
			t.Errorf("history entry %d\n got %+v\nwant %+v", i, g, want[i])
		}
	}
}
