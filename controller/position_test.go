package controller_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
	"github.com/failoverd/failoverd/internal/proc/proctest"
)

// Data freshness: the position command's results reach the member record
// and, from the promoted leader, the LeaderPosition record.

// fakePosition is a scripted controller.PositionReader: every read answers
// what set or fail said last, and is counted.
type fakePosition struct {
	mu    sync.Mutex
	pos   int64
	err   error
	reads int
}

func (f *fakePosition) ReadPosition(ctx context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.pos, f.err
}

func (f *fakePosition) set(p int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pos, f.err = p, nil
}

func (f *fakePosition) fail(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = &controller.PositionError{Reason: reason, Err: errors.New("scripted: " + reason)}
}

// withPosition gives a node the position reader f, read every second.
func withPosition(f *fakePosition) opt {
	return func(_ *node, cfg *controller.Config, d *controller.Deps) {
		cfg.PositionInterval = time.Second
		d.Position = f
	}
}

// memberPosition is id's published position (-1: none) and its time.
func memberPosition(t *testing.T, w *controllertest.World, id string) (int64, time.Time) {
	t.Helper()
	synctest.Wait()
	m, ok := w.Member(id)
	if !ok {
		t.Fatalf("no member record of %s", id)
	}
	if m.Position == nil {
		if !m.PositionAt.IsZero() {
			t.Errorf("%s publishes no position but a position time %v", id, m.PositionAt)
		}
		return -1, m.PositionAt
	}
	return *m.Position, m.PositionAt
}

// Every node publishes its position (the member record is written when it
// changes, not at every run); the promoted leader also writes the
// LeaderPosition record of its term, when its position changed and only
// once promoted; a run that fails makes the position unknown at once
// (counted by reason) while the leader record keeps the last good value;
// the next leader writes the record of its own term.
func TestPositionsPublished(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		pa, pb := &fakePosition{pos: 100}, &fakePosition{pos: 90}
		a := start(t, w, "a", withPosition(pa))
		a.hooks.On("promote", controllertest.Result{Take: 3 * time.Second})
		a.healthy()
		a.want(controller.StatePromoting)
		time.Sleep(2 * time.Second) // two reads while promoting
		synctest.Wait()
		if got := w.PositionWrites(); len(got) != 0 {
			t.Fatalf("leader position written before the promote was over: %+v", got)
		}
		a.want(controller.StatePromoting)
		time.Sleep(1500 * time.Millisecond)
		a.want(controller.StateLeader)
		epochA := a.c.Status().Epoch
		if got, _ := memberPosition(t, w, "a"); got != 100 {
			t.Fatalf("a publishes %d, want 100", got)
		}
		if st := a.c.Status(); st.Position == nil || *st.Position != 100 || st.PositionAt.IsZero() {
			t.Fatalf("a's status position %v at %v, want 100", st.Position, st.PositionAt)
		}
		want := cluster.LeaderPosition{NodeID: "a", Epoch: epochA, Position: 100}
		if got := w.PositionWrites(); len(got) != 1 || got[0].NodeID != want.NodeID || got[0].Epoch != want.Epoch || got[0].Position != 100 || got[0].At.IsZero() {
			t.Fatalf("leader position writes %+v, want one %+v", got, want)
		}

		// Unchanged: no member record write, no leader position write.
		pubs := w.Publishes("a")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := w.Publishes("a"); n != pubs {
			t.Errorf("%d member record writes in 5 runs of an unchanged position, want none", n-pubs)
		}
		if got := w.PositionWrites(); len(got) != 1 {
			t.Errorf("leader position rewritten while unchanged: %+v", got)
		}
		pa.mu.Lock()
		if pa.reads < 7 {
			t.Errorf("%d reads in ~8.5s at a 1s interval", pa.reads)
		}
		pa.mu.Unlock()

		// Changed: both records follow within an interval.
		pa.set(150)
		time.Sleep(1100 * time.Millisecond)
		if got, _ := memberPosition(t, w, "a"); got != 150 {
			t.Fatalf("a publishes %d, want 150", got)
		}
		if got := w.LeaderPosition(); got == nil || got.Position != 150 || got.Epoch != epochA {
			t.Fatalf("leader position %+v, want 150 of epoch %d", got, epochA)
		}

		// b, a standby, publishes its own; it writes no leader record.
		b := start(t, w, "b", withPosition(pb))
		b.healthy()
		b.want(controller.StateStandby)
		time.Sleep(1100 * time.Millisecond)
		if got, _ := memberPosition(t, w, "b"); got != 90 {
			t.Fatalf("b publishes %d, want 90", got)
		}

		// A bad run: unknown at once, counted; the leader record stays.
		pa.fail(controller.PositionErrOutput)
		time.Sleep(1100 * time.Millisecond)
		if got, _ := memberPosition(t, w, "a"); got != -1 {
			t.Fatalf("a publishes %d after a bad run, want no position", got)
		}
		if st := a.c.Status(); st.Position != nil || !st.PositionAt.IsZero() {
			t.Errorf("a's status %v at %v after a bad run, want unknown", *st.Position, st.PositionAt)
		}
		if n := a.metrics.Count("position_error:output"); n == 0 {
			t.Errorf("no position_error:output counted (%v)", a.metrics.Events())
		}
		if got := w.LeaderPosition(); got == nil || got.Position != 150 {
			t.Fatalf("leader position %+v after a bad run, want the last good 150 kept", got)
		}
		pa.set(160)
		time.Sleep(1100 * time.Millisecond)
		if got, _ := memberPosition(t, w, "a"); got != 160 {
			t.Fatalf("a publishes %d after recovering, want 160", got)
		}

		// a goes; b leads and writes the record of its term.
		pb.set(95)
		w.ExpireSession("a")
		b.want(controller.StateLeader)
		time.Sleep(1100 * time.Millisecond)
		synctest.Wait()
		if got := w.LeaderPosition(); got == nil || got.NodeID != "b" || got.Epoch != b.c.Status().Epoch || got.Position != 95 {
			t.Fatalf("leader position %+v, want b's 95 of epoch %d", got, b.c.Status().Epoch)
		}
		for _, p := range w.PositionWrites() {
			if p.NodeID == "a" && p.Epoch != epochA || p.NodeID == "b" && p.Epoch != b.c.Status().Epoch {
				t.Errorf("a leader position write outside its writer's term: %+v", p)
			}
		}
	})
}

