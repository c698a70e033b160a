package config

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config is plain data: it imports no coordination backend and no
// client library, directly or through another package (the controller,
// whose demote budget it validates with, is held to the same lists by
// controller/imports_test.go). Each backend's timing check, the lease
// arithmetic validation needs, reaches it through SetTimingChecks.
var (
	backendPackages = []string{"cluster/zkcluster", "cluster/zkcluster/election", "cluster/zkcluster/zk", "cluster/zkcluster/lease", "cluster/etcdcluster"}
	clientLibraries = []string{"github.com/go-zookeeper/", "go.etcd.io/"}
)

// TestConfigImportsNoBackend follows the module's own imports from
// package config (tests aside, as `go list -deps ./config` does) and
// fails on a path to a backend package, a client library or the vendored
// client fork, naming the chain.
func TestConfigImportsNoBackend(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	first, _, _ := strings.Cut(string(mod), "\n")
	module, ok := strings.CutPrefix(strings.TrimSpace(first), "module ")
	if !ok {
		t.Fatalf("go.mod does not start with a module line: %q", first)
	}
	module = strings.TrimSpace(module)

	chain := map[string]string{"config": "config"} // package (module-relative) → how it is reached
	queue := []string{"config"}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		p, err := build.ImportDir(filepath.Join(root, filepath.FromSlash(pkg)), 0)
		if err != nil {
			t.Fatalf("reading package %s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			for _, lib := range clientLibraries {
				if strings.HasPrefix(imp, lib) {
					t.Errorf("config links the client library %s: %s → %s", imp, chain[pkg], imp)
				}
			}
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if _, seen := chain[rel]; seen {
				continue
			}
			chain[rel] = chain[pkg] + " → " + rel
			queue = append(queue, rel)
		}
	}
	if _, ok := chain["controller"]; !ok {
		t.Fatalf("config does not import controller (the demote budget): the walk is broken (reached %v)", chain)
	}
	for _, b := range backendPackages {
		if c, ok := chain[b]; ok {
			t.Errorf("config depends on the backend package %s: %s; reach the backend through SetTimingChecks", b, c)
		}
	}
	for rel, c := range chain {
		if strings.HasPrefix(rel, "third_party/") {
			t.Errorf("config links the vendored client %s: %s", rel, c)
		}
	}
}
