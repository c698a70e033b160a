package cluster_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/failoverd/failoverd/cluster"
)

// AppendHistory fills in the old leader from the newest entry only when
// the breadcrumb named none, turns a handoff from nobody into a start,
// drops a term's second entry, and cuts long strings on a rune boundary.
func TestAppendHistoryRules(t *testing.T) {
	e := func(id string, epoch int64, reason string) cluster.HistoryEntry {
		return cluster.HistoryEntry{NewLeader: id, NewEpoch: epoch, NewHost: "h-" + id, Reason: reason, FenceMethod: cluster.FenceNone}
	}
	h, stored, ok := cluster.AppendHistory(nil, e("a", 1, cluster.HistoryHandoff))
	if !ok || len(h) != 1 || h[0].Reason != cluster.HistoryStart || h[0].OldLeader != "" {
		t.Fatalf("first handoff = %+v, %v; want a start", h, ok)
	}
	if stored != h[0] {
		t.Errorf("stored entry %+v, want the one appended %+v", stored, h[0])
	}
	h, stored, _ = cluster.AppendHistory(h, e("b", 2, cluster.HistorySwitchover))
	if stored != h[1] {
		t.Errorf("stored entry %+v, want the one appended %+v", stored, h[1])
	}
	if got := h[1]; got.OldLeader != "a" || got.OldEpoch != 1 || got.OldHost != "h-a" || got.Reason != cluster.HistorySwitchover {
		t.Errorf("switchover after a = %+v, want old leader a@1 (h-a)", got)
	}
	fenced := e("c", 5, cluster.HistoryFailover)
	fenced.OldLeader, fenced.OldEpoch, fenced.FenceMethod = "x", 4, "rpc"
	h, _, _ = cluster.AppendHistory(h, fenced)
	if got := h[2]; got.OldLeader != "x" || got.OldEpoch != 4 || got.FenceMethod != "rpc" {
		t.Errorf("a fenced old leader was replaced: %+v", got)
	}
	if again, stored, ok := cluster.AppendHistory(h, fenced); ok || len(again) != 3 || stored != h[2] {
		t.Errorf("a term's second entry was added: %d entries, %v, stored %+v", len(again), ok, stored)
	}
	long := e(strings.Repeat("é", 100), 6, cluster.HistoryHandoff)
	h, _, _ = cluster.AppendHistory(h, long)
	if s := h[3].NewLeader; len(s) > 128 || !utf8.ValidString(s) || !strings.HasPrefix(long.NewLeader, s) {
		t.Errorf("long node id kept as %d bytes %q", len(s), s)
	}
}

// The history's JSON is read by CLIs of other versions and operators'
// scripts: the field names are its format.
func TestHistoryEntryJSON(t *testing.T) {
	e := cluster.HistoryEntry{At: time.Date(2026, 11, 23, 14, 5, 6, 0, time.UTC), OldLeader: "a", OldEpoch: 3, OldHost: "h1",
		NewLeader: "b", NewEpoch: 7, NewHost: "h2", Reason: "failover", FenceMethod: "rpc", DurationMS: 1500, RequestedBy: "op"}
	want := `{"at":"2026-11-23T14:05:06Z","old_leader":"a","old_epoch":3,"old_host":"h1","new_leader":"b","new_epoch":7,"new_host":"h2",` +
		`"reason":"failover","fence_method":"rpc","duration_ms":1500,"requested_by":"op"}`
	if b, _ := json.Marshal(e); string(b) != want {
		t.Errorf("HistoryEntry JSON\n got %s\nwant %s", b, want)
	}
	h, err := cluster.DecodeHistory([]byte("[" + want + "]"))
	if err != nil || len(h) != 1 || h[0] != e {
		t.Errorf("DecodeHistory = %+v, %v", h, err)
	}
}
