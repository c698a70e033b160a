package controller_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// wantHistory waits until the world's history holds n entries and returns
// them.
func wantHistory(t *testing.T, w *controllertest.World, n int) []cluster.HistoryEntry {
	t.Helper()
	for range 100 {
		if h := w.History(); len(h) >= n {
			if len(h) > n {
				t.Fatalf("history %+v, want %d entries", h, n)
			}
			return h
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("history %+v, want %d entries", w.History(), n)
	return nil
}

// checkEntry compares the fields the controller decides.
func checkEntry(t *testing.T, got cluster.HistoryEntry, want cluster.HistoryEntry) {
	t.Helper()
	got.At, got.DurationMS, want.At, want.DurationMS = time.Time{}, 0, time.Time{}, 0
	if got != want {
		t.Errorf("history entry\n got %+v\nwant %+v", got, want)
	}
}

// Each new leader records its change once its promote succeeded, with
// the reason, the old leader and the fencing method of its takeover.
func TestHistoryEntryPerReason(t *testing.T) {
	t.Run("start", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			a := start(t, w, "a")
			a.hooks.On("promote", controllertest.Result{Take: 2 * time.Second})
			a.healthy()
			time.Sleep(3 * time.Second)
			a.want(controller.StateLeader)
			h := wantHistory(t, w, 1)
			checkEntry(t, h[0], cluster.HistoryEntry{NewLeader: "a", NewEpoch: 1, NewHost: "host-a", Reason: cluster.HistoryStart, FenceMethod: cluster.FenceNone})
			if d := h[0].DurationMS; d < 2000 || d > 2500 {
				t.Errorf("duration %d ms, want the promote's 2000 ms (from the win to the end of the promote)", d)
			}
			if calls := a.hooks.Calls(); !h[0].At.Equal(calls[len(calls)-1].End.UTC()) {
				t.Errorf("entry at %v, promote ended at %v", h[0].At, calls[len(calls)-1].End)
			}
		})
	})
	t.Run("failover", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			w.SetBreadcrumb(other("x", 7))
			leader(t, w, "a")
			h := wantHistory(t, w, 1)
			checkEntry(t, h[0], cluster.HistoryEntry{OldLeader: "x", OldEpoch: 7, OldHost: "host-x", NewLeader: "a", NewEpoch: 1, NewHost: "host-a",
				Reason: cluster.HistoryFailover, FenceMethod: "test"})
		})
	})
	t.Run("failover without fencing", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			w.SetBreadcrumb(other("x", 7))
			leader(t, w, "a", noFencer)
			checkEntry(t, wantHistory(t, w, 1)[0], cluster.HistoryEntry{OldLeader: "x", OldEpoch: 7, OldHost: "host-x", NewLeader: "a", NewEpoch: 1,
				NewHost: "host-a", Reason: cluster.HistoryFailover, FenceMethod: cluster.FenceSkipped})
		})
	})
	t.Run("own previous term", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			w.SetBreadcrumb(other("a", 3))
			leader(t, w, "a")
			checkEntry(t, wantHistory(t, w, 1)[0], cluster.HistoryEntry{OldLeader: "a", OldEpoch: 3, OldHost: "host-a", NewLeader: "a", NewEpoch: 1,
				NewHost: "host-a", Reason: cluster.HistoryFailover, FenceMethod: cluster.FenceLocalDemote})
		})
	})
	t.Run("switchover", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			leader(t, w, "a")
			b := start(t, w, "b")
			b.healthy()
			b.want(controller.StateStandby)
			w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1", By: "ops@host"})
			b.want(controller.StateLeader)
			h := wantHistory(t, w, 2)
			checkEntry(t, h[1], cluster.HistoryEntry{OldLeader: "a", OldEpoch: 1, OldHost: "host-a", NewLeader: "b", NewEpoch: b.c.Status().Epoch,
				NewHost: "host-b", Reason: cluster.HistorySwitchover, FenceMethod: cluster.FenceNone, RequestedBy: "ops@host"})
		})
	})
	t.Run("handover to a preferred node", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			leader(t, w, "a")
			b := start(t, w, "b")
			b.healthy()
			b.want(controller.StateStandby)
			w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r1", By: "a", Reason: cluster.ReasonPreferredPriority})
			b.want(controller.StateLeader)
			checkEntry(t, wantHistory(t, w, 2)[1], cluster.HistoryEntry{OldLeader: "a", OldEpoch: 1, OldHost: "host-a", NewLeader: "b",
				NewEpoch: b.c.Status().Epoch, NewHost: "host-b", Reason: cluster.HistoryHandoverPreferred, FenceMethod: cluster.FenceNone, RequestedBy: "a"})
		})
	})
	t.Run("handoff", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			a := leader(t, w, "a")
			b := start(t, w, "b")
			b.healthy()
			b.want(controller.StateStandby)
			if err := a.stop(); err != nil {
				t.Fatal(err)
			}
			b.want(controller.StateLeader)
			h := wantHistory(t, w, 2)
			checkEntry(t, h[1], cluster.HistoryEntry{OldLeader: "a", OldEpoch: 1, OldHost: "host-a", NewLeader: "b", NewEpoch: b.c.Status().Epoch,
				NewHost: "host-b", Reason: cluster.HistoryHandoff, FenceMethod: cluster.FenceNone})
		})
	})
}

