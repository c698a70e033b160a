package fencer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/fencer"
)

var target = fencer.Target{NodeID: "node-a", Host: "10.0.0.1", AdminURL: "http://10.0.0.1:9000", Epoch: 7}

// fake is a Method with a scripted outcome.
type fake struct {
	name      string
	err       error
	takes     time.Duration // how long Fence works before answering
	ignoreCtx bool          // keep working past the deadline
	log       *callLog
}

type callLog struct {
	mu      sync.Mutex
	calls   []string
	targets []fencer.Target
	budgets []time.Duration // time left until the deadline at the call
}

func (l *callLog) names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (f *fake) Name() string { return f.name }

func (f *fake) Fence(ctx context.Context, t fencer.Target) error {
	if f.log != nil {
		f.log.mu.Lock()
		f.log.calls = append(f.log.calls, f.name)
		f.log.targets = append(f.log.targets, t)
		if d, ok := ctx.Deadline(); ok {
			f.log.budgets = append(f.log.budgets, time.Until(d))
		}
		f.log.mu.Unlock()
	}
	if f.ignoreCtx {
		time.Sleep(f.takes)
		return f.err
	}
	select {
	case <-time.After(f.takes):
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

type attempt struct {
	method, result string
	d              time.Duration
}

type metrics struct {
	mu       sync.Mutex
	attempts []attempt
}

func (m *metrics) FenceAttempt(method, result string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attempts = append(m.attempts, attempt{method, result, d})
}

func newChain(t *testing.T, steps []fencer.Step, logger *slog.Logger, m fencer.Metrics) *fencer.Chain {
	t.Helper()
	c, err := fencer.NewChain(steps, fencer.Deps{Logger: logger, Metrics: m})
	if err != nil {
		t.Fatalf("NewChain() = %v", err)
	}
	return c
}

var (
	errRefused  = errors.New("connection refused")
	errHostKey  = errors.New("host key mismatch")
	errExitCode = errors.New("exit status 1")
)

func TestChainOrderAndFirstSuccess(t *testing.T) {
	for _, tc := range []struct {
		name       string
		methods    []*fake
		wantMethod string
		wantCalls  []string
	}{
		{
			name:       "first succeeds",
			methods:    []*fake{{name: "rpc"}, {name: "ssh"}, {name: "shell"}},
			wantMethod: "rpc",
			wantCalls:  []string{"rpc"},
		},
		{
			name:       "later succeeds",
			methods:    []*fake{{name: "rpc", err: errRefused}, {name: "ssh"}, {name: "shell"}},
			wantMethod: "ssh",
			wantCalls:  []string{"rpc", "ssh"},
		},
		{
			name:       "last succeeds",
			methods:    []*fake{{name: "rpc", err: errRefused}, {name: "ssh", err: errHostKey}, {name: "shell"}},
			wantMethod: "shell",
			wantCalls:  []string{"rpc", "ssh", "shell"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &callLog{}
			var steps []fencer.Step
			for _, m := range tc.methods {
				m.log = log
				steps = append(steps, fencer.Step{Method: m, Timeout: time.Minute})
			}
			got, err := newChain(t, steps, nil, nil).Fence(t.Context(), target)
			if err != nil || got != tc.wantMethod {
				t.Fatalf("Fence() = %q, %v, want %q, nil", got, err, tc.wantMethod)
			}
			if calls := log.names(); !slices.Equal(calls, tc.wantCalls) {
				t.Errorf("methods called = %q, want %q", calls, tc.wantCalls)
			}
			for _, tg := range log.targets {
				if tg != target {
					t.Errorf("method got target %+v, want %+v", tg, target)
				}
			}
		})
	}
}

func TestChainAllFail(t *testing.T) {
	m := &metrics{}
	c := newChain(t, []fencer.Step{
		{Method: &fake{name: "rpc", err: errRefused}, Timeout: time.Minute},
		{Method: &fake{name: "ssh", err: errHostKey}, Timeout: time.Minute},
		{Method: &fake{name: "shell", err: errExitCode}, Timeout: time.Minute},
	}, nil, m)
	got, err := c.Fence(t.Context(), target)
	if err == nil || got != "" {
		t.Fatalf("Fence() = %q, %v, want an error", got, err)
	}
	msg := err.Error()
	for _, want := range []string{"fencing node-a: ", "rpc: connection refused", "ssh: host key mismatch", "shell: exit status 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	for _, want := range []error{errRefused, errHostKey, errExitCode} {
		if !errors.Is(err, want) {
			t.Errorf("errors.Is(%v, %v) = false, want true", err, want)
		}
	}
	var results []string
	for _, a := range m.attempts {
		results = append(results, a.method+"="+a.result)
	}
	if want := []string{"rpc=failure", "ssh=failure", "shell=failure"}; !slices.Equal(results, want) {
		t.Errorf("metrics = %q, want %q", results, want)
	}
}

func TestChainEmpty(t *testing.T) {
	got, err := newChain(t, nil, nil, nil).Fence(t.Context(), target)
	if !errors.Is(err, fencer.ErrNoMethods) || got != "" {
		t.Fatalf("Fence() = %q, %v, want ErrNoMethods", got, err)
	}
	if !strings.Contains(err.Error(), "node-a") {
		t.Errorf("error %q does not name the target", err)
	}
}

func TestChainTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name        string
		first       *fake
		wantElapsed time.Duration
	}{
		{"method honours its context", &fake{name: "rpc", takes: time.Hour}, 5 * time.Second},
		{"method ignores its context", &fake{name: "rpc", takes: time.Hour, ignoreCtx: true}, 5 * time.Second},
		{"method answers in time", &fake{name: "rpc", takes: 2 * time.Second, err: errRefused}, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				defer letAbandonedMethodsFinish()
				log := &callLog{}
				tc.first.log = log
				m := &metrics{}
				c := newChain(t, []fencer.Step{
					{Method: tc.first, Timeout: 5 * time.Second},
					{Method: &fake{name: "ssh", takes: time.Second, log: log}, Timeout: 10 * time.Second},
				}, nil, m)
				start := time.Now()
				got, err := c.Fence(t.Context(), target)
				if err != nil || got != "ssh" {
					t.Fatalf("Fence() = %q, %v, want %q, nil", got, err, "ssh")
				}
				if elapsed := time.Since(start); elapsed != tc.wantElapsed+time.Second {
					t.Errorf("Fence took %v, want %v", elapsed, tc.wantElapsed+time.Second)
				}
				if want := []time.Duration{5 * time.Second, 10 * time.Second}; !slices.Equal(log.budgets, want) {
					t.Errorf("methods got deadlines %v away, want %v", log.budgets, want)
				}
				if want := []attempt{{"rpc", "failure", tc.wantElapsed}, {"ssh", "success", time.Second}}; !slices.Equal(m.attempts, want) {
					t.Errorf("metrics = %v, want %v", m.attempts, want)
				}
			})
		})
	}
}

