package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runTestHook runs "hook ARGS..." with the given environment and returns
// the exit status and what it printed.
func runTestHook(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runHook(args, hookEnv{
		getenv: func(k string) string { return env[k] },
		stdout: &out, stderr: &errOut,
		now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) },
	})
	return code, out.String() + errOut.String()
}

// deadURL returns the URL of a loopback port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestPromoteAndDemoteHooks(t *testing.T) {
	_, srv := startService(t, ServiceConfig{Node: "node-a", StateDir: t.TempDir()})
	events := filepath.Join(t.TempDir(), "events.log")
	env := map[string]string{
		"TOY_URL": srv.URL, "FAILOVERD_EVENTS_LOG": events,
		"FAILOVERD_CLUSTER": "toy", "FAILOVERD_NODE_ID": "node-a", "FAILOVERD_EPOCH": "42",
		"FAILOVERD_ROLE": "leader", "FAILOVERD_REASON": "elected",
		"FAILOVERD_PREVIOUS_LEADER": "node-b", "FAILOVERD_PREVIOUS_EPOCH": "17",
	}
	if code, out := runTestHook(t, env, "promote"); code != 0 {
		t.Fatalf("promote hook: exit %d: %s", code, out)
	}
	if st := role(t, srv.URL); st.Role != RolePrimary || st.Epoch != 42 {
		t.Fatalf("after promote hook: %+v", st)
	}

	env["FAILOVERD_EPOCH"] = "41"
	if code, out := runTestHook(t, env, "promote"); code != 1 || !strings.Contains(out, "409") {
		t.Fatalf("promote hook with a stale epoch: exit %d: %s", code, out)
	}

	env["FAILOVERD_REASON"] = "health check failed"
	env["FAILOVERD_ROLE"] = "standby"
	// -toy overrides $TOY_URL, and a bare host:port is fine.
	if code, out := runTestHook(t, env, "demote", "-toy", strings.TrimPrefix(srv.URL, "http://")); code != 0 {
		t.Fatalf("demote hook: exit %d: %s", code, out)
	}
	if st := role(t, srv.URL); st.Role != RoleStandby {
		t.Fatalf("after demote hook: %+v", st)
	}

	data, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	want := "2026-01-02T03:04:05.000000006Z event=promote cluster=toy node=node-a epoch=42 prev=node-b prev_epoch=17 reason=elected result=ok\n" +
		"2026-01-02T03:04:05.000000006Z event=promote cluster=toy node=node-a epoch=41 prev=node-b prev_epoch=17 reason=elected result=failed err="
	if !strings.HasPrefix(string(data), want) {
		t.Errorf("events log:\n%s\nwant it to start with:\n%s", data, want)
	}
	if !strings.Contains(string(data), `event=demote cluster=toy node=node-a epoch=41 reason="health check failed" result=ok`) {
		t.Errorf("events log has no demote line:\n%s", data)
	}

	// Usage errors exit 2.
	if code, _ := runTestHook(t, map[string]string{}, "promote"); code != 2 {
		t.Errorf("promote without a toy URL: exit %d, want 2", code)
	}
	if code, _ := runTestHook(t, env, "launch"); code != 2 {
		t.Errorf("unknown hook: exit %d, want 2", code)
	}
}

func TestFenceHook(t *testing.T) {
	_, a := startService(t, ServiceConfig{Node: "node-a", StateDir: t.TempDir()})
	dir := t.TempDir()
	events := filepath.Join(dir, "events.log")
	mapFile := filepath.Join(dir, "toys.map")
	os.WriteFile(mapFile, []byte("# node toy\nnode-a "+a.URL+"\n\nnode-c "+deadURL(t)+"  # down\n"), 0o644)
	env := func(target, epoch string) map[string]string {
		return map[string]string{
			"FAILOVERD_EVENTS_LOG": events, "FAILOVERD_CLUSTER": "toy", "FAILOVERD_NODE_ID": "node-b",
			"FAILOVERD_TARGET_ID": target, "FAILOVERD_TARGET_HOST": "127.0.0.1",
			"FAILOVERD_TARGET_EPOCH": epoch, "FAILOVERD_FENCE_FAIL_FILE": filepath.Join(dir, "fail"),
		}
	}
	expect := func(code int, outPart string, e map[string]string, args ...string) {
		t.Helper()
		got, out := runTestHook(t, e, append([]string{"fence"}, args...)...)
		if got != code || !strings.Contains(out, outPart) {
			t.Fatalf("fence %v (target %s@%s): exit %d, output %q; want exit %d and %q",
				args, e["FAILOVERD_TARGET_ID"], e["FAILOVERD_TARGET_EPOCH"], got, out, code, outPart)
		}
	}

	// A late fence of an older leadership leaves a newer primary alone.
	promote(t, a.URL, 10)
	expect(0, "how=superseded", env("node-a", "7"), mapFile)
	if st := role(t, a.URL); st.Role != RolePrimary {
		t.Fatalf("late fence demoted the primary: %+v", st)
	}
	// The current leadership is fenced: node-a stands down for good.
	expect(0, "how=demoted", env("node-a", "10"), "node-a="+a.URL)
	if code, _ := promote(t, a.URL, 10); code != 409 {
		t.Fatalf("fenced epoch promoted again: %d", code)
	}
	// Demo only: a toy service that refuses connections is down.
	expect(0, "how=unreachable", env("node-c", "3"), "-map", mapFile)
	// Unknown targets and bad maps fail.
	expect(1, `no toy service address for node \"node-x\"`, env("node-x", "3"), mapFile)
	expect(1, "result=failed", env("node-a", "3"), filepath.Join(dir, "missing.map"))
	expect(1, "FAILOVERD_TARGET_ID is not set", env("", "3"), mapFile)
	// Tests make fencing fail with a file.
	os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644)
	expect(1, "how=fail-file", env("node-c", "3"), mapFile)

	data, _ := os.ReadFile(events)
	if n := strings.Count(string(data), "event=fence "); n != 7 {
		t.Errorf("events log has %d fence lines, want 7:\n%s", n, data)
	}
	if !strings.Contains(string(data), "event=fence cluster=toy node=node-b target=node-a target_host=127.0.0.1 target_epoch=10 how=demoted result=ok") {
		t.Errorf("events log lacks the fence of node-a at 10:\n%s", data)
	}
}

func TestHealthHook(t *testing.T) {
	svc, srv := startService(t, ServiceConfig{Node: "node-a", StateDir: t.TempDir()})
	if code, out := runTestHook(t, nil, "health", "-toy", srv.URL); code != 0 {
		t.Fatalf("health hook: exit %d: %s", code, out)
	}
	svc.SetHealthy(false)
	if code, _ := runTestHook(t, nil, "health", "-toy", srv.URL); code != 1 {
		t.Fatalf("health hook on an unhealthy service: exit %d, want 1", code)
	}
	if code, _ := runTestHook(t, nil, "health", "-toy", deadURL(t)); code != 1 {
		t.Fatalf("health hook on a dead service: exit %d, want 1", code)
	}
}
