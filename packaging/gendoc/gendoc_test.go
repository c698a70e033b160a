package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildOut  []byte
)

// failoverd builds the real CLI once.
func failoverd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gendoc-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "failoverd")
		cmd := exec.Command("go", "build", "-o", builtBin, "../../cmd/failoverd")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building failoverd: %v\n%s", buildErr, buildOut)
	}
	return builtBin
}

// The command list of `failoverd help` and every command's flags from
// COMMAND --help, taken from the real binary.
func TestLoadReadsEveryCommandAndFlag(t *testing.T) {
	cli, err := Load(failoverd(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	flags := map[string][]string{}
	for _, c := range cli.Commands {
		names = append(names, c.Name)
		for _, f := range c.Flags {
			flags[c.Name] = append(flags[c.Name], f.Dashed())
		}
	}
	for _, want := range []string{"run", "validate", "status", "leader", "failover", "breadcrumb", "history", "pause", "resume", "forget", "reload", "migrate", "version", "help"} {
		if !slices.Contains(names, want) {
			t.Errorf("command %s missing; got %v", want, names)
		}
	}
	for cmd, want := range map[string][]string{
		"run":      {"-c", "--config"},
		"leader":   {"-c", "--config", "--json", "--watch"},
		"failover": {"-c", "--config", "--force", "--timeout", "--to"},
		"history":  {"-c", "--config", "--json", "--limit"},
		"migrate":  {"-c", "--config", "--from"},
	} {
		if !slices.Equal(flags[cmd], want) {
			t.Errorf("%s flags = %v, want %v", cmd, flags[cmd], want)
		}
	}
	for _, c := range cli.Commands {
		if c.Name == "breadcrumb" && !slices.Equal(c.Words, []string{"show", "clear"}) {
			t.Errorf("breadcrumb words = %v, want [show clear]", c.Words)
		}
		if len(c.Desc) == 0 {
			t.Errorf("command %s has no description", c.Name)
		}
	}
	if cli.Version == "" {
		t.Error("no version read")
	}
}

// The command list's wrapped descriptions and a synopsis running into the
// description column parse as one entry each.
func TestParseUsageContinuationLines(t *testing.T) {
	help := `tool summary.

Usage:
  failoverd run        -c FILE                       run the daemon
  failoverd failover   -c FILE --to NODE [--timeout 30s]
                                                     hand leadership to NODE gracefully
  failoverd pause      -c FILE [--reason TEXT]       maintenance mode: no automatic failover
                                                     in the whole cluster until resume
  failoverd version                                  print the version

Run 'failoverd COMMAND --help' for the flags of a command.
`
	cli, err := ParseUsage(help)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range cli.Commands {
		got[c.Name] = c.Synopsis + " | " + strings.Join(c.Desc, " ")
	}
	want := map[string]string{
		"run":      "failoverd run -c FILE | run the daemon",
		"failover": "failoverd failover -c FILE --to NODE [--timeout 30s] | hand leadership to NODE gracefully",
		"pause":    "failoverd pause -c FILE [--reason TEXT] | maintenance mode: no automatic failover in the whole cluster until resume",
		"version":  "failoverd version | print the version",
		"help":     "failoverd help | print the list of commands",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("commands %v, want %d", got, len(want))
	}
}

// The man page documents every command and flag, and groff renders it
// without a warning.
func TestManPage(t *testing.T) {
	cli, err := Load(failoverd(t))
	if err != nil {
		t.Fatal(err)
	}
	page := cli.Man("2026-01-02")
	for _, want := range []string{".SH EXIT STATUS\n", "\n.B 3\n", ".SH SIGNALS\n", "\n.B SIGHUP\n", "SIGTERM"} {
		if !strings.Contains(page, want) {
			t.Errorf("man page lacks %q", want)
		}
	}
	for _, c := range cli.Commands {
		if !strings.Contains(page, "\n.SS "+c.Name+"\n") {
			t.Errorf("man page has no section for %s", c.Name)
		}
		for _, f := range c.Flags {
			if !strings.Contains(page, roff(f.Dashed())) {
				t.Errorf("man page does not name %s of %s", f.Dashed(), c.Name)
			}
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("groff not found (Debian package groff-base)")
		}
		t.Skip("groff not found")
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("groff: %v\n%s", err, stderr.String())
	}
}

// complete runs the generated completion in bash for a command line (the
// last word is the one being completed) and returns the candidates.
func complete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, "'"+w+"'")
	}
	prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
		string(rune('0'+len(words)-1)) + "\n_failoverd\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	cmd := exec.Command("bash", "-c", prog)
	cmd.Dir = t.TempDir()
	for _, f := range []string{"node-a.yaml", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(cmd.Dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func TestBashCompletion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	cli, err := Load(failoverd(t))
	if err != nil {
		t.Fatal(err)
	}
	script := cli.Bash()
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"failoverd", ""}, []string{"run", "validate", "status", "leader", "failover", "breadcrumb", "history", "pause", "resume", "forget", "reload", "migrate", "version", "help"}},
		{[]string{"failoverd", "fa"}, []string{"failover"}},
		{[]string{"failoverd", "leader", "--"}, []string{"--config", "--json", "--watch"}},
		{[]string{"failoverd", "failover", "-c", "x.yaml", "--t"}, []string{"--timeout", "--to"}},
		{[]string{"failoverd", "validate", "-c", "node"}, []string{"node-a.yaml"}},
		{[]string{"failoverd", "breadcrumb", "-c", "x.yaml", ""}, []string{"show", "clear"}},
		{[]string{"failoverd", "failover", "--to", ""}, nil},
	} {
		got := complete(t, script, tc.words...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.words, got, tc.want)
		}
	}
}
