// Command gendoc writes failoverd's man page and bash completion from the
// CLI's own help: the command list of `failoverd help` and each command's
// synopsis and flags from `failoverd COMMAND --help`. It runs the binary
// rather than reading the source, so what it documents is what that build
// accepts.
//
//	go run ./packaging/gendoc -bin bin/failoverd -man failoverd.1 -bash failoverd.bash
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gendoc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin/failoverd", "failoverd binary whose help is documented")
	man := fs.String("man", "", "write the man page (section 1) to this file")
	bash := fs.String("bash", "", "write the bash completion script to this file")
	date := fs.String("date", "", "date on the man page, YYYY-MM-DD (default: $SOURCE_DATE_EPOCH, else today)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *man == "" && *bash == "" {
		fmt.Fprintln(stderr, "gendoc: nothing to do: give -man FILE and/or -bash FILE")
		return 2
	}
	cli, err := Load(*bin)
	if err != nil {
		fmt.Fprintln(stderr, "gendoc:", err)
		return 1
	}
	if *date == "" {
		*date = manDate()
	}
	if *man != "" {
		if err := os.WriteFile(*man, []byte(cli.Man(*date)), 0o644); err != nil {
			fmt.Fprintln(stderr, "gendoc:", err)
			return 1
		}
	}
	if *bash != "" {
		if err := os.WriteFile(*bash, []byte(cli.Bash()), 0o644); err != nil {
			fmt.Fprintln(stderr, "gendoc:", err)
			return 1
		}
	}
	return 0
}

// manDate is SOURCE_DATE_EPOCH's day when set (reproducible builds), else
// today's.
func manDate() string {
	t := time.Now()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err == nil {
			t = time.Unix(sec, 0)
		}
	}
	return t.UTC().Format("2006-01-02")
}

// CLI is what failoverd's help says about itself.
type CLI struct {
	Version  string // `failoverd version`, without the program name
	Summary  string // the first line of `failoverd help`
	Commands []Command
}

// Command is one entry of the command list.
type Command struct {
	Name     string
	Synopsis string   // from COMMAND --help ("failoverd leader -c FILE [--json]"), else the list's
	Desc     []string // the list's description, one element per line
	Flags    []Flag
	Words    []string // fixed positional words ("show", "clear")
}

// Flag is one flag of a command as flag.PrintDefaults prints it.
type Flag struct {
	Name  string // without dashes
	Arg   string // "string", "duration", ...; empty for a bool flag
	Usage string
}

// Dashed is the flag as the usage text writes it: -c, --json.
func (f Flag) Dashed() string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

// Load runs bin's help and parses it.
func Load(bin string) (*CLI, error) {
	help, err := output(bin, "help")
	if err != nil {
		return nil, err
	}
	cli, err := ParseUsage(help)
	if err != nil {
		return nil, err
	}
	if v, err := output(bin, "version"); err == nil {
		cli.Version = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "failoverd"))
	}
	for i := range cli.Commands {
		c := &cli.Commands[i]
		if c.Name == "help" || c.Name == "version" {
			continue
		}
		// COMMAND --help prints its usage on stderr and exits 0.
		cmd := exec.Command(bin, c.Name, "--help")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s %s --help: %v\n%s", bin, c.Name, err, out.String())
		}
		if err := c.parseHelp(out.String()); err != nil {
			return nil, fmt.Errorf("%s %s --help: %v", bin, c.Name, err)
		}
	}
	return cli, nil
}

func output(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// ParseUsage reads `failoverd help`: a summary line, then a "Usage:" block
// of "  failoverd COMMAND SYNOPSIS   DESCRIPTION" lines, a description
// continued on lines indented to its column.
func ParseUsage(help string) (*CLI, error) {
	lines := strings.Split(strings.TrimRight(help, "\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) == "" {
		return nil, errors.New("help: no summary line")
	}
	cli := &CLI{Summary: strings.TrimSpace(lines[0])}
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "Usage:" {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return nil, errors.New(`help: no "Usage:" block`)
	}
	var block []string
	for _, l := range lines[start:] {
		if strings.TrimSpace(l) == "" {
			break
		}
		block = append(block, l)
	}
	// The description column: where continuation lines start, else where
	// the first entry's last field starts.
	col := 0
	for _, l := range block {
		if !isEntry(l) {
			col = len(l) - len(strings.TrimLeft(l, " "))
			break
		}
	}
	if col == 0 && len(block) > 0 {
		if loc := regexp.MustCompile(`\S+(?: \S+)*$`).FindStringIndex(block[0]); loc != nil {
			col = loc[0]
		}
	}
	for _, l := range block {
		if !isEntry(l) {
			if len(cli.Commands) == 0 {
				return nil, fmt.Errorf("help: description %q before any command", strings.TrimSpace(l))
			}
			c := &cli.Commands[len(cli.Commands)-1]
			c.Desc = append(c.Desc, strings.TrimSpace(l))
			continue
		}
		syn, desc := l, ""
		if len(l) > col && col >= 2 && l[col-1] == ' ' && l[col-2] == ' ' && l[col] != ' ' {
			syn, desc = l[:col], l[col:]
		}
		syn = strings.Join(strings.Fields(syn), " ")
		c := Command{Name: strings.Fields(syn)[1], Synopsis: syn}
		if desc = strings.TrimSpace(desc); desc != "" {
			c.Desc = []string{desc}
		}
		c.Words = words(syn)
		cli.Commands = append(cli.Commands, c)
	}
	if len(cli.Commands) == 0 {
		return nil, errors.New("help: no command in the Usage block")
	}
	cli.Commands = append(cli.Commands, Command{Name: "help", Synopsis: "failoverd help", Desc: []string{"print the list of commands"}})
	return cli, nil
}

func isEntry(l string) bool {
	f := strings.Fields(l)
	return len(f) >= 2 && f[0] == "failoverd"
}

// words finds fixed positional alternatives such as "show|clear".
func words(synopsis string) []string {
	var out []string
	for _, f := range strings.Fields(synopsis) {
		if strings.Contains(f, "|") && regexp.MustCompile(`^[a-z]+(\|[a-z]+)+$`).MatchString(f) {
			out = append(out, strings.Split(f, "|")...)
		}
	}
	return out
}

var flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9._-]*)(?: ([a-z]+))?(?:\t(.*))?$`)

// parseHelp reads "Usage: failoverd SYNOPSIS" and the flags that
// flag.PrintDefaults lists after it.
func (c *Command) parseHelp(text string) error {
	lines := strings.Split(text, "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "Usage: failoverd ") {
		return fmt.Errorf("no \"Usage: failoverd\" line in %q", text)
	}
	c.Synopsis = strings.TrimSpace(strings.TrimPrefix(lines[0], "Usage: "))
	c.Words = words(c.Synopsis)
	for _, l := range lines[1:] {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			c.Flags = append(c.Flags, Flag{Name: m[1], Arg: m[2], Usage: m[3]})
			continue
		}
		if u, ok := strings.CutPrefix(l, "    \t"); ok && len(c.Flags) > 0 {
			f := &c.Flags[len(c.Flags)-1]
			f.Usage = strings.TrimSpace(f.Usage + " " + u)
		}
	}
	return nil
}
