package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// editConfig rewrites n's config file, replacing each old with its new.
func editConfig(t *testing.T, n *clustertest.Node, pairs ...string) {
	t.Helper()
	b, err := os.ReadFile(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("config of %s has no %q:\n%s", n.ID, pairs[i], s)
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	if err := os.WriteFile(n.Config, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// postReload sends POST /v1/reload with token and returns the status code.
func postReload(t *testing.T, n *clustertest.Node, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.AdminAddr+adminapi.ReloadPath, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST /v1/reload to %s: %v", n.ID, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// metric returns the value of the series line (name with labels) on n's
// /metrics, or "" when absent.
func metric(t *testing.T, n *clustertest.Node, series string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + n.AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// waitStatus polls n's status until ok holds.
func waitStatus(t *testing.T, n *clustertest.Node, within time.Duration, what string, ok func(controller.Status) bool) controller.Status {
	t.Helper()
	deadline := time.Now().Add(within)
	var s controller.Status
	for time.Now().Before(deadline) {
		if st, answered := n.Status(); answered {
			s = st
			if ok(s) {
				return s
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %s not within %v; last status %+v", n.ID, what, within, s)
	return s
}

// waitLog waits for a line of n's log holding msg, logged after after.
func waitLog(t *testing.T, n *clustertest.Node, after time.Time, msg string, within time.Duration) clustertest.LogLine {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		lines, _ := clustertest.ReadLog(n.LogPath())
		if l := clustertest.FindLog(lines, msg, after); len(l) > 0 {
			return l[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s logged no %q within %v", n.ID, msg, within)
	return clustertest.LogLine{}
}

// Real daemons on real ZooKeeper. The leader reloads on SIGHUP a new token
// file and log level and keeps its term; the standby reloads a priority
// and a failing health check with failoverd reload, then is refused an
// invalid file and a change of its identity, and keeps its config.
func TestReloadDaemons(t *testing.T) {
	// No preemption: the standby's higher priority must not move the
	// leadership while the test looks at the leader's epoch.
	c := clustertest.Start(t, clustertest.Options{Nodes: 2, SessionTimeout: 4 * time.Second, ElectionYAML: "  preempt_after: 0s\n"})
	leader := c.Leader()
	standby := otherThan(c, leader, nil)
	waitStatus(t, standby, 60*time.Second, "standby", func(s controller.Status) bool { return s.State == controller.StateStandby })
	before, _ := leader.Status()
	if before.ConfigHash == "" || before.ConfigLoadedAt.IsZero() {
		t.Fatalf("status shows no config hash or load time: %+v", before)
	}

	t.Run("leader: token and log level on SIGHUP, term kept", func(t *testing.T) {
		newToken := filepath.Join(c.Dir, "token2")
		if err := os.WriteFile(newToken, []byte("rotated-token\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		editConfig(t, leader, "token_file: "+filepath.Join(c.Dir, "token"), "token_file: "+newToken, "level: debug", "level: warn")
		at := time.Now()
		leader.Signal(syscall.SIGHUP)
		l := waitLog(t, leader, at, "config reloaded", 20*time.Second)
		if ch := l.KV["changed"]; !strings.Contains(ch, "node.admin.token_file") || !strings.Contains(ch, "log.level") {
			t.Errorf("reload logged changed=%q, want node.admin.token_file and log.level", ch)
		}
		if code := postReload(t, leader, c.Token); code != http.StatusUnauthorized {
			t.Errorf("the old token after the reload: %d, want 401", code)
		}
		if code := postReload(t, leader, "rotated-token"); code != http.StatusOK {
			t.Errorf("the new token after the reload: %d, want 200", code)
		}
		// At warn, the mutating requests above (logged at info) are not
		// logged any more.
		time.Sleep(300 * time.Millisecond)
		lines, _ := clustertest.ReadLog(leader.LogPath())
		if got := clustertest.FindLog(lines, "mutating request", l.At); len(got) > 0 {
			t.Errorf("info lines logged after log.level became warn: %v", got)
		}
		s := waitStatus(t, leader, 10*time.Second, "new config hash", func(s controller.Status) bool { return s.ConfigHash != before.ConfigHash })
		if s.State != controller.StateLeader || s.Epoch != before.Epoch {
			t.Errorf("after the reload the leader is %s at epoch %d, want leader at epoch %d", s.State, s.Epoch, before.Epoch)
		}
		if !s.ConfigLoadedAt.After(before.ConfigLoadedAt) {
			t.Errorf("config_loaded_at %v, want after %v", s.ConfigLoadedAt, before.ConfigLoadedAt)
		}
		if d := clustertest.Find(c.Events(), "demote", "node", leader.ID); len(d) > 1 { // the startup demote
			t.Errorf("the leader demoted after a reload of unrelated keys: %v", d)
		}
		if v := metric(t, leader, `failoverd_config_reloads_total{result="success"}`); v != "2" {
			t.Errorf("reloads_total{success} = %q, want 2 (SIGHUP, then POST)", v)
		}
	})

	t.Run("standby: priority with failoverd reload", func(t *testing.T) {
		editConfig(t, standby, "node:\n", "node:\n  priority: 7\n")
		out, code := standby.CLI("reload")
		if code != 0 || !strings.Contains(out, "node.priority") {
			t.Fatalf("failoverd reload: exit %d\n%s\nwant 0 naming node.priority", code, out)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			out, code := standby.CLI("status", "--json")
			var v struct{ Members []cluster.Member }
			if code == 0 && json.Unmarshal([]byte(out), &v) == nil {
				var m *cluster.Member
				for i := range v.Members {
					if v.Members[i].NodeID == standby.ID {
						m = &v.Members[i]
					}
				}
				if m != nil && m.Priority != nil && *m.Priority == 7 && m.ConfigHash != "" {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("member record of %s without priority 7 and a config hash after 15s: %s", standby.ID, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if out, _ := standby.CLI("status"); !strings.Contains(out, "CONFIG") {
			t.Errorf("status table has no CONFIG column:\n%s", out)
		}
	})

	t.Run("standby: a failing health check ends its candidacy", func(t *testing.T) {
		editConfig(t, standby, "  fall: 2\n  http:\n    url: http://"+standby.ToyAddr+"/health\n", "  fall: 1\n  exec:\n    command: [/bin/false]\n")
		standby.Signal(syscall.SIGHUP)
		waitStatus(t, standby, 20*time.Second, "unhealthy and out", func(s controller.Status) bool {
			return s.Health == "unhealthy" && s.State == controller.StateOut
		})
		if s, _ := leader.Status(); s.State != controller.StateLeader || s.Epoch != before.Epoch {
			t.Errorf("the leader changed: %+v", s)
		}
	})

	t.Run("standby: an invalid file keeps the old config", func(t *testing.T) {
		s0, _ := standby.Status()
		editConfig(t, standby, "interval: 200ms", "interval: soon")
		out, code := standby.CLI("reload")
		if code != 1 || !strings.Contains(out, "invalid config") || !strings.Contains(out, "health.interval") {
			t.Fatalf("failoverd reload of an invalid file: exit %d\n%s\nwant 1 naming health.interval", code, out)
		}
		if v := metric(t, standby, `failoverd_config_reloads_total{result="failure"}`); v != "1" {
			t.Errorf("reloads_total{failure} = %q, want 1", v)
		}
		if v := metric(t, standby, "failoverd_config_last_reload_successful"); v != "0" {
			t.Errorf("last_reload_successful = %q, want 0", v)
		}
		if s, _ := standby.Status(); s.ConfigHash != s0.ConfigHash || s.Priority != 7 {
			t.Errorf("after an invalid file: hash %s priority %d, want %s and 7", s.ConfigHash, s.Priority, s0.ConfigHash)
		}
		editConfig(t, standby, "interval: soon", "interval: 200ms")
	})

	t.Run("standby: identity changes are refused by key", func(t *testing.T) {
		s0, _ := standby.Status()
		editConfig(t, standby, "cluster: e2e", "cluster: other", "id: "+standby.ID, "id: node-z", "servers: [", "servers: [127.0.0.1:1, ",
			"priority: 7", "priority: 9")
		out, code := standby.CLI("reload")
		if code != 1 {
			t.Fatalf("failoverd reload changing the identity: exit %d\n%s", code, out)
		}
		for _, key := range []string{"cluster:", "node.id:", "zookeeper.servers:"} {
			if !strings.Contains(out, key) {
				t.Errorf("the refusal does not name %s:\n%s", strings.TrimSuffix(key, ":"), out)
			}
		}
		if strings.Contains(out, "node.priority:") {
			t.Errorf("the refusal names node.priority, which may change:\n%s", out)
		}
		s, _ := standby.Status()
		if s.NodeID != standby.ID || s.Cluster != "e2e" || s.Priority != 7 || s.ConfigHash != s0.ConfigHash {
			t.Errorf("a refused reload applied something: %+v", s)
		}
		if v := metric(t, standby, `failoverd_config_reloads_total{result="failure"}`); v != "2" {
			t.Errorf("reloads_total{failure} = %q, want 2", v)
		}
		lines, _ := clustertest.ReadLog(standby.LogPath())
		if got := clustertest.FindLog(lines, "config reload: key needs a restart", time.Time{}, "key", "node.id"); len(got) == 0 {
			t.Error("the log does not name node.id as refused")
		}
	})

	// The daemons are built with -race: a reload must not race the loop.
	for _, n := range c.Nodes {
		if b, _ := os.ReadFile(n.LogPath()); strings.Contains(string(b), "DATA RACE") {
			t.Errorf("%s logged a data race", n.ID)
		}
	}
}
