// Package docs holds no code: its test checks that every relative link in
// the repository's Markdown files (the README, docs/, the examples' and
// the test suites' READMEs) names a file that exists and, when it names
// a heading, one the target file has, spelled the way GitHub spells
// heading anchors.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root, two levels up from this package.
const root = "../.."

// markdownFiles lists the Markdown files whose links are checked: every
// *.md in the repository except vendored code.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "third_party", "node_modules", "dist", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Markdown files found under " + root)
	}
	return files
}

var (
	fence   = regexp.MustCompile("(?m)^ {0,3}(```|~~~).*$")
	codeRun = regexp.MustCompile("`[^`\n]*`")
	link    = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	heading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
)

// prose returns the lines of a Markdown file, those of fenced code blocks
// blanked, so that indexes stay line numbers.
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, line := range lines {
		if fence.MatchString(line) {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return lines
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// file: lower case, punctuation dropped, spaces turned into hyphens, and
// -1, -2 … appended to repeats.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range prose(text) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestRelativeLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	headings := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(data))
		return cache[path], nil
	}
	for _, file := range markdownFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, file)
		for i, line := range prose(string(data)) {
			for _, m := range link.FindAllStringSubmatch(codeRun.ReplaceAllString(line, "``"), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link %q: no such file", name, i+1, target)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				a, err := headings(dest)
				if err != nil {
					t.Errorf("%s: link %q: %v", name, target, err)
					continue
				}
				if !a[anchor] {
					t.Errorf("%s:%d: link %q: no heading with anchor #%s", name, i+1, target, anchor)
				}
			}
		}
	}
}
