package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// keyPaths lists the dotted YAML path of every leaf key of the Config
// tree; list elements add "[]" (fencing.methods[].rpc.url).
func keyPaths() []string {
	var out []string
	var visit func(p string, t reflect.Type)
	visit = func(p string, t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.String {
			p += "[]"
			t = t.Elem()
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
		}
		if t.Kind() != reflect.Struct || t == reflect.TypeFor[Duration]() {
			out = append(out, p)
			return
		}
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			if p != "" {
				name = p + "." + name
			}
			visit(name, f.Type)
		}
	}
	visit("", reflect.TypeFor[Config]())
	return out
}

// TestConfigurationDocNamesEveryKey requires docs/configuration.md to name
// every key of the Config tree by its full path in backticks (the fencing
// methods' keys as `…rpc.url`, the table's shorthand for
// fencing.methods[N]), so that a new key cannot ship undocumented.
func TestConfigurationDocNamesEveryKey(t *testing.T) {
	data, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, p := range keyPaths() {
		want := "`" + p + "`"
		if rest, ok := strings.CutPrefix(p, "fencing.methods[]."); ok {
			want = "`…" + rest + "`"
		}
		if !strings.Contains(doc, want) {
			t.Errorf("docs/configuration.md does not name %s (as %s)", p, want)
		}
	}
}
