// Package cluster holds the example three-node configs; this test checks
// that render.sh turns them into configs the daemon accepts as they are,
// with every referenced file present.
package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	cmd.Env = append(os.Environ(), "ZK_SERVERS=127.0.0.1:21811,127.0.0.1:21812", "TOY_PORT_BASE=28080", "ADMIN_PORT_BASE=29100")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render.sh: %v\n%s", err, b)
	}
	scripts, err := filepath.Abs("../scripts")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, n := range []string{"a", "b", "c"} {
		// No SkipFileChecks: scripts and the token must exist.
		cfg, err := config.Load(filepath.Join(out, "node-"+n+".yaml"))
		if err != nil {
			t.Fatalf("node-%s: %v", n, err)
		}
		ids[cfg.Node.ID] = true
		if got, want := cfg.ZooKeeper.Servers, []string{"127.0.0.1:21811", "127.0.0.1:21812"}; !slices.Equal(got, want) {
			t.Errorf("node-%s: zookeeper.servers = %v, want %v", n, got, want)
		}
		toy := "http://127.0.0.1:2808" + string(rune('1'+i))
		if got := cfg.Health.HTTP.URL; got != toy+"/health" {
			t.Errorf("node-%s: health url %s, want %s/health", n, got, toy)
		}
		if got, want := cfg.AdminURL(), "http://127.0.0.1:2910"+string(rune('1'+i)); got != want {
			t.Errorf("node-%s: admin URL %s, want %s", n, got, want)
		}
		if got := cfg.Service.Promote.Command; got[0] != filepath.Join(scripts, "promote.sh") || got[1] != toy {
			t.Errorf("node-%s: promote command %v", n, got)
		}
		if got := cfg.Service.Demote.Command; got[0] != filepath.Join(scripts, "demote.sh") || got[1] != toy {
			t.Errorf("node-%s: demote command %v", n, got)
		}
		methods := cfg.Fencing.Methods
		if len(methods) != 2 || methods[0].Name() != "rpc" || methods[1].Name() != "shell" {
			t.Fatalf("node-%s: fencing methods %+v, want rpc then shell", n, methods)
		}
		fence := strings.Join(methods[1].Shell.Command, " ")
		for j := range 3 {
			pair := "node-" + string(rune('a'+j)) + "=http://127.0.0.1:2808" + string(rune('1'+j))
			if !strings.Contains(fence, pair) {
				t.Errorf("node-%s: fence command %q lacks %s", n, fence, pair)
			}
		}
		// The rpc method sends the cluster's token (its own token_file, or
		// node.admin.token_file when unset).
		want, err := config.ReadSecretFile(filepath.Join(out, "token"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := cfg.RPCToken(0); err != nil || got != want {
			t.Errorf("node-%s: rpc token %v (%v), want the one in %s", n, got == want, err, filepath.Join(out, "token"))
		}
	}
	if len(ids) != 3 {
		t.Errorf("node ids %v, want three distinct", ids)
	}
	if fi, err := os.Stat(filepath.Join(out, "token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v, %v", fi, err)
	}
	m, err := os.ReadFile(filepath.Join(out, "toys.map"))
	if err != nil || !strings.Contains(string(m), "node-c http://127.0.0.1:28083\n") {
		t.Errorf("toys.map: %q, %v", m, err)
	}
}

// With ETCD_ENDPOINTS, render.sh puts an etcd block in place of the
// zookeeper one (make demo BACKEND=etcd), and the configs load.
func TestRenderedEtcdConfigsLoad(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash is required to run render.sh")
	}
	out := t.TempDir()
	cmd := exec.Command("./render.sh", out)
	cmd.Env = append(os.Environ(), "ETCD_ENDPOINTS=http://127.0.0.1:23791,http://127.0.0.1:23792", "ETCD_LEASE_TTL=4s",
		"TOY_PORT_BASE=28080", "ADMIN_PORT_BASE=29100")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render.sh: %v\n%s", err, b)
	}
	for _, n := range []string{"a", "b", "c"} {
		cfg, err := config.Load(filepath.Join(out, "node-"+n+".yaml"))
		if err != nil {
			t.Fatalf("node-%s: %v", n, err)
		}
		if cfg.Coordination.Backend != config.BackendEtcd || cfg.Etcd == nil ||
			!slices.Equal(cfg.Etcd.Endpoints, []string{"http://127.0.0.1:23791", "http://127.0.0.1:23792"}) || cfg.Etcd.LeaseTTL.String() != "4s" {
			t.Errorf("node-%s: backend %q, etcd block %+v", n, cfg.Coordination.Backend, cfg.Etcd)
		}
		if cfg.Node.ID != "node-"+n || cfg.Health.HTTP == nil || len(cfg.Fencing.Methods) != 2 {
			t.Errorf("node-%s: the rest of the config changed: %+v", n, cfg)
		}
	}
}
