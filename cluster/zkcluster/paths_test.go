package zkcluster

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// recordNames are the names of the cluster's records; only package cluster
// (cluster.Layout) may put them into a path.
var recordNames = []string{"members", "failover", "breadcrumb", "config", "election"}

// spellsPathAllowed lists the files outside package cluster that still
// spell a record path, each with why. It may only shrink ("no
// package but the layout package spells a znode path").
var spellsPathAllowed = map[string]string{
	// The lost-replies nemesis picks the unfair lock's requests out of the
	// ZooKeeper wire traffic by path suffix.
	"test/chaos/nemesis.go": `strings.HasSuffix(path, "/election/lock")`,
}

// TestOnlyClusterSpellsPaths walks every non-test Go file of the module and
// fails on a string literal that uses a record name as a path element: a
// literal with a slash that has the name as one of its elements
// ("/failoverd/x/breadcrumb", "members/"), or the bare name given to a
// Join function (zk.Join(root, cluster, "breadcrumb")). A log attribute
// such as "component", "election" is not a path and passes.
func TestOnlyClusterSpellsPaths(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	var offenders []string
	seen := map[string]bool{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || hasOwnModule(p)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || filepath.Dir(rel) == "cluster" {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, hit := range pathLiterals(f) {
			seen[rel] = true
			if _, ok := spellsPathAllowed[rel]; !ok {
				offenders = append(offenders, rel+":"+strconv.Itoa(fset.Position(hit.Pos()).Line)+": "+hit.Value)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offenders {
		t.Errorf("%s spells a cluster record path; use cluster.Layout", o)
	}
	for rel := range spellsPathAllowed {
		if !seen[rel] {
			t.Errorf("%s no longer spells a path: remove it from spellsPathAllowed", rel)
		}
	}
}

// hasOwnModule reports whether dir is the root of another module (a
// vendored third-party copy): not ours to check.
func hasOwnModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// pathLiterals returns f's string literals that use a record name as a
// path element.
func pathLiterals(f *ast.File) []*ast.BasicLit {
	var hits []*ast.BasicLit
	check := func(lit *ast.BasicLit, joined bool) {
		if lit.Kind != token.STRING {
			return
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return
		}
		if strings.HasSuffix(s, ".go") {
			return // a source file (test/mutants patches election/election.go)
		}
		if strings.Contains(s, "/") {
			for _, el := range strings.Split(s, "/") {
				if slices.Contains(recordNames, el) {
					hits = append(hits, lit)
					return
				}
			}
			return
		}
		if joined && slices.Contains(recordNames, s) {
			hits = append(hits, lit)
		}
	}
	joinArgs := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ImportSpec:
			return false // "github.com/failoverd/failoverd/cluster/zkcluster/election" is a package
		case *ast.CallExpr:
			if isJoin(n.Fun) {
				for _, a := range n.Args {
					if lit, ok := a.(*ast.BasicLit); ok {
						joinArgs[lit] = true
					}
				}
			}
		case *ast.Field:
			// A struct tag (`json:"config"`) is no path: visit the type only.
			if n.Type != nil {
				ast.Inspect(n.Type, func(m ast.Node) bool {
					if lit, ok := m.(*ast.BasicLit); ok {
						check(lit, joinArgs[lit])
					}
					return true
				})
			}
			return false
		case *ast.BasicLit:
			check(n, joinArgs[n])
		}
		return true
	})
	return hits
}

// isJoin reports whether fun is a path-joining function (zk.Join,
// path.Join, filepath.Join, or any other X.Join / Join).
func isJoin(fun ast.Expr) bool {
	switch f := fun.(type) {
	case *ast.SelectorExpr:
		return f.Sel.Name == "Join"
	case *ast.Ident:
		return f.Name == "Join"
	}
	return false
}

// The checker itself: it finds the spellings it must find and leaves the
// look-alikes alone.
func TestPathLiterals(t *testing.T) {
	src := `package p
import "github.com/failoverd/failoverd/cluster/zkcluster/election"
type T struct {
	Mode string ` + "`json:\"election\" yaml:\"config\"`" + `
}
func f(root, c string) {
	_ = zk.Join(root, c, "breadcrumb")     // hit
	_ = path.Join(root, "members", c)      // hit
	_ = "/failoverd/orders/failover"       // hit
	_ = root + "/config"                   // hit
	_ = "election/"                        // hit
	log.With("component", "election")      // no path
	_ = strings.Join([]string{"a"}, ",")   // no path
	_ = "election/election.go"             // a source file
	_ = "configs/failoverd.yaml"           // not a record name
	_ = "failover to %s requested"         // no slash, not joined
}
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, lit := range pathLiterals(f) {
		got = append(got, lit.Value)
	}
	want := []string{`"breadcrumb"`, `"members"`, `"/failoverd/orders/failover"`, `"/config"`, `"election/"`}
	if !slices.Equal(got, want) {
		t.Fatalf("pathLiterals = %v, want %v", got, want)
	}
}
