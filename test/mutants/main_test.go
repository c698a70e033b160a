package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Every mutant's edits apply to the tree as it is: each anchor occurs
// exactly once, so that make mutants breaks the code it names. A change
// that moves an anchor fails here, in make test, rather than in the next
// make mutants. No build and no test run: it takes milliseconds.
func TestAnchorsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, m := range mutants {
		dir := t.TempDir()
		for _, e := range m.Edits {
			dst := filepath.Join(dir, e.File)
			if _, err := os.Stat(dst); os.IsNotExist(err) {
				b, err := os.ReadFile(filepath.Join(root, e.File))
				if err != nil {
					t.Errorf("%s: %v", m.Name, err)
					continue
				}
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := apply(dir, e); err != nil {
				t.Errorf("%s: %v", m.Name, err)
			}
		}
	}
}
