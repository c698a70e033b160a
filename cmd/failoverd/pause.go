package main

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// Maintenance mode: failoverd pause and failoverd resume write the
// cluster's pause record (cluster.Layout.Pause) through the Store, as
// failover --to writes its request; every daemon watches it.

func cmdPause(args []string, stdout, stderr io.Writer) int {
	f := newFlags("pause", "pause -c FILE [--reason TEXT]", stderr)
	reason := f.fs.String("reason", "", "why the cluster is paused (shown by status)")
	if code := f.parse(args); code >= 0 {
		return code
	}
	p := cluster.Pause{By: operator(), Reason: *reason, At: time.Now().UTC()}
	if err := p.Check(); err != nil {
		fmt.Fprintln(stderr, "failoverd pause:", err)
		return exitUsage
	}
	cfg, store, closeStore, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeStore()
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	cur, created, err := store.SetPause(ctx, p)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd pause:", err)
		return exitRuntime
	}
	if !created {
		fmt.Fprintf(stdout, "cluster %s is already paused: %s\n", cfg.Cluster, pauseLine(cur))
		return exitOK
	}
	fmt.Fprintf(stdout, "cluster %s paused: no automatic promotion, demotion or fencing until 'failoverd resume' (failover --to still works)\n", cfg.Cluster)
	return exitOK
}

func cmdResume(args []string, stdout, stderr io.Writer) int {
	f := newFlags("resume", "resume -c FILE", stderr)
	if code := f.parse(args); code >= 0 {
		return code
	}
	cfg, store, closeStore, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeStore()
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	was, err := store.ClearPause(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd resume:", err)
		return exitRuntime
	}
	if !was {
		fmt.Fprintf(stdout, "cluster %s is not paused\n", cfg.Cluster)
		return exitOK
	}
	fmt.Fprintf(stdout, "cluster %s resumed: automatic failover is back\n", cfg.Cluster)
	return exitOK
}

// operator names who runs the command, as user@host.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return name + "@" + host
}

// pauseLine describes a pause: since when, by whom, why.
func pauseLine(p cluster.Pause) string {
	s := fmt.Sprintf("since %s by %s", p.At.Local().Format(time.DateTime), p.By)
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

// printPause prints status's PAUSED line.
func printPause(w io.Writer, v clusterView) {
	if v.Pause != nil {
		fmt.Fprintf(w, "PAUSED %s\n", pauseLine(*v.Pause))
	}
}

// stateCell is status's STATE column: the leader's within its failover
// cooldown says until when.
func stateCell(m cluster.Member) string {
	if m.State == cluster.StateLeader && !m.CooldownUntil.IsZero() {
		return fmt.Sprintf("%s (cooldown until %s)", m.State, m.CooldownUntil.Local().Format(time.TimeOnly))
	}
	return m.State
}
