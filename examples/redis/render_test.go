// Package redis holds the Redis example (hooks, configs, demo); this test
// checks that render.sh turns its templates into configs the daemon accepts
// as they are, with every hook present, and Redis configs that agree.
package redis

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
	cmd.Env = append(os.Environ(), "ZK_SERVERS=127.0.0.1:21811,127.0.0.1:21812", "REDIS_PORT_BASE=26380", "ADMIN_PORT_BASE=29200")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render.sh: %v\n%s", err, b)
	}
	hooks, err := filepath.Abs("hooks")
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"a", "b", "c"} {
		port := strconv.Itoa(26381 + i)
		addr := "127.0.0.1:" + port
		// No SkipFileChecks: hooks and the token must exist.
		cfg, err := config.Load(filepath.Join(out, "node-"+n+".yaml"))
		if err != nil {
			t.Fatalf("node-%s: %v", n, err)
		}
		if got, want := cfg.ZooKeeper.Servers, []string{"127.0.0.1:21811", "127.0.0.1:21812"}; !slices.Equal(got, want) {
			t.Errorf("node-%s: zookeeper.servers = %v, want %v", n, got, want)
		}
		if cfg.Node.ServiceAddress != addr {
			t.Errorf("node-%s: service_address %q, want %s", n, cfg.Node.ServiceAddress, addr)
		}
		if got, want := cfg.AdminURL(), "http://127.0.0.1:2920"+strconv.Itoa(i+1); got != want {
			t.Errorf("node-%s: admin URL %s, want %s", n, got, want)
		}
		for name, argv := range map[string][]string{
			"promote": cfg.Service.Promote.Command, "demote": cfg.Service.Demote.Command, "follow": cfg.Service.Follow.Command,
		} {
			if len(argv) != 2 || argv[0] != filepath.Join(hooks, name+".sh") || argv[1] != addr {
				t.Errorf("node-%s: %s command %v, want [%s/%s.sh %s]", n, name, argv, hooks, name, addr)
			}
		}
		if got := strings.Join(cfg.Health.Exec.Command, " "); got != "redis-cli -h 127.0.0.1 -p "+port+" -e PING" {
			t.Errorf("node-%s: health command %q", n, got)
		}
		methods := cfg.Fencing.Methods
		if len(methods) != 2 || methods[0].Name() != "rpc" || methods[1].Name() != "shell" {
			t.Fatalf("node-%s: fencing methods %+v, want rpc then shell", n, methods)
		}
		fence := strings.Join(methods[1].Shell.Command, " ")
		want := filepath.Join(hooks, "fence.sh") + " node-a=127.0.0.1:26381 node-b=127.0.0.1:26382 node-c=127.0.0.1:26383"
		if fence != want {
			t.Errorf("node-%s: fence command %q, want %q", n, fence, want)
		}
		conf, err := os.ReadFile(filepath.Join(out, "redis-"+n+".conf"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{"port " + port, "dir " + filepath.Join(out, "node-"+n), "replicaof 127.0.0.1 1", "replica-read-only yes"} {
			if !slices.Contains(strings.Split(string(conf), "\n"), line) {
				t.Errorf("redis-%s.conf lacks the line %q", n, line)
			}
		}
		if st, err := os.Stat(filepath.Join(out, "node-"+n)); err != nil || !st.IsDir() {
			t.Errorf("no data directory node-%s: %v", n, err)
		}
	}
}
