package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The failoverd hooks for the toy service, as subcommands of this binary so
// that the shell scripts in examples/scripts stay thin and need no curl:
//
//	toyservice hook promote [-toy URL]            service.promote
//	toyservice hook demote  [-toy URL]            service.demote
//	toyservice hook fence   [MAPFILE | ID=URL]... fencing shell method
//	toyservice hook health  [-toy URL]            health exec check
//
// Each appends one line "TIME event=... key=value ..." to the events log
// named by -events or $FAILOVERD_EVENTS_LOG (if any), and prints it.

// hookEnv is what a hook reads from its surroundings; tests replace it.
type hookEnv struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	now    func() time.Time
}

func osHookEnv() hookEnv {
	return hookEnv{getenv: os.Getenv, stdout: os.Stdout, stderr: os.Stderr, now: time.Now}
}

// runHook runs "hook NAME ARGS..." and returns the exit status: 0 done,
// 1 failed, 2 usage.
func runHook(args []string, env hookEnv) int {
	if len(args) == 0 {
		fmt.Fprintln(env.stderr, "usage: toyservice hook promote|demote|fence|health [flags]")
		return 2
	}
	name := args[0]
	fs := flag.NewFlagSet("hook "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	var toy string
	if name != "fence" {
		fs.StringVar(&toy, "toy", env.getenv("TOY_URL"), "toy service base URL (default $TOY_URL)")
	}
	events := fs.String("events", env.getenv("FAILOVERD_EVENTS_LOG"), "events log to append to (default $FAILOVERD_EVENTS_LOG)")
	timeout := fs.Duration("timeout", 2*time.Second, "bound on the HTTP call; keep it below the hook's timeout in failoverd")
	var mapFile string
	if name == "fence" {
		fs.StringVar(&mapFile, "map", "", "`file` of \"node-id toy-url\" lines (may also be given as an argument)")
		fs.Usage = func() {
			fmt.Fprintln(env.stderr, "usage: toyservice hook fence [flags] [MAPFILE | NODE_ID=TOY_URL]...")
			fs.PrintDefaults()
		}
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	h := &hook{env: env, events: *events, client: &http.Client{Timeout: *timeout}}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	switch name {
	case "promote", "demote", "health":
		if fs.NArg() > 0 {
			fmt.Fprintf(env.stderr, "hook %s: unexpected arguments %q\n", name, fs.Args())
			return 2
		}
		base, err := baseURL(toy)
		if err != nil {
			fmt.Fprintf(env.stderr, "hook %s: -toy or $TOY_URL: %v\n", name, err)
			return 2
		}
		switch name {
		case "promote":
			return h.promote(ctx, base)
		case "demote":
			return h.demote(ctx, base)
		default:
			return h.health(ctx, base)
		}
	case "fence":
		sources := fs.Args()
		if mapFile != "" {
			sources = append([]string{mapFile}, sources...)
		}
		return h.fence(ctx, sources)
	}
	fmt.Fprintf(env.stderr, "hook: unknown hook %q; want promote, demote, fence or health\n", name)
	return 2
}

type hook struct {
	env    hookEnv
	events string
	client *http.Client
}

func (h *hook) promote(ctx context.Context, base string) int {
	ev := []string{"event", "promote",
		"cluster", h.env.getenv("FAILOVERD_CLUSTER"), "node", h.env.getenv("FAILOVERD_NODE_ID"),
		"epoch", h.env.getenv("FAILOVERD_EPOCH"),
		"prev", h.env.getenv("FAILOVERD_PREVIOUS_LEADER"), "prev_epoch", h.env.getenv("FAILOVERD_PREVIOUS_EPOCH"),
		"reason", h.env.getenv("FAILOVERD_REASON")}
	epoch, err := strconv.ParseInt(h.env.getenv("FAILOVERD_EPOCH"), 10, 64)
	if err != nil || epoch < 1 {
		return h.done(ev, fmt.Errorf("FAILOVERD_EPOCH %q is not an epoch", h.env.getenv("FAILOVERD_EPOCH")))
	}
	var st RoleState
	_, err = h.post(ctx, base+"/promote?epoch="+strconv.FormatInt(epoch, 10), &st)
	if err == nil && (st.Role != RolePrimary || st.Epoch != epoch) {
		err = fmt.Errorf("toy service is %s at epoch %d after promote", st.Role, st.Epoch)
	}
	return h.done(ev, err)
}

func (h *hook) demote(ctx context.Context, base string) int {
	ev := []string{"event", "demote",
		"cluster", h.env.getenv("FAILOVERD_CLUSTER"), "node", h.env.getenv("FAILOVERD_NODE_ID"),
		"epoch", h.env.getenv("FAILOVERD_EPOCH"), "reason", h.env.getenv("FAILOVERD_REASON")}
	// No epoch: our own daemon says stand down, whatever epoch we are at.
	var st RoleState
	_, err := h.post(ctx, base+"/demote", &st)
	if err == nil && st.Role != RoleStandby {
		err = fmt.Errorf("toy service is still %s after demote", st.Role)
	}
	return h.done(ev, err)
}

func (h *hook) health(ctx context.Context, base string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		fmt.Fprintln(h.env.stderr, err)
		return 1
	}
	resp, err := h.client.Do(req)
	if err != nil {
		fmt.Fprintln(h.env.stderr, err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(h.env.stderr, "health:", resp.Status)
		return 1
	}
	return 0
}

// fence makes the target's toy service stand down at the target's epoch.
//
// DEMO ONLY: a target whose toy service refuses the connection is counted
// as fenced, since on one machine "connection refused" means the process is
// gone. Real fencing must prove the old primary cannot act (power it off,
// cut its storage, revoke its lease); an unreachable host proves nothing, it
// may be partitioned away and still writing.
func (h *hook) fence(ctx context.Context, sources []string) int {
	target := h.env.getenv("FAILOVERD_TARGET_ID")
	targetEpoch := h.env.getenv("FAILOVERD_TARGET_EPOCH")
	ev := []string{"event", "fence",
		"cluster", h.env.getenv("FAILOVERD_CLUSTER"), "node", h.env.getenv("FAILOVERD_NODE_ID"),
		"target", target, "target_host", h.env.getenv("FAILOVERD_TARGET_HOST"), "target_epoch", targetEpoch}
	// Tests make fencing fail by creating this file.
	if f := h.env.getenv("FAILOVERD_FENCE_FAIL_FILE"); f != "" {
		if _, err := os.Stat(f); err == nil {
			return h.done(append(ev, "how", "fail-file"), fmt.Errorf("%s exists: failing on purpose", f))
		}
	}
	if target == "" {
		return h.done(ev, errors.New("FAILOVERD_TARGET_ID is not set"))
	}
	var epoch int64
	if targetEpoch != "" {
		var err error
		if epoch, err = strconv.ParseInt(targetEpoch, 10, 64); err != nil || epoch < 0 {
			return h.done(ev, fmt.Errorf("FAILOVERD_TARGET_EPOCH %q is not an epoch", targetEpoch))
		}
	}
	toys, err := loadToyMap(sources)
	if err != nil {
		return h.done(ev, err)
	}
	base, ok := toys[target]
	if !ok {
		return h.done(ev, fmt.Errorf("no toy service address for node %q", target))
	}
	// The epoch makes this a fence of one leadership: a toy service already
	// promoted with a newer epoch keeps its role (see Service.Demote).
	u := base + "/demote"
	if epoch > 0 {
		u += "?epoch=" + strconv.FormatInt(epoch, 10)
	}
	var st RoleState
	_, err = h.post(ctx, u, &st)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return h.done(append(ev, "how", "unreachable"), nil) // demo only, see above
	case err != nil:
		return h.done(ev, err)
	case st.Role == RoleStandby:
		return h.done(append(ev, "how", "demoted"), nil)
	case epoch > 0 && st.Epoch > epoch:
		return h.done(append(ev, "how", "superseded", "toy_epoch", strconv.FormatInt(st.Epoch, 10)), nil)
	}
	return h.done(ev, fmt.Errorf("toy service is still %s at epoch %d", st.Role, st.Epoch))
}

// post POSTs to u and decodes a 2xx JSON answer into v.
func (h *hook) post(ctx context.Context, u string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("POST %s: %s: %s", u, resp.Status, strings.TrimSpace(string(data)))
	}
	if err := json.Unmarshal(data, v); err != nil {
		return resp.StatusCode, fmt.Errorf("POST %s: bad answer: %w", u, err)
	}
	return resp.StatusCode, nil
}

