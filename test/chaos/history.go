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
	"bytes"
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
	SrcDaemon  = "daemon"  // a failoverd's own log (elected, state transitions, fencing)
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
	KindFault       = "fault"        // phase=inject|heal kind=... id=N target=...
	KindDaemonExit  = "daemon_exit"  // node= pid= expected=true|false err=...
	KindDaemonStart = "daemon_start" // node= pid=: the monitor saw a daemon running (after its start)
	KindSample      = "sample"       // node= pid= fds= goroutines=
	KindCrash       = "crash"        // node= what=data_race|panic (found in a log)
	KindRejoin      = "rejoin"       // node= ok=true|false fault= kind=: could the node lead again after the fault
)

// Other nemesis lines: what a fault did in detail (for the history only).
var harnessKinds = map[string]bool{KindFault: true, KindDaemonExit: true, KindDaemonStart: true, KindSample: true, KindCrash: true, KindRejoin: true,
	"reply_lost": true, "hook_hold": true, "name": true, "zk_isolate": true, "etcd_isolate": true}

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

// Daemon event kinds, parsed from a failoverd's JSON log (ParseDaemonLog).
// The hooks only show what the service was told; these show what the
// daemon believed: when it won an election, when it stopped acting as
// leader, and what its fencing concluded.
const (
	KindElected       = "elected"          // epoch= znode= lease=: the elector won (after its sync)
	KindLeadershipEnd = "leadership_ended" // epoch= reason=: the elector's term is over (after the demote hook)
	KindState         = "state"            // from= to= reason= epoch=: a controller state transition
	KindFenced        = "fenced"           // target= target_epoch= method=: the previous leader was fenced
	KindFenceFailed   = "fencing_failed"   // target= target_epoch=: the whole chain failed; no promotion may follow
	// lease= err=: the etcd session ended; err says "etcd lease X is gone"
	// when etcd no longer had the lease (revoked, or expired on its side).
	KindSessionEnded = "session_ended"
	// leader_node= version= stood_seconds= deadline_ms=: a successor ended
	// the old leader's term at its own deadline (ZooKeeper).
	KindTakeoverAtDeadline = "took_over_at_deadline"
	// entry=: a restarted daemon removed its previous process's entry.
	KindRemovedOwnEntry = "removed_own_entry"
)

// daemonMessages maps the log messages the checker needs to event kinds.
// Any other line is left out of the history.
var daemonMessages = map[string]string{
	"elected":                       KindElected,
	"leadership ended":              KindLeadershipEnd,
	"state transition":              KindState,
	"previous leader fenced":        KindFenced,
	"fencing failed: not promoting": KindFenceFailed,
	"etcd session ended":            KindSessionEnded,
	// election.take_over_at_deadline: the successor deleted the old
	// leader's znode at the heartbeat version that stood past its deadline.
	"ended the old leader's term at its own deadline: its heartbeat stood still past it": KindTakeoverAtDeadline,
	// election.fence_first (fencefirst.go): the suspect's probe failed,
	// the proving fence succeeded, the successor ended the old term after
	// it, and the winner did not fence the term it proved out again.
	"suspected leader does not answer: fencing it before taking over":         KindSuspectUnanswered,
	"fenced the suspected leader before taking over":                          KindProvingFence,
	"ended the old leader's term after fencing it: its heartbeat stood still": KindTakeoverAfterFence,
	"previous leader was fenced before this term began: not fencing it again": KindProvedOutSkip,
	// election.end_own_term_on_restart: a restarted daemon removed its
	// previous process's election entry.
	"removed the previous process's election entry after the startup demote": KindRemovedOwnEntry,
	// A node fencing its own earlier term demotes its service locally.
	"previous term of this node fenced by a local demote": KindFenced,
	// A follow run the controller no longer wants (why=elected, ...).
	"stopping the follow hook": KindFollowStopped,
	// The promotion decisions (policy.go): a won term handed over or declined
	// (lagging), and a leader handing over to a higher priority.
	"elected while a better candidate waits: handing over without fencing or promoting": KindHandoverAtWin,
	"elected but not promoting":                                 KindDeclined,
	"handing leadership over to a standby of a higher priority": KindPreempt,
}

