package clustertest

// Helpers the benchmarks (test/bench) need on top of the end-to-end harness.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// UseTrivialHooks replaces the cluster's promote and demote hooks with
// scripts that only append their event line to the events log: no curl, no
// fork, the time read from bash's $EPOCHREALTIME (microseconds). The toy
// services are then left alone (never promoted or demoted by the hooks);
// fencing keeps its usual script. The daemons pick the new scripts up at
// their next hook run: the config names the same files.
func (c *Cluster) UseTrivialHooks() {
	// ${EPOCHREALTIME//[!0-9]/} drops the locale's decimal separator; six
	// decimals, so three zeros make nanoseconds.
	lib := `#!/bin/bash
ev() { printf '%s %s\n' "${EPOCHREALTIME//[!0-9]/}000" "$*" >> "` + c.EventsPath + `"; }
`
	scripts := map[string]string{
		"promote.sh": lib + `ev promote node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH role=$FAILOVERD_ROLE reason=$FAILOVERD_REASON prev=${FAILOVERD_PREVIOUS_LEADER:-} prev_epoch=${FAILOVERD_PREVIOUS_EPOCH:-}
`,
		"demote.sh": lib + `ev demote node=$FAILOVERD_NODE_ID epoch=$FAILOVERD_EPOCH role=$FAILOVERD_ROLE reason=$FAILOVERD_REASON
`,
	}
	for name, body := range scripts {
		p := filepath.Join(c.Dir, name)
		tmp := p + ".tmp"
		must(c.t, os.WriteFile(tmp, []byte(body), 0o755))
		must(c.t, os.Rename(tmp, p)) // atomic: a hook starting now runs one or the other
	}
}

// UseHookProgram installs the program bin as the cluster's promote and
// demote hooks (copied over promote.sh and demote.sh, which the configs
// name). It is run as ".../promote.sh" or ".../demote.sh" with the usual
// FAILOVERD_* environment; the benchmarks' test/bench/hookev appends the
// event line to events.log in its directory, as the scripts do.
func (c *Cluster) UseHookProgram(bin string) {
	b, err := os.ReadFile(bin)
	must(c.t, err)
	for _, name := range []string{"promote.sh", "demote.sh"} {
		p := filepath.Join(c.Dir, name)
		tmp := p + ".tmp"
		must(c.t, os.WriteFile(tmp, b, 0o755))
		must(c.t, os.Rename(tmp, p))
	}
}

// RestartToy starts the node's toy service again (after KillToy), in
// standby, and waits until it answers.
func (n *Node) RestartToy() {
	n.c.t.Helper()
	_, toy := Binaries(n.c.t)
	if pid := n.ToyPid(); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		// Wait until it is reaped, so that its port is free.
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				n.c.t.Fatalf("toy service of %s (pid %d) did not exit", n.ID, pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	n.startToy(toy)
	n.waitToy()
}

// LogPath is the node's failoverd log (appended to across restarts).
func (n *Node) LogPath() string { return filepath.Join(n.dir, "failoverd.log") }

// WaitState waits until the node's admin API reports one of states.
func (n *Node) WaitState(timeout time.Duration, states ...string) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s, ok := n.Status(); ok {
			for _, want := range states {
				if string(s.State) == want {
					return true
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// LogLine is one line of a failoverd text log (log.format: text).
type LogLine struct {
	At  time.Time
	Msg string
	KV  map[string]string
}

// ReadLog parses a failoverd text log: logfmt lines with time=, level=,
// msg= and attributes. Lines that do not parse are skipped.
func ReadLog(path string) ([]LogLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []LogLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		kv := parseLogfmt(sc.Text())
		at, err := time.Parse(time.RFC3339Nano, kv["time"])
		if err != nil {
			continue
		}
		out = append(out, LogLine{At: at, Msg: kv["msg"], KV: kv})
	}
	return out, sc.Err()
}

// parseLogfmt splits key=value pairs; values may be double-quoted with
// backslash escapes, as log/slog's TextHandler writes them.
func parseLogfmt(s string) map[string]string {
	kv := map[string]string{}
	for i := 0; i < len(s); {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			break
		}
		key := s[i : i+eq]
		i += eq + 1
		var val strings.Builder
		if i < len(s) && s[i] == '"' {
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
			i++ // closing quote
		} else {
			for i < len(s) && s[i] != ' ' {
				val.WriteByte(s[i])
				i++
			}
		}
		kv[key] = val.String()
	}
	return kv
}

// FindLog returns the lines with msg after t (exclusive) and, optionally,
// key=value pairs.
func FindLog(lines []LogLine, msg string, after time.Time, kv ...string) []LogLine {
	var out []LogLine
	for _, l := range lines {
		if l.Msg != msg || !l.At.After(after) {
			continue
		}
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if l.KV[kv[i]] != kv[i+1] {
				ok = false
			}
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// String is for diagnostics.
func (l LogLine) String() string {
	return fmt.Sprintf("%s %s %v", l.At.Format("15:04:05.000"), l.Msg, l.KV)
}
