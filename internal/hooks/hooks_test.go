package hooks

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// electionPackages are the packages whose goroutines outlive the calls
// that start them (electors, sessions, watches): the ones a package-level
// hook would race in.
var electionPackages = []string{"../../cluster/zkcluster/election", "../../cluster/etcdcluster", "../../cluster/zkcluster", "../../cluster/zkcluster/lease", "../../cluster/zkcluster/zk", "../../cluster"}

// Test failpoints belong to one elector (its configuration, set before it
// exists), never to the package: a package-level hook that a test sets is
// read by every elector in the test binary, one that another test left
// running included, and that read races with the test's write. No file of
// those packages declares a package-level variable of a function type.
func TestNoPackageLevelHooks(t *testing.T) {
	var files []string
	for _, dir := range electionPackages {
		f, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(f) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		files = append(files, f...)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				_, isFunc := v.Type.(*ast.FuncType)
				for i, n := range v.Names {
					if i < len(v.Values) {
						if _, lit := v.Values[i].(*ast.FuncLit); lit {
							isFunc = true
						}
					}
					if isFunc {
						t.Errorf("%s: package-level function variable %s: make it a field of the elector's configuration", fset.Position(n.Pos()), n.Name)
					}
				}
			}
		}
	}
}