// done records the outcome (result=ok or result=failed with err) and
// returns the exit status.
func (h *hook) done(kv []string, err error) int {
	code := 0
	if err != nil {
		kv = append(kv, "result", "failed", "err", err.Error())
		code = 1
	} else {
		kv = append(kv, "result", "ok")
	}
	line := formatEvent(h.env.now(), kv)
	fmt.Fprint(h.env.stdout, line)
	if h.events != "" {
		if werr := appendLine(h.events, line); werr != nil {
			fmt.Fprintf(h.env.stderr, "events log: %v\n", werr)
		}
	}
	return code
}

// formatEvent renders "TIME k=v k=v\n" (logfmt after the time). Empty values
// are left out; values with spaces, quotes or '=' are quoted.
func formatEvent(t time.Time, kv []string) string {
	var b strings.Builder
	b.WriteString(t.UTC().Format(time.RFC3339Nano))
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			continue
		}
		v := kv[i+1]
		if strings.ContainsAny(v, " \t\n\"=\\") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", kv[i], v)
	}
	b.WriteByte('\n')
	return b.String()
}

// appendLine appends line with a single write(2) on an O_APPEND file, so
// lines from the hooks of several nodes sharing one log never interleave.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadToyMap reads node → toy service URL pairs: each source is either
// "NODE_ID=URL" or a file of "NODE_ID URL" lines ('#' starts a comment).
func loadToyMap(sources []string) (map[string]string, error) {
	if len(sources) == 0 {
		return nil, errors.New("no toy service addresses: pass a map file or NODE_ID=URL arguments")
	}
	m := map[string]string{}
	add := func(id, raw, where string) error {
		u, err := baseURL(raw)
		if err != nil {
			return fmt.Errorf("%s: %v", where, err)
		}
		m[id] = u
		return nil
	}
	for _, src := range sources {
		if id, raw, ok := strings.Cut(src, "="); ok && !strings.ContainsRune(id, '/') {
			if err := add(id, raw, src); err != nil {
				return nil, err
			}
			continue
		}
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line, _, _ := strings.Cut(sc.Text(), "#")
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			if len(fields) != 2 {
				f.Close()
				return nil, fmt.Errorf("%s:%d: want \"node-id toy-url\"", src, n)
			}
			if err := add(fields[0], fields[1], fmt.Sprintf("%s:%d", src, n)); err != nil {
				f.Close()
				return nil, err
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// baseURL accepts "http://host:port" or a bare "host:port" and returns the
// URL without a trailing slash.
func baseURL(s string) (string, error) {
	if s == "" {
		return "", errors.New("no toy service URL")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http URL", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}
