package healthcheck_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/healthcheck"
)

// checkFunc adapts a function to healthcheck.Checker.
type checkFunc func(ctx context.Context) error

func (f checkFunc) Check(ctx context.Context) error { return f(ctx) }

var (
	errNo       = errors.New("service says no")
	errNoAnswer = &healthcheck.NotRespondingError{Err: errors.New("connection refused")}
)

type change struct {
	from, to healthcheck.State
	err      error
}

// recorder collects OnChange calls and metrics.
type recorder struct {
	mu      sync.Mutex
	changes []change
	results []string
	durs    []time.Duration
}

func (r *recorder) onChange(from, to healthcheck.State, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, change{from, to, err})
}

func (r *recorder) CheckDone(result string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results = append(r.results, result)
	r.durs = append(r.durs, d)
}

func (r *recorder) transitions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, c := range r.changes {
		s = append(s, c.from.String()+">"+c.to.String())
	}
	return s
}

// startMonitor runs m until the test's bubble ends; stop cancels it and
// waits for Run to return.
func startMonitor(t *testing.T, m *healthcheck.Monitor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	}
}

func TestMonitorRiseFall(t *testing.T) {
	ok := error(nil)
	for _, tc := range []struct {
		name       string
		rise, fall int
		results    []error
		want       []string
		wantState  healthcheck.State
	}{
		{
			name:      "rise then fall then rise",
			results:   []error{ok, ok, errNo, errNo, errNo, ok, ok},
			want:      []string{"initializing>healthy", "healthy>unhealthy", "unhealthy>healthy"},
			wantState: healthcheck.Healthy,
		},
		{
			name:      "isolated failures are absorbed",
			results:   []error{ok, ok, errNo, ok, errNo, errNo, ok, errNoAnswer},
			want:      []string{"initializing>healthy"},
			wantState: healthcheck.Healthy,
		},
		{
			name:      "one success is not enough",
			results:   []error{ok, errNo, ok, errNo, errNo},
			want:      nil,
			wantState: healthcheck.Initializing,
		},
		{
			name:      "no answer",
			results:   []error{errNoAnswer, errNoAnswer, errNoAnswer},
			want:      []string{"initializing>not_responding"},
			wantState: healthcheck.NotResponding,
		},
		{
			name:      "kind follows the latest failure",
			results:   []error{errNo, errNoAnswer, errNoAnswer, errNo, errNo, errNoAnswer},
			want:      []string{"initializing>not_responding", "not_responding>unhealthy", "unhealthy>not_responding"},
			wantState: healthcheck.NotResponding,
		},
		{
			name:      "rise and fall of one",
			rise:      1,
			fall:      1,
			results:   []error{ok, errNo, ok},
			want:      []string{"initializing>healthy", "healthy>unhealthy", "unhealthy>healthy"},
			wantState: healthcheck.Healthy,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				check := checkFunc(func(context.Context) error {
					i := int(calls.Add(1)) - 1
					return tc.results[min(i, len(tc.results)-1)]
				})
				rec := &recorder{}
				m, err := healthcheck.New(healthcheck.Config{Interval: time.Second, Rise: tc.rise, Fall: tc.fall},
					healthcheck.Deps{Checker: check, OnChange: rec.onChange, Metrics: rec})
				if err != nil {
					t.Fatal(err)
				}
				stop := startMonitor(t, m)
				// Check i runs at i seconds; stop half-way after the last.
				time.Sleep(time.Duration(len(tc.results)-1)*time.Second + time.Second/2)
				stop()

				if got := int(calls.Load()); got != len(tc.results) {
					t.Errorf("checks run = %d, want %d", got, len(tc.results))
				}
				if got := rec.transitions(); !slices.Equal(got, tc.want) {
					t.Errorf("transitions = %q, want %q", got, tc.want)
				}
				if got := m.State(); got != tc.wantState {
					t.Errorf("State() = %s, want %s", got, tc.wantState)
				}
				for _, c := range rec.changes {
					if (c.to == healthcheck.Healthy) != (c.err == nil) {
						t.Errorf("change to %s carried err %v", c.to, c.err)
					}
				}
			})
		})
	}
}

func TestMonitorMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		results := []error{nil, errNo, errNoAnswer, context.DeadlineExceeded}
		var calls atomic.Int32
		check := checkFunc(func(context.Context) error {
			time.Sleep(10 * time.Millisecond)
			return results[calls.Add(1)-1]
		})
		rec := &recorder{}
		m, err := healthcheck.New(healthcheck.Config{Interval: time.Second}, healthcheck.Deps{Checker: check, Metrics: rec})
		if err != nil {
			t.Fatal(err)
		}
		stop := startMonitor(t, m)
		time.Sleep(3*time.Second + time.Second/2)
		stop()
		want := []string{"success", "failure", "failure", "timeout"}
		if !slices.Equal(rec.results, want) {
			t.Errorf("metric results = %q, want %q", rec.results, want)
		}
		for i, d := range rec.durs {
			if d != 10*time.Millisecond {
				t.Errorf("duration %d = %v, want 10ms", i, d)
			}
		}
	})
}

