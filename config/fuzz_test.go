package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzLoadConfig checks that Parse never panics, and that a config that
// validates still validates, unchanged, once marshalled and parsed again.
func FuzzLoadConfig(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	ref, _ := filepath.Glob("../configs/*.yaml")
	for _, p := range append(seeds, ref...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("cluster: [a, {b: c}]\n"))
	f.Add([]byte("&a [*a]"))

	opts := LoadOptions{SkipFileChecks: true} // the file system is not under test
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := opts.Parse(data, "")
		if err != nil {
			return
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal of a valid config: %v", err)
		}
		cfg2, err := opts.Parse(out, "")
		if err != nil {
			t.Fatalf("valid config does not validate once marshalled: %v\ninput:\n%s\nmarshalled:\n%s", err, data, out)
		}
		out2, err := yaml.Marshal(cfg2)
		if err != nil {
			t.Fatalf("Marshal of the reparsed config: %v", err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("marshal, parse, marshal changed the config:\n%s\nthen:\n%s", out, out2)
		}
	})
}