// A failing append never holds up or ends the leadership: it is counted,
// retried a few times within the term, and given up.
func TestHistoryAppendFailureRetriedNotFatal(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetHistoryError(errors.New("test: history unavailable"))
		a := leader(t, w, "a")
		time.Sleep(time.Minute)
		a.want(controller.StateLeader)
		if n := a.metrics.Count("history_append_failed"); n != 4 {
			t.Errorf("append failures counted %d times, want 4 (every attempt): %v", n, a.metrics.Events())
		}
		if h := w.History(); len(h) != 0 {
			t.Errorf("history %+v", h)
		}
	})
	// Recovered before the attempts ran out: the entry is recorded.
	test(t, func(t *testing.T, w *controllertest.World) {
		w.SetHistoryError(errors.New("test: history unavailable"))
		a := leader(t, w, "a")
		a.want(controller.StateLeader)
		w.SetHistoryError(nil)
		h := wantHistory(t, w, 1)
		if h[0].NewLeader != "a" || a.metrics.Count("history_append_failed") != 1 {
			t.Errorf("history %+v, failures %d; want a's entry after one failure", h, a.metrics.Count("history_append_failed"))
		}
	})
}

// logLines is a goroutine-safe log sink that keeps JSON lines.
type logLines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// find returns the decoded lines whose msg is msg.
func (l *logLines) find(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func logTo(l *logLines) opt {
	return func(_ *node, _ *controller.Config, d *controller.Deps) {
		d.Logger = slog.New(slog.NewJSONHandler(l, nil))
	}
}

// The log line of a recorded leadership change tells what the stored entry
// says, also where the append filled in what the new leader did not know:
// a first leader's handoff from nobody is a start, and a graceful
// predecessor comes from the newest entry.
func TestHistoryLogLineMatchesStoredEntry(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		var la, lb logLines
		a := leader(t, w, "a", logTo(&la))
		b := start(t, w, "b", logTo(&lb))
		b.healthy()
		b.want(controller.StateStandby)
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		b.want(controller.StateLeader)
		h := wantHistory(t, w, 2)
		if h[0].Reason != cluster.HistoryStart || h[1].Reason != cluster.HistoryHandoff || h[1].OldLeader != "a" {
			t.Fatalf("history %+v, want a start and a handoff from a", h)
		}
		synctest.Wait()
		for i, l := range []*logLines{&la, &lb} {
			lines := l.find(t, "leadership change recorded in the history")
			if len(lines) != 1 {
				t.Fatalf("%d: %d history log lines, want 1", i, len(lines))
			}
			got, e := lines[0], h[i]
			want := map[string]any{"epoch": float64(e.NewEpoch), "reason": e.Reason, "old_leader": e.OldLeader,
				"old_epoch": float64(e.OldEpoch), "fence_method": e.FenceMethod, "requested_by": e.RequestedBy}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("entry %d: log line %s = %v, stored entry says %v (line %v)", i, k, got[k], v, got)
				}
			}
		}
	})
}

// A term that ended by a lost lease is followed by a failover, whatever
// failover request the successor meets: the request of a node that won
// after the loss and asked a preferred one to take over chose the
// successor but handed nothing over, and a request answered by an earlier
// term (done, left standing) says nothing of this one.
func TestHistoryFailoverAfterLostLease(t *testing.T) {
	t.Run("a winner asks a preferred node", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			leader(t, w, "b")
			c := start(t, w, "c")
			c.healthy()
			c.want(controller.StateStandby)
			a := start(t, w, "a", priority(2))
			a.healthy()
			a.want(controller.StateStandby)
			time.Sleep(100 * time.Millisecond) // member records published
			w.Expire("b")
			a.want(controller.StateLeader)
			if r := w.Failover(); r != nil && (r.By != "c" || r.Reason != cluster.ReasonPreferredPriority) {
				t.Fatalf("request %+v, want c's handover to a", r)
			}
			h := wantHistory(t, w, 2)
			checkEntry(t, h[1], cluster.HistoryEntry{OldLeader: "b", OldEpoch: 1, OldHost: "host-b", NewLeader: "a",
				NewEpoch: a.c.Status().Epoch, NewHost: "host-a", Reason: cluster.HistoryFailover, FenceMethod: "test"})
		})
	})
	t.Run("a request answered by an earlier term", func(t *testing.T) {
		test(t, func(t *testing.T, w *controllertest.World) {
			w.SetFailover(&cluster.FailoverRequest{To: "b", TimeoutMS: 60000, ID: "r0", By: "c",
				Reason: cluster.ReasonPreferredPosition, Done: true, Epoch: 1})
			leader(t, w, "a")
			b := start(t, w, "b")
			b.healthy()
			b.want(controller.StateStandby)
			w.Expire("a")
			b.want(controller.StateLeader)
			h := wantHistory(t, w, 2)
			checkEntry(t, h[1], cluster.HistoryEntry{OldLeader: "a", OldEpoch: 1, OldHost: "host-a", NewLeader: "b",
				NewEpoch: b.c.Status().Epoch, NewHost: "host-b", Reason: cluster.HistoryFailover, FenceMethod: "test"})
		})
	})
}
