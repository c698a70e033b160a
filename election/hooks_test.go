package election

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Test failpoints belong to one elector (its configuration, set before it
// exists), never to the package: a package-level hook that a test sets is
// read by every elector in the test binary, one that another test left
// running included, and that read races with the test's write. No file of
// the package declares a package-level variable of a function type.
func TestNoPackageLevelHooks(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
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
