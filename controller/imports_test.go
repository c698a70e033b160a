package controller

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// backendPackages are the coordination backends (ZooKeeper: zkcluster,
// with its election, zk and lease arithmetic below it; etcd: etcdcluster): cmd/failoverd plugs them in, and the controller must not
// depend on them (directly or through another package), so that a backend
// is one more package and the controller speaks only cluster's
// vocabulary. clientLibraries are the coordination services' client
// libraries (the ZooKeeper one is the fork in third_party, replacing
// github.com/go-zookeeper/zk), which no package the controller links may
// import either. config/imports_test.go holds config to the same lists.
var (
	backendPackages = []string{"cluster/zkcluster", "cluster/zkcluster/election", "cluster/zkcluster/zk", "cluster/zkcluster/lease", "cluster/etcdcluster"}
	clientLibraries = []string{"github.com/go-zookeeper/", "go.etcd.io/"}
)

// TestControllerImportsNoBackend follows the module's own imports from
// the controller's packages (tests aside, as `go list -deps
// ./controller/...` does) and fails on a path to a backend package or
// the vendored client fork, naming the chain.
func TestControllerImportsNoBackend(t *testing.T) {
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

	chain := map[string]string{"controller": "controller", "controller/controllertest": "controller/controllertest"} // package (module-relative) → how it is reached
	queue := []string{"controller", "controller/controllertest"}
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
					t.Errorf("the controller links the client library %s: %s → %s", imp, chain[pkg], imp)
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
	if _, ok := chain["cluster"]; !ok {
		t.Fatalf("controller does not import cluster: the walk is broken (reached %v)", chain)
	}
	for _, b := range backendPackages {
		if c, ok := chain[b]; ok {
			t.Errorf("the controller depends on the backend package %s: %s; use cluster's vocabulary (and translate in the backend's adapter)", b, c)
		}
	}
	for rel, c := range chain {
		if strings.HasPrefix(rel, "third_party/") {
			t.Errorf("the controller links the vendored client %s: %s", rel, c)
		}
	}
}
