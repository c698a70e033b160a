// Package chaos is failoverd's fault suite: a 3-node ZooKeeper ensemble,
// three failoverd nodes each beside the example toy service, one shared
// fenced store every primary writes to with its epoch, and a nemesis that
// injects and heals faults on a seeded random schedule. Everything that
// happens lands in one history on one clock, and a pure checker (check.go)
// decides whether the run was safe and live.
//
// Run the CI slice with `go test ./test/chaos/` (TestChaosSlice) and a long
// schedule with `make chaos DURATION=30m SEED=7` (TestChaosLong).
package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

// Sources of history events.
const (
	SrcHook    = "hook"    // the hook scripts' events log (promote, demote, fence...)
	SrcStore   = "store"   // the fenced store's decisions.jsonl (write)
	SrcNemesis = "nemesis" // faults injected and healed, daemon exits, samples
)

// Event is one entry of the merged history.
type Event struct {
	At   time.Time
	Src  string
	Kind string
	KV   map[string]string
}

// Get returns the value of key k ("" if absent).
func (e Event) Get(k string) string { return e.KV[k] }

// Int returns key k as an integer (0 if absent or not a number).
func (e Event) Int(k string) int64 {
	v, _ := strconv.ParseInt(e.KV[k], 10, 64)
	return v
}

// String renders the event as one history line.
func (e Event) String() string {
	keys := make([]string, 0, len(e.KV))
	for k := range e.KV {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-7s %s", e.At.Format("15:04:05.000000"), e.Src, e.Kind)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, e.KV[k])
	}
	return b.String()
}

// History is a list of events ordered by time (ties keep their input order).
type History []Event

// Merge sorts events from several sources into one history by timestamp.
// The sort is stable, so events of one source with equal times keep the
// order that source wrote them in (the store's decision order, for one).
func Merge(sources ...[]Event) History {
	var h History
	for _, s := range sources {
		h = append(h, s...)
	}
	sort.SliceStable(h, func(i, j int) bool { return h[i].At.Before(h[j].At) })
	return h
}

// ParseEventsLog reads the hooks' and the nemesis' shared events log:
// "UNIXNANO KIND k=v ..." lines (clustertest's format). Lines whose kind
// starts with "nemesis_" or is a harness kind are attributed to the nemesis.
func ParseEventsLog(r io.Reader) []Event {
	var out []Event
	for _, e := range clustertest.ParseEvents(r) {
		src := SrcHook
		if harnessKinds[e.Kind] {
			src = SrcNemesis
		}
		out = append(out, Event{At: e.At, Src: src, Kind: e.Kind, KV: e.KV})
	}
	return out
}

// Harness event kinds (written by the nemesis into the shared events log).
const (
	KindFault      = "fault"       // phase=inject|heal kind=... id=N target=...
	KindDaemonExit = "daemon_exit" // node= pid= expected=true|false err=...
	KindSample     = "sample"      // node= pid= fds= goroutines=
	KindCrash      = "crash"       // node= what=data_race|panic (found in a log)
)

var harnessKinds = map[string]bool{KindFault: true, KindDaemonExit: true, KindSample: true, KindCrash: true}

// storeDecision is one line of the store's decisions.jsonl.
type storeDecision struct {
	Time     string `json:"time"`
	Node     string `json:"node"`
	Epoch    int64  `json:"epoch"`
	Seq      int64  `json:"seq"`
	Accepted bool   `json:"accepted"`
	MaxEpoch int64  `json:"max_epoch"`
}

// ParseDecisions reads the store's decisions.jsonl into "write" events.
func ParseDecisions(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var d storeDecision
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			return out, fmt.Errorf("decisions.jsonl: %w: %q", err, line)
		}
		at, err := time.Parse(time.RFC3339Nano, d.Time)
		if err != nil {
			return out, fmt.Errorf("decisions.jsonl: time: %w", err)
		}
		out = append(out, Event{At: at, Src: SrcStore, Kind: KindWrite, KV: map[string]string{
			"node": d.Node, "epoch": strconv.FormatInt(d.Epoch, 10), "seq": strconv.FormatInt(d.Seq, 10),
			"accepted": strconv.FormatBool(d.Accepted), "max_epoch": strconv.FormatInt(d.MaxEpoch, 10),
		}})
	}
	return out, sc.Err()
}

// KindWrite is a store decision.
const KindWrite = "write"

// Load reads and merges the events log and the store's decision log.
func Load(eventsPath, decisionsPath string) (History, error) {
	ef, err := os.Open(eventsPath)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	evs := ParseEventsLog(ef)
	df, err := os.Open(decisionsPath)
	if err != nil {
		return nil, err
	}
	defer df.Close()
	ds, err := ParseDecisions(df)
	if err != nil {
		return nil, err
	}
	return Merge(evs, ds), nil
}

// WriteTo writes the history, one event per line. Writes are condensed:
// runs of accepted writes by one node and epoch become one line, so the file
// stays readable.
func (h History) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	var n int64
	for i := 0; i < len(h); i++ {
		e := h[i]
		if e.Kind == KindWrite && e.Get("accepted") == "true" {
			j := i
			for j+1 < len(h) && h[j+1].Kind == KindWrite && h[j+1].Get("accepted") == "true" &&
				h[j+1].Get("node") == e.Get("node") && h[j+1].Get("epoch") == e.Get("epoch") {
				j++
			}
			if j > i {
				k, err := fmt.Fprintf(bw, "%s  (%d accepted writes by %s at epoch %s until %s)\n",
					e, j-i+1, e.Get("node"), e.Get("epoch"), h[j].At.Format("15:04:05.000000"))
				n += int64(k)
				if err != nil {
					return n, err
				}
				i = j
				continue
			}
		}
		if e.Kind == KindSample {
			continue
		}
		k, err := fmt.Fprintln(bw, e)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

// Excerpt renders the events within d of t (condensed like WriteTo).
func (h History) Excerpt(t time.Time, d time.Duration) string {
	var sub History
	for _, e := range h {
		if !e.At.Before(t.Add(-d)) && !e.At.After(t.Add(d)) {
			sub = append(sub, e)
		}
	}
	var b strings.Builder
	sub.WriteTo(&b)
	return b.String()
}