// ParseDaemonLog reads one node's failoverd log (log.format json) and
// returns the events the checker uses, attributed to node. Lines that are
// not JSON (a race report, a panic) are skipped: ScanCrashes reads those.
// The elector logs the election znode as "node"; it is kept as znode.
func ParseDaemonLog(r io.Reader, node string) []Event {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(line))
		d.UseNumber() // epochs (czxids in unfair mode) exceed float64's exact range
		if d.Decode(&m) != nil {
			continue
		}
		msg, _ := m["msg"].(string)
		kind, ok := daemonMessages[msg]
		if !ok {
			continue
		}
		ts, _ := m["time"].(string)
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		kv := map[string]string{}
		for k, v := range m {
			switch k {
			case "time", "level", "msg":
				continue
			case "node":
				k = "znode"
			}
			kv[k] = strings.ReplaceAll(fmt.Sprint(v), " ", "_")
		}
		kv["node"] = node
		if msg == "previous term of this node fenced by a local demote" {
			kv["target"], kv["method"] = node, "local_demote"
		}
		out = append(out, Event{At: at, Src: SrcDaemon, Kind: kind, KV: kv})
	}
	return out
}

// LoadDaemonLogs parses every node's failoverd log (node id -> path);
// a missing file contributes nothing.
func LoadDaemonLogs(logs map[string]string) []Event {
	nodes := make([]string, 0, len(logs))
	for node := range logs {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes) // a deterministic merge for equal timestamps
	var out []Event
	for _, node := range nodes {
		f, err := os.Open(logs[node])
		if err != nil {
			continue
		}
		out = append(out, ParseDaemonLog(f, node)...)
		f.Close()
	}
	return out
}

// Service event kinds, parsed from a toy service's own log (ParseToyLog):
// what the protected resource itself did, on the same clock.
const (
	SrcService     = "service"
	KindToyStart   = "toy_start"   // node= role= epoch=: the service started with this role
	KindToyPromote = "toy_promote" // node= epoch=: the service became primary at epoch
	KindToyDemote  = "toy_demote"  // node= epoch= fence_epoch= was=: the service stood down
)

// toyEvents maps the toy service's event names to event kinds; its writes
// are in the store's decisions already.
var toyEvents = map[string]string{"start": KindToyStart, "promote": KindToyPromote, "demote": KindToyDemote}

// ParseToyLog reads one toy service's log (JSON lines with "time" and
// "event") and returns its role changes, attributed to node.
func ParseToyLog(r io.Reader, node string) []Event {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(`"event":"`)) {
			continue
		}
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(line))
		d.UseNumber()
		if d.Decode(&m) != nil {
			continue
		}
		ev, _ := m["event"].(string)
		kind, ok := toyEvents[ev]
		if !ok {
			continue
		}
		ts, _ := m["time"].(string)
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		kv := map[string]string{}
		for k, v := range m {
			if k != "time" && k != "event" {
				kv[k] = strings.ReplaceAll(fmt.Sprint(v), " ", "_")
			}
		}
		kv["node"] = node
		out = append(out, Event{At: at, Src: SrcService, Kind: kind, KV: kv})
	}
	return out
}

// LoadToyLogs parses every node's toy service log (node id -> path); a
// missing file contributes nothing.
func LoadToyLogs(logs map[string]string) []Event {
	nodes := make([]string, 0, len(logs))
	for node := range logs {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	var out []Event
	for _, node := range nodes {
		f, err := os.Open(logs[node])
		if err != nil {
			continue
		}
		out = append(out, ParseToyLog(f, node)...)
		f.Close()
	}
	return out
}

// Load reads and merges the events log, the store's decision log, the
// daemons' logs and the services' logs (node id -> path of its
// failoverd.log, of its toy.log; either may be nil).
func Load(eventsPath, decisionsPath string, daemonLogs, toyLogs map[string]string) (History, error) {
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
	return Merge(evs, ds, LoadDaemonLogs(daemonLogs), LoadToyLogs(toyLogs)), nil
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
