package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// A daemon configured with etcd's TLS and a user, started while etcd is
// down (every member stopped), keeps running: it logs that etcd is not
// reachable, reports itself not connected, promotes nothing, and joins
// (and, alone, leads) once etcd is back. Against a real etcd cluster with
// client certificates and auth on, and a real failoverd process.
func TestDaemonStartsWhileSecureEtcdIsDown(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Backend: clustertest.BackendEtcd, Nodes: 1, EtcdSecure: true})
	n := c.Nodes[0]
	n.Kill(syscall.SIGTERM)
	for i := range c.Etcd.Members {
		c.Etcd.Kill(i)
	}
	restarted := time.Now()
	n.Start()

	// Down for a while: running, answering, not connected, no promote.
	deadline := time.Now().Add(12 * time.Second)
	answered := false
	for time.Now().Before(deadline) {
		if !n.Running() {
			err, _ := n.Wait(time.Second)
			t.Fatalf("the daemon exited (%v) while etcd was down; want it to keep trying", err)
		}
		if s, ok := n.Status(); ok {
			answered = true
			if s.Connected || s.State == controller.StateLeader {
				t.Fatalf("while etcd is down the daemon reports connected %t, state %s", s.Connected, s.State)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !answered {
		t.Fatal("the daemon's admin API did not answer while etcd was down")
	}
	if p := clustertest.Find(c.Events(), "promote"); len(p) > 0 && p[len(p)-1].At.After(restarted) {
		t.Fatalf("promoted while etcd was down: %+v", p[len(p)-1])
	}
	lines, err := clustertest.ReadLog(n.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(clustertest.FindLog(lines, "etcd not reachable yet: no session, not campaigning; retrying", restarted)) == 0 {
		t.Error("no log line saying etcd is not reachable yet")
	}

	c.Etcd.StartAll()
	if !n.WaitState(60*time.Second, string(controller.StateLeader)) {
		s, _ := n.Status()
		t.Fatalf("not leader within 60s of etcd's return: %+v", s)
	}
	if s, _ := n.Status(); !s.Connected {
		t.Errorf("leader but not connected: %+v", s)
	}
}

// A daemon whose etcd setup cannot work refuses to run, naming the
// setting: a password etcd refuses, or a CA that does not verify etcd's
// certificate (exit 2, not an endless retry).
func TestDaemonRefusesWrongEtcdCredentials(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Backend: clustertest.BackendEtcd, Nodes: 1, EtcdSecure: true})
	n := c.Nodes[0]
	n.Kill(syscall.SIGTERM)
	sec := c.EtcdSecurity
	b, err := os.ReadFile(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	wrongPass := filepath.Join(c.Dir, "wrong.password")
	if err := os.WriteFile(wrongPass, []byte("not-"+sec.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"WrongPassword", "password_file: " + sec.PasswordFile, "password_file: " + wrongPass, "etcd.password_file"},
		{"WrongCA", "ca_file: " + sec.CAFile, "ca_file: " + sec.OtherCAFile, "etcd.tls.ca_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.Replace(string(b), tc.old, tc.new, 1)
			if cfg == string(b) {
				t.Fatalf("config has no %q", tc.old)
			}
			path := filepath.Join(c.Dir, tc.name+".yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			fd, _ := clustertest.Binaries(t)
			cmd := exec.Command(fd, "run", "-c", path)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("the daemon still runs 60s after starting with %s:\n%s", tc.name, out.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(out.String(), "refusing to run") ||
				!strings.Contains(out.String(), tc.want) {
				t.Fatalf("exit %d, want %d with a message naming %s:\n%s", code, exitUsage, tc.want, out.String())
			}
			t.Logf("%s", lastLine(out.String()))
		})
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
