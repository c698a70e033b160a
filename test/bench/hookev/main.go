// Command hookev is the benchmarks' trivial hook: it appends one event line,
// "UNIXNANO KIND key=value ...", to events.log in its own directory and does
// nothing else. KIND is its file name without ".sh": the benchmarks install
// it as a cluster's promote.sh and demote.sh (clustertest's hook names), so
// the line looks like the ones clustertest's scripts write. The time is read
// first thing, so the event marks when the hook started.
package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	now := time.Now().UnixNano()
	self := os.Args[0]
	kind := strings.TrimSuffix(filepath.Base(self), ".sh")
	var b strings.Builder
	b.WriteString(strconv.FormatInt(now, 10))
	b.WriteString(" " + kind)
	keys := [][2]string{{"node", "FAILOVERD_NODE_ID"}, {"epoch", "FAILOVERD_EPOCH"}, {"role", "FAILOVERD_ROLE"}, {"reason", "FAILOVERD_REASON"}}
	if kind == "promote" {
		keys = append(keys, [2]string{"prev", "FAILOVERD_PREVIOUS_LEADER"}, [2]string{"prev_epoch", "FAILOVERD_PREVIOUS_EPOCH"})
	}
	for _, k := range keys {
		b.WriteString(" " + k[0] + "=" + os.Getenv(k[1]))
	}
	b.WriteByte('\n')
	f, err := os.OpenFile(filepath.Join(filepath.Dir(self), "events.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
