package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/freeport"
	"github.com/failoverd/failoverd/test/zktest"
)

// failoverd history against a real ZooKeeper: "no history" (or []) and
// exit 0 before any change, the table (newest last) and the JSON list
// after, --limit, and exit 1 with the reason for an unreadable record or
// an unreachable ZooKeeper.
func TestHistoryCommand(t *testing.T) {
	zkc := zktest.Start(t, 1)
	conf := writeLeaderConfig(t, zkc.Addrs()[0])
	history := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(append([]string{"history", "-c", conf}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	if out, errs, code := history(); code != exitOK || out != "no history\n" {
		t.Fatalf("history without any: exit %d, %q, %q", code, out, errs)
	}
	if out, _, code := history("--json"); code != exitOK || out != "[]\n" {
		t.Fatalf("history --json without any: exit %d, %q", code, out)
	}

	client, err := zk.NewClient(zk.Config{Servers: zkc.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := t.Context()
	sess, err := client.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	layout := cluster.Layout{Root: "/failoverd", Cluster: "lc"}
	if err := sess.EnsurePath(ctx, layout.Dir()); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 23, 17, 30, 0, 0, time.UTC)
	entries := []cluster.HistoryEntry{
		{At: at, NewLeader: "a", NewEpoch: 3, Reason: cluster.HistoryStart, FenceMethod: cluster.FenceNone, DurationMS: 120},
		{At: at.Add(time.Minute), OldLeader: "a", OldEpoch: 3, NewLeader: "b", NewEpoch: 9, Reason: cluster.HistoryFailover, FenceMethod: "rpc", DurationMS: 2500},
	}
	data, _ := json.Marshal(entries)
	if _, _, err := sess.Create(ctx, layout.History(), data, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	out, errs, code := history()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("history: exit %d, %q, %q; want a header and two rows", code, out, errs)
	}
	for i, want := range [][]string{
		{at.Local().Format(time.DateTime), "-", "a", "3", "start", "none", "120ms"},
		{at.Add(time.Minute).Local().Format(time.DateTime), "a@3", "b", "9", "failover", "rpc", "2.5s"},
	} {
		if got := strings.Fields(lines[i+1]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}
	var got []cluster.HistoryEntry
	out, _, code = history("--json", "--limit", "1")
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 || got[0] != entries[1] {
		t.Fatalf("history --json --limit 1: exit %d, %q; want the newest entry", code, out)
	}
	if _, errs, code := history("--limit", "-1"); code != exitUsage {
		t.Errorf("--limit -1: exit %d, %q", code, errs)
	}

	if _, err := sess.Set(ctx, layout.History(), []byte("garbage"), -1); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := history(); code != exitRuntime || out != "" || !strings.Contains(errs, "unreadable") || !strings.Contains(errs, "garbage") {
		t.Errorf("corrupt history: exit %d, stdout %q, stderr %q; want exit 1 naming the problem", code, out, errs)
	}

	ports := freeport.Take(t, 1)
	conf = writeLeaderConfig(t, fmt.Sprintf("127.0.0.1:%d", ports[0]))
	start := time.Now()
	out, errs, code = history()
	if code != exitRuntime || out != "" || !strings.Contains(errs, "cannot reach zookeeper") || time.Since(start) > 30*time.Second {
		t.Fatalf("history without ZooKeeper: exit %d after %v, stdout %q, stderr %q", code, time.Since(start), out, errs)
	}
}
