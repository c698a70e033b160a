// Command failoverd keeps exactly one node of a primary/standby service in
// charge. See docs/commands.md for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
	// exitNoLeader: failoverd leader found no promoted leader.
	exitNoLeader = 3
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `failoverd keeps exactly one node of a primary/standby service in charge.

Usage:
  failoverd run        -c FILE                       run the daemon
  failoverd validate   -c FILE                       check a config file
  failoverd status     -c FILE [--json]              show the cluster as the coordination service
                                                     (ZooKeeper or etcd) records it
  failoverd leader     -c FILE [--json] [--watch]    print the promoted leader (exit 3: none);
                                                     --watch: one line per change until interrupted
  failoverd failover   -c FILE --to NODE [--timeout 30s] [--force]
                                                     hand leadership to NODE gracefully
                                                     (--force: even if NODE lags)
  failoverd breadcrumb -c FILE show|clear [--force]  show or clear the old leader's breadcrumb
  failoverd history    -c FILE [--json] [--limit N]  list the leadership changes, newest last
  failoverd pause      -c FILE [--reason TEXT]       maintenance mode: no automatic failover
                                                     in the whole cluster until resume
  failoverd resume     -c FILE                       end maintenance mode
  failoverd forget     -c FILE NODE                  stop listing NODE, a member that went
                                                     away (refused while it runs)
  failoverd reload     -c FILE [--json]              make the daemon re-read its config file
                                                     (all or nothing; exit 1: not applied)
  failoverd migrate    -c NEW_FILE --from OLD_FILE   move the cluster to another coordination
                                                     service (every node stopped first)
  failoverd version                                  print the version

Run 'failoverd COMMAND --help' for the flags of a command.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(rest, stdout, stderr)
	case "validate":
		return cmdValidate(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "leader":
		return cmdLeader(rest, stdout, stderr)
	case "failover":
		return cmdFailover(rest, stdout, stderr)
	case "breadcrumb":
		return cmdBreadcrumb(rest, stdout, stderr)
	case "history":
		return cmdHistory(rest, stdout, stderr)
	case "pause":
		return cmdPause(rest, stdout, stderr)
	case "resume":
		return cmdResume(rest, stdout, stderr)
	case "forget":
		return cmdForget(rest, stdout, stderr)
	case "reload":
		return cmdReload(rest, stdout, stderr)
	case "migrate":
		return cmdMigrate(rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "failoverd %s\n", version)
		return exitOK
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "failoverd: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

// flags builds a FlagSet with -c/--config; parse returns a usage exit code
// (or -1 to go on).
type cmdFlags struct {
	fs     *flag.FlagSet
	config string
}

func newFlags(name, synopsis string, stderr io.Writer) *cmdFlags {
	f := &cmdFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	f.fs.SetOutput(stderr)
	f.fs.StringVar(&f.config, "c", "", "config file (YAML)")
	f.fs.StringVar(&f.config, "config", "", "config file (YAML); same as -c")
	f.fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: failoverd %s\n\nFlags:\n", synopsis)
		f.fs.PrintDefaults()
	}
	return f
}

func (f *cmdFlags) parse(args []string) int {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if f.config == "" {
		fmt.Fprintln(f.fs.Output(), "failoverd: -c FILE is required")
		f.fs.Usage()
		return exitUsage
	}
	return -1
}

// debugTimeFormat is RFC 3339 with microseconds.
const debugTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// logLevel is log.level as a slog.Level (info when unknown).
func logLevel(level string) slog.Level {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return slog.LevelInfo
	}
	return lv
}

// newLevelLogger logs to w in format (text or json) at the level lv
// holds, which a reload may change.
func newLevelLogger(w io.Writer, format string, lv *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lv}
	if format != "json" {
		// A debug log times the steps of a handoff, a few milliseconds
		// apart: microseconds, where the text format's default gives
		// milliseconds (JSON always has nanoseconds).
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if lv.Level() <= slog.LevelDebug && a.Key == slog.TimeKey && len(groups) == 0 && a.Value.Kind() == slog.KindTime {
				return slog.String(slog.TimeKey, a.Value.Time().Format(debugTimeFormat))
			}
			return a
		}
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
