package cluster

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// HistoryEntry is one completed leadership change, as the new leader
// records it once its promote hook succeeded (the History record holds a
// JSON list of them, oldest first). It is for operators reading back what
// happened; nothing decides anything from it except the next entry's old
// leader when the breadcrumb no longer names one (see AppendHistory).
type HistoryEntry struct {
	At        time.Time `json:"at"` // when the promote hook succeeded
	OldLeader string    `json:"old_leader,omitempty"`
	OldEpoch  int64     `json:"old_epoch,omitempty"`
	OldHost   string    `json:"old_host,omitempty"`
	NewLeader string    `json:"new_leader"`
	NewEpoch  int64     `json:"new_epoch"`
	NewHost   string    `json:"new_host,omitempty"`
	// Reason is one of the History* reasons.
	Reason string `json:"reason"`
	// FenceMethod is the fencing method that stopped the old leader (the
	// fencer's method name, FenceLocalDemote or FenceSkipped), or
	// FenceNone when nothing needed fencing.
	FenceMethod string `json:"fence_method"`
	// DurationMS is how long the takeover took, from the election win to
	// the end of the promote hook.
	DurationMS int64 `json:"duration_ms"`
	// RequestedBy is the requester of a switchover or handover
	// (FailoverRequest.By).
	RequestedBy string `json:"requested_by,omitempty"`
}

// Reasons of a HistoryEntry.
const (
	// HistoryFailover: the breadcrumb named a previous leader, which was
	// fenced (or, with fencing.allow_none, skipped) before the promotion:
	// its term ended (a lost lease, a crash, an unhealthy demote), also
	// when the node that won next asked this one to take over instead.
	HistoryFailover = "failover"
	// HistorySwitchover: this node was the target of an operator's
	// failover --to.
	HistorySwitchover = "switchover"
	// HistoryHandoverPreferred: the previous leader handed leadership over
	// to this one by a failover request with a reason (a preferred
	// priority or position), or a node asked this one to take over from a
	// previous leader that left gracefully.
	HistoryHandoverPreferred = "handover_preferred"
	// HistoryHandoff: the previous leader left gracefully (no breadcrumb
	// to fence); it is known from the newest history entry.
	HistoryHandoff = "handoff"
	// HistoryStart: no previous leader is known (a first start, or every
	// earlier leader left gracefully before any history was kept).
	HistoryStart = "start"
)

// Fence methods of a HistoryEntry besides the fencer's method names.
const (
	FenceNone        = "none"         // nothing needed fencing
	FenceLocalDemote = "local_demote" // our own previous term, demoted by this node's demote hook
	FenceSkipped     = "skipped"      // fencing.allow_none: the old leader was not fenced
)

// Bounds of the History record: ZooKeeper refuses a znode above 1 MB
// (jute.maxbuffer), and the newest entries are what an operator reads.
// MaxHistory entries of at most maxHistoryString bytes per string stay
// below ~130 KB (about 1.2 KB an entry at worst, 200 bytes a typical one).
const (
	MaxHistory       = 100
	maxHistoryString = 128
	// MaxHistoryBytes is the largest History record read back; a larger
	// one was not written by failoverd and counts as corrupt.
	MaxHistoryBytes = 512 << 10
)

// HistoryCorruptError means the History record is not a list of entries
// (or too large): something other than failoverd wrote it.
type HistoryCorruptError struct {
	Size int
	Data []byte // the record's first bytes, at most 256, for the operator
	Err  error
}

func (e *HistoryCorruptError) Error() string {
	return fmt.Sprintf("the history record (%d bytes) is unreadable: %v (begins %q)", e.Size, e.Err, e.Data)
}

func (e *HistoryCorruptError) Unwrap() error { return e.Err }

// DecodeHistory parses the History record's data (nil or empty: no
// history yet). An error is a *HistoryCorruptError.
func DecodeHistory(data []byte) ([]HistoryEntry, error) {
	if len(data) == 0 {
		return nil, nil
	}
	corrupt := func(err error) error {
		return &HistoryCorruptError{Size: len(data), Data: append([]byte(nil), data[:min(len(data), 256)]...), Err: err}
	}
	if len(data) > MaxHistoryBytes {
		return nil, corrupt(fmt.Errorf("larger than %d bytes", MaxHistoryBytes))
	}
	var h []HistoryEntry
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, corrupt(err)
	}
	return h, nil
}

// AppendHistory returns h (oldest first) with e appended, bounded to the
// newest MaxHistory entries and with e's strings cut to a bounded length.
// What only the history knows is filled in here, in the same
// read-modify-write as the append, so that it matches the list it joins:
// an entry naming no old leader (the breadcrumb was absent: the previous
// leader finished gracefully) takes the newest entry's new leader as its
// old one, and a handoff with no entry to take it from becomes a start.
// stored is e as it is in out, the one entry both the record and the
// log line report. An entry of a term already in h (a retried append whose
// first attempt went through after all) is not added again: ok is false,
// and stored is the entry already there.
func AppendHistory(h []HistoryEntry, e HistoryEntry) (out []HistoryEntry, stored HistoryEntry, ok bool) {
	for _, x := range h {
		if x.NewEpoch == e.NewEpoch && x.NewLeader == e.NewLeader {
			return h, x, false
		}
	}
	if e.OldLeader == "" && len(h) > 0 {
		last := h[len(h)-1]
		e.OldLeader, e.OldEpoch, e.OldHost = last.NewLeader, last.NewEpoch, last.NewHost
	}
	if e.OldLeader == "" && e.Reason == HistoryHandoff {
		e.Reason = HistoryStart
	}
	e = e.bounded()
	out = append(h, e)
	if n := len(out) - MaxHistory; n > 0 {
		out = out[n:]
	}
	return out, e, true
}

// LogAttrs are e's slog attributes, for the line that reports an entry as
// stored: the same fields an operator reads back in the history.
func (e HistoryEntry) LogAttrs() []any {
	return []any{"epoch", e.NewEpoch, "reason", e.Reason, "old_leader", e.OldLeader, "old_epoch", e.OldEpoch,
		"fence_method", e.FenceMethod, "requested_by", e.RequestedBy}
}

// bounded cuts every string of e to maxHistoryString bytes.
func (e HistoryEntry) bounded() HistoryEntry {
	for _, s := range []*string{&e.OldLeader, &e.OldHost, &e.NewLeader, &e.NewHost, &e.Reason, &e.FenceMethod, &e.RequestedBy} {
		*s = truncate(*s, maxHistoryString)
	}
	return e
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