func TestChainTimeoutError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer letAbandonedMethodsFinish()
		c := newChain(t, []fencer.Step{
			{Method: &fake{name: "rpc", takes: time.Hour, ignoreCtx: true}, Timeout: 3 * time.Second},
		}, nil, nil)
		_, err := c.Fence(t.Context(), target)
		if err == nil || !strings.Contains(err.Error(), "rpc: timed out after 3s") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fence() = %v, want rpc timed out after 3s", err)
		}
	})
}

func TestChainCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer letAbandonedMethodsFinish()
		log := &callLog{}
		c := newChain(t, []fencer.Step{
			{Method: &fake{name: "rpc", takes: time.Hour, ignoreCtx: true, log: log}, Timeout: time.Minute},
			{Method: &fake{name: "ssh", log: log}, Timeout: time.Minute},
		}, nil, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.Fence(ctx, target)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fence() = %v, want context.DeadlineExceeded", err)
		}
		if elapsed := time.Since(start); elapsed != 2*time.Second {
			t.Errorf("Fence took %v, want 2s", elapsed)
		}
		if calls := log.names(); !slices.Equal(calls, []string{"rpc"}) {
			t.Errorf("methods called = %q, want only rpc", calls)
		}
		if !strings.Contains(err.Error(), "ssh: not tried") {
			t.Errorf("error %q does not say ssh was not tried", err)
		}
	})
}

// letAbandonedMethodsFinish lets fake methods that ignored their context
// run to their end (an hour at most), which a synctest bubble requires. It
// also shows that an abandoned method does not block forever.
func letAbandonedMethodsFinish() {
	time.Sleep(2 * time.Hour)
	synctest.Wait()
}

func TestChainLogsEveryAttempt(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	c := newChain(t, []fencer.Step{
		{Method: &fake{name: "rpc", err: errRefused}, Timeout: time.Minute},
		{Method: &fake{name: "ssh"}, Timeout: time.Minute},
	}, logger, nil)
	if _, err := c.Fence(t.Context(), target); err != nil {
		t.Fatal(err)
	}
	var records []map[string]any
	for line := range strings.Lines(buf.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		records = append(records, r)
	}
	if len(records) != 2 {
		t.Fatalf("got %d log records, want 2:\n%s", len(records), buf.String())
	}
	for i, want := range []map[string]any{
		{"level": "WARN", "msg": "fence attempt failed", "method": "rpc", "outcome": "failure", "err": "connection refused"},
		{"level": "INFO", "msg": "fence attempt succeeded", "method": "ssh", "outcome": "success"},
	} {
		r := records[i]
		for k, v := range want {
			if r[k] != v {
				t.Errorf("record %d: %s = %v, want %v", i, k, r[k], v)
			}
		}
		if r["target"] != "node-a" || r["epoch"] != float64(7) || r["component"] != "fencer" {
			t.Errorf("record %d lacks target attributes: %v", i, r)
		}
		if _, ok := r["duration_seconds"].(float64); !ok {
			t.Errorf("record %d lacks duration_seconds: %v", i, r)
		}
	}
}

func TestNewChainValidates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []fencer.Step
	}{
		{"nil method", []fencer.Step{{Timeout: time.Second}}},
		{"zero timeout", []fencer.Step{{Method: &fake{name: "rpc"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := fencer.NewChain(tc.steps, fencer.Deps{}); err == nil {
				t.Error("NewChain() = nil error, want one")
			}
		})
	}
}
