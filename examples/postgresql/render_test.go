// Package postgresql holds the PostgreSQL example (hooks, configs, demo);
// this test checks that render.sh turns its templates into configs the
// daemon accepts as they are, with every hook present and every node's
// environment file naming its own PostgreSQL.
package postgresql

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/failoverd/failoverd/config"
)

func TestRenderedConfigsLoad(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	out := t.TempDir()
	cmd := exec.Command("./render.sh", out)
	// PG_BINDIR: render.sh needs PostgreSQL's programs only to name them.
	cmd.Env = append(os.Environ(), "ZK_SERVERS=127.0.0.1:21811,127.0.0.1:21812", "PG_PORT_BASE=25440",
		"ADMIN_PORT_BASE=29300", "PG_BINDIR="+binDir(t), "PG_OS_USER="+currentUser(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(b), "no PostgreSQL programs") {
			t.Skip(string(b))
		}
		t.Fatalf("render.sh: %v\n%s", err, b)
	}
	hooks, err := filepath.Abs("hooks")
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"a", "b", "c"} {
		port := strconv.Itoa(25441 + i)
		env := filepath.Join(out, "node-"+n, "pg.env")
		cfg, err := config.Load(filepath.Join(out, "node-"+n+".yaml"))
		if err != nil {
			t.Fatalf("node-%s: %v", n, err)
		}
		if got, want := cfg.ZooKeeper.Servers, []string{"127.0.0.1:21811", "127.0.0.1:21812"}; !slices.Equal(got, want) {
			t.Errorf("node-%s: zookeeper.servers = %v, want %v", n, got, want)
		}
		if cfg.Node.ServiceAddress != "127.0.0.1:"+port {
			t.Errorf("node-%s: service_address %q, want 127.0.0.1:%s", n, cfg.Node.ServiceAddress, port)
		}
		for name, argv := range map[string][]string{
			"promote": cfg.Service.Promote.Command, "follow": cfg.Service.Follow.Command,
			"health": cfg.Health.Exec.Command, "position": cfg.Service.Position.Command,
		} {
			if len(argv) != 2 || argv[0] != filepath.Join(hooks, name+".sh") || argv[1] != env {
				t.Errorf("node-%s: %s command %v, want [%s/%s.sh %s]", n, name, argv, hooks, name, env)
			}
		}
		// The demote hook's deadline is its timeout.
		d := cfg.Service.Demote
		if want := []string{filepath.Join(hooks, "demote.sh"), "-t", strconv.Itoa(int(d.Timeout.Std().Seconds())), env}; !slices.Equal(d.Command, want) {
			t.Errorf("node-%s: demote command %v, want %v", n, d.Command, want)
		}
		methods := cfg.Fencing.Methods
		if len(methods) != 2 || methods[0].Name() != "rpc" || methods[1].Name() != "shell" {
			t.Fatalf("node-%s: fencing methods %+v, want rpc then shell", n, methods)
		}
		// The rpc fence waits for the old daemon's demote: it must outlast
		// the demote timeout and its kill grace.
		if rpc := methods[0].RPC.Timeout.Std(); rpc <= d.Timeout.Std()+d.Timeout.Std()/4 {
			t.Errorf("node-%s: rpc fence timeout %v does not cover the demote timeout %v", n, rpc, d.Timeout.Std())
		}
		b, err := os.ReadFile(env)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{"PGDATA=" + filepath.Join(out, "node-"+n, "data"), "PG_PORT=" + port, "PG_NAME=node_" + n} {
			if !slices.Contains(strings.Split(string(b), "\n"), line) {
				t.Errorf("node-%s/pg.env lacks the line %q", n, line)
			}
		}
	}
}

func currentUser(t *testing.T) string {
	out, err := exec.Command("id", "-un").Output()
	if err != nil {
		t.Skip("no id")
	}
	return strings.TrimSpace(string(out))
}

// binDir is a directory render.sh accepts as PG_BINDIR (it checks for
// pg_ctl): a scratch one, so that the test needs no PostgreSQL.
func binDir(t *testing.T) string {
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "pg_ctl"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}
