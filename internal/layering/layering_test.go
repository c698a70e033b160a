// Package layering holds the test of the packages' layering: nothing
// config or the controller links reaches a coordination backend.
package layering

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// backendPackages are the coordination backends (ZooKeeper: zkcluster,
// with its election, zk and lease arithmetic below it; etcd:
// etcdcluster): cmd/failoverd plugs them in. clientLibraries are the
// coordination services' client libraries (the ZooKeeper one is the fork
// in third_party, replacing github.com/go-zookeeper/zk).
var (
	backendPackages = []string{"cluster/zkcluster", "cluster/zkcluster/election", "cluster/zkcluster/zk", "cluster/zkcluster/lease", "cluster/etcdcluster"}
	clientLibraries = []string{"github.com/go-zookeeper/", "go.etcd.io/"}
)

// TestNoBackendBelowConfigOrController follows the module's own imports
// (tests aside, as `go list -deps ./config ./controller/...` does) from
// each root and fails on a path to a backend package, a client library or
// the vendored client fork, naming the chain: the controller speaks only
// cluster's vocabulary, and config is plain data whose backend timing
// checks reach it through SetTimingChecks. via is a package each root
// must reach, so that a broken walk does not pass.
func TestNoBackendBelowConfigOrController(t *testing.T) {
	root, module := moduleRoot(t)
	for _, tc := range []struct {
		roots []string
		via   string
	}{
		{[]string{"controller", "controller/controllertest"}, "cluster"},
		{[]string{"config"}, "controller"}, // the demote budget
	} {
		chain := walk(t, root, module, tc.roots)
		if _, ok := chain[tc.via]; !ok {
			t.Fatalf("%v does not reach %s: the walk is broken (reached %v)", tc.roots, tc.via, chain)
		}
		for _, b := range backendPackages {
			if c, ok := chain[b]; ok {
				t.Errorf("%s depends on the backend package %s: %s", tc.roots[0], b, c)
			}
		}
		for rel, c := range chain {
			if strings.HasPrefix(rel, "third_party/") {
				t.Errorf("%s links the vendored client %s: %s", tc.roots[0], rel, c)
			}
		}
	}
}

// moduleRoot is the module's directory and path.
func moduleRoot(t *testing.T) (root, module string) {
	t.Helper()
	root, err := filepath.Abs("../..")
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
	return root, strings.TrimSpace(module)
}

// walk follows the module's imports from roots (module-relative) and
// returns every package reached with how it is reached; a client library
// imported on the way fails the test.
func walk(t *testing.T, root, module string, roots []string) map[string]string {
	t.Helper()
	chain := map[string]string{}
	for _, r := range roots {
		chain[r] = r
	}
	queue := append([]string(nil), roots...)
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
					t.Errorf("%s links the client library %s: %s → %s", roots[0], imp, chain[pkg], imp)
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
	return chain
}