// A node without a position command publishes none, and a leader writes
// no leader position.
func TestNoPositionCommand(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		leader(t, w, "a")
		time.Sleep(3 * time.Second)
		if got, _ := memberPosition(t, w, "a"); got != -1 {
			t.Errorf("a publishes position %d without a command", got)
		}
		if got := w.PositionWrites(); len(got) != 0 {
			t.Errorf("leader position written without a command: %+v", got)
		}
	})
}

func TestParsePosition(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"42\n", 42, true},
		{"  \t 1234567 \n\n", 1234567, true},
		{"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775808", 0, false}, // beyond int64
		{"", 0, false},
		{" \n", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1.5", 0, false},
		{"1e6", 0, false},
		{"0x10", 0, false},
		{"1 2", 0, false},
		{"1\n2", 0, false},
		{"12 bytes", 0, false},
		{"master_repl_offset:12", 0, false},
	} {
		got, err := controller.ParsePosition(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePosition(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// ProcPosition with real processes: stdout is the position (stderr is
// not), the node is named in the environment, and a failed exit, bad
// output and a hung command are errors of their reason, the hung one
// killed at its timeout.
func TestProcPosition(t *testing.T) {
	envOut := filepath.Join(t.TempDir(), "env")
	t.Setenv("ENV_OUT", envOut)
	for _, tc := range []struct {
		name, body string
		want       int64
		reason     string // "": success
	}{
		{"number", `env | grep '^FAILOVERD_' | sort > "$ENV_OUT"; echo "a warning" >&2; printf ' 1234\n'`, 1234, ""},
		{"exit", `echo 5; exit 3`, 0, controller.PositionErrExit},
		{"negative", `echo -5`, 0, controller.PositionErrOutput},
		{"two lines", `echo 5; echo 6`, 0, controller.PositionErrOutput},
		{"nothing", `true`, 0, controller.PositionErrOutput},
		{"hung", `echo 5; exec sleep 60`, 0, controller.PositionErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := controller.ProcPosition{Argv: []string{proctest.Script(t, tc.body)}, Timeout: 500 * time.Millisecond, Cluster: "orders", NodeID: "b"}
			began := time.Now()
			got, err := p.ReadPosition(t.Context())
			if took := time.Since(began); took > 10*time.Second {
				t.Errorf("took %v (timeout 500ms)", took)
			}
			if tc.reason == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ReadPosition = %d, %v; want %d", got, err, tc.want)
				}
				return
			}
			var pe *controller.PositionError
			if !errors.As(err, &pe) || pe.Reason != tc.reason {
				t.Fatalf("ReadPosition = %d, %v; want a %s error", got, err, tc.reason)
			}
		})
	}
	b, err := os.ReadFile(envOut)
	if err != nil {
		t.Fatal(err)
	}
	if env := string(b); env != "FAILOVERD_CLUSTER=orders\nFAILOVERD_NODE_ID=b\n" {
		t.Errorf("environment %q", env)
	}
}