func TestMonitorSchedule(t *testing.T) {
	for _, tc := range []struct {
		name       string
		checkTakes time.Duration
		wantStarts []time.Duration
	}{
		{"quick checks keep the interval", 300 * time.Millisecond, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}},
		{"slow checks are not overlapped", 1500 * time.Millisecond, []time.Duration{0, 1500 * time.Millisecond, 3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				begin := time.Now()
				var (
					mu      sync.Mutex
					starts  []time.Duration
					running atomic.Int32
				)
				check := checkFunc(func(context.Context) error {
					if running.Add(1) != 1 {
						t.Error("two checks ran at once")
					}
					defer running.Add(-1)
					mu.Lock()
					starts = append(starts, time.Since(begin))
					mu.Unlock()
					time.Sleep(tc.checkTakes)
					return nil
				})
				m, err := healthcheck.New(healthcheck.Config{Interval: time.Second, Timeout: 10 * time.Second}, healthcheck.Deps{Checker: check})
				if err != nil {
					t.Fatal(err)
				}
				stop := startMonitor(t, m)
				time.Sleep(3*time.Second + 100*time.Millisecond)
				stop()
				if !slices.Equal(starts, tc.wantStarts) {
					t.Errorf("checks started at %v, want %v", starts, tc.wantStarts)
				}
			})
		})
	}
}

func TestMonitorTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check checkFunc
	}{
		{"check honours its context", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		{"late answer counts as no answer", func(ctx context.Context) error {
			time.Sleep(2 * time.Second)
			return errNo
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				m, err := healthcheck.New(healthcheck.Config{Interval: 3 * time.Second, Timeout: time.Second, Fall: 2},
					healthcheck.Deps{Checker: tc.check, OnChange: rec.onChange, Metrics: rec})
				if err != nil {
					t.Fatal(err)
				}
				stop := startMonitor(t, m)
				time.Sleep(5*time.Second + time.Second/2)
				stop()
				if got, want := rec.transitions(), []string{"initializing>not_responding"}; !slices.Equal(got, want) {
					t.Fatalf("transitions = %q, want %q", got, want)
				}
				if err := rec.changes[0].err; !errors.Is(err, healthcheck.ErrNotResponding) || !strings.Contains(err.Error(), "timed out after 1s") {
					t.Errorf("change err = %v, want a not-responding timeout", err)
				}
				if want := []string{"timeout", "timeout"}; !slices.Equal(rec.results, want) {
					t.Errorf("metric results = %q, want %q", rec.results, want)
				}
			})
		})
	}
}

func TestMonitorStopDuringCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		check := checkFunc(func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		rec := &recorder{}
		m, err := healthcheck.New(healthcheck.Config{Interval: time.Second, Timeout: time.Minute, Fall: 1},
			healthcheck.Deps{Checker: check, OnChange: rec.onChange, Metrics: rec})
		if err != nil {
			t.Fatal(err)
		}
		stop := startMonitor(t, m)
		<-started
		stop()
		if len(rec.changes) != 0 || len(rec.results) != 0 {
			t.Errorf("an interrupted check was recorded: changes %v, results %v", rec.changes, rec.results)
		}
	})
}

func TestMonitorRunTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := healthcheck.New(healthcheck.Config{Interval: time.Second}, healthcheck.Deps{Checker: checkFunc(func(context.Context) error { return nil })})
		if err != nil {
			t.Fatal(err)
		}
		stop := startMonitor(t, m)
		synctest.Wait()
		if err := m.Run(t.Context()); err == nil {
			t.Error("second Run() = nil, want an error")
		}
		stop()
	})
}

func TestNewValidates(t *testing.T) {
	ok := checkFunc(func(context.Context) error { return nil })
	for _, tc := range []struct {
		name  string
		check healthcheck.Checker
		cfg   healthcheck.Config
	}{
		{"nil checker", nil, healthcheck.Config{Interval: time.Second}},
		{"no interval", ok, healthcheck.Config{}},
		{"negative timeout", ok, healthcheck.Config{Interval: time.Second, Timeout: -1}},
		{"negative rise", ok, healthcheck.Config{Interval: time.Second, Rise: -1}},
		{"negative fall", ok, healthcheck.Config{Interval: time.Second, Fall: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := healthcheck.New(tc.cfg, healthcheck.Deps{Checker: tc.check}); err == nil {
				t.Errorf("New(%+v) = nil error, want one", tc.cfg)
			}
		})
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[healthcheck.State]string{
		healthcheck.Initializing:  "initializing",
		healthcheck.Healthy:       "healthy",
		healthcheck.Unhealthy:     "unhealthy",
		healthcheck.NotResponding: "not_responding",
	} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", s, got, want)
		}
	}
}
