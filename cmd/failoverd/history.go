package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// cmdHistory prints the cluster's leadership changes, oldest first (so
// the newest is the last line, next to the prompt): a table, or with
// --json the list as it is stored. No history yet prints "no history"
// ([] with --json) and exits 0; an unreadable record or ZooKeeper out of
// reach within 10s exits 1 with the reason.
func cmdHistory(args []string, stdout, stderr io.Writer) int {
	f := newFlags("history", "history -c FILE [--json] [--limit N]", stderr)
	asJSON := f.fs.Bool("json", false, "print the entries as a JSON list")
	limit := f.fs.Int("limit", 0, "print only the newest N entries (0: all)")
	if code := f.parse(args); code >= 0 {
		return code
	}
	if *limit < 0 {
		fmt.Fprintln(stderr, "failoverd history: --limit must be >= 0")
		return exitUsage
	}
	_, store, closeStore, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeStore()
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	h, err := store.History(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd: reading the history:", err)
		return exitRuntime
	}
	if *limit > 0 && len(h) > *limit {
		h = h[len(h)-*limit:]
	}
	printHistory(stdout, h, *asJSON)
	return exitOK
}

// printHistory writes h as a table (TIME, OLD, NEW, EPOCH, REASON, FENCE,
// TOOK; OLD as node@epoch) or as JSON.
func printHistory(w io.Writer, h []cluster.HistoryEntry, asJSON bool) {
	switch {
	case asJSON:
		if h == nil {
			h = []cluster.HistoryEntry{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h)
		return
	case len(h) == 0:
		fmt.Fprintln(w, "no history")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tOLD\tNEW\tEPOCH\tREASON\tFENCE\tTOOK")
	for _, e := range h {
		old := "-"
		if e.OldLeader != "" {
			old = fmt.Sprintf("%s@%d", e.OldLeader, e.OldEpoch)
		}
		took := (time.Duration(e.DurationMS) * time.Millisecond).String()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", timeOrDash(e.At), old, orDash(e.NewLeader), e.NewEpoch,
			orDash(e.Reason), orDash(e.FenceMethod), took)
	}
	tw.Flush()
}
