package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Defaults for zero Config fields.
const (
	DefaultRise = 2
	DefaultFall = 3
)

// Config tunes a Monitor.
type Config struct {
	// Interval is the time from the start of one check to the start of the
	// next; a check that takes longer delays the next one. Required.
	Interval time.Duration
	// Timeout bounds one check. Default Interval.
	Timeout time.Duration
	// Rise is how many consecutive successes make the service Healthy.
	// 0: DefaultRise.
	Rise int
	// Fall is how many consecutive failures make it Unhealthy or
	// NotResponding. 0: DefaultFall.
	Fall int
}

// Metrics receives the outcome of every check; the daemon backs it with
// Prometheus collectors. result is "success", "failure" or "timeout".
type Metrics interface {
	CheckDone(result string, d time.Duration)
}

// Deps are a Monitor's collaborators.
type Deps struct {
	// Checker performs one check. Required.
	Checker Checker
	// Logger should already name the check (logger.With("check", name));
	// nil discards.
	Logger *slog.Logger
	// Metrics, when set, receives every check's outcome.
	Metrics Metrics
	// OnChange, when set, is called on every change of state, with the
	// error of the check that caused it (nil when becoming Healthy). It is
	// called from Run's goroutine, never concurrently; Run waits for it to
	// return.
	OnChange func(from, to State, err error)
}

// Monitor runs a Checker periodically and keeps a debounced State.
type Monitor struct {
	checker  Checker
	cfg      Config
	logger   *slog.Logger
	onChange func(from, to State, err error)
	metrics  Metrics

	state   atomic.Int32
	running atomic.Bool
	// next is the check and settings Reconfigure set, taken by Run
	// before its next check; wake tells a waiting Run.
	next atomic.Pointer[reconfig]
	wake chan struct{}

	// Owned by Run's goroutine.
	successes, failures int
}

// New returns a Monitor in state Initializing. Zero Config fields other
// than Interval take their defaults.
func New(cfg Config, deps Deps) (*Monitor, error) {
	if deps.Checker == nil {
		return nil, errors.New("healthcheck: nil checker")
	}
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Monitor{checker: deps.Checker, cfg: cfg, logger: logger, onChange: deps.OnChange, metrics: deps.Metrics,
		wake: make(chan struct{}, 1)}, nil
}

// reconfig is a Reconfigure waiting for Run.
type reconfig struct {
	cfg     Config
	checker Checker
}

// Reconfigure replaces the check and its settings from the next check on;
// a check in progress finishes with the old ones. The state stays; the
// counts of consecutive results start again, for the new check.
func (m *Monitor) Reconfigure(cfg Config, checker Checker) error {
	if checker == nil {
		return errors.New("healthcheck: nil checker")
	}
	cfg, err := withDefaults(cfg)
	if err != nil {
		return err
	}
	m.next.Store(&reconfig{cfg: cfg, checker: checker})
	select {
	case m.wake <- struct{}{}:
	default:
	}
	return nil
}

// takeNext applies a pending Reconfigure; Run's goroutine only.
func (m *Monitor) takeNext() {
	r := m.next.Swap(nil)
	if r == nil {
		return
	}
	m.cfg, m.checker = r.cfg, r.checker
	m.successes, m.failures = 0, 0
	m.logger.Info("health check reconfigured", "interval", m.cfg.Interval, "timeout", m.cfg.Timeout, "rise", m.cfg.Rise, "fall", m.cfg.Fall)
}

// withDefaults checks cfg and fills its zero fields.
func withDefaults(cfg Config) (Config, error) {
	if cfg.Interval <= 0 {
		return cfg, fmt.Errorf("healthcheck: interval must be > 0, got %s", cfg.Interval)
	}
	if cfg.Timeout < 0 || cfg.Rise < 0 || cfg.Fall < 0 {
		return cfg, fmt.Errorf("healthcheck: timeout, rise and fall must not be negative, got %s, %d, %d", cfg.Timeout, cfg.Rise, cfg.Fall)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = cfg.Interval
	}
	if cfg.Rise == 0 {
		cfg.Rise = DefaultRise
	}
	if cfg.Fall == 0 {
		cfg.Fall = DefaultFall
	}
	return cfg, nil
}

// State returns the current state. It is safe for concurrent use.
func (m *Monitor) State() State {
	return State(m.state.Load())
}

// Run checks once immediately and then every Interval until ctx is done, and
// returns nil then. A check in progress is canceled and waited for. Run must
// not be called again while it is running.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("healthcheck: monitor already running")
	}
	defer m.running.Store(false)
	m.logger.Debug("health monitor started", "interval", m.cfg.Interval, "timeout", m.cfg.Timeout)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var start time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.wake:
			// A new interval counts from the last check's start.
			m.takeNext()
			timer.Reset(max(0, m.cfg.Interval-time.Since(start)))
			continue
		case <-timer.C:
		}
		if ctx.Err() != nil { // select picks at random when both are ready
			return nil
		}
		m.takeNext()
		start = time.Now()
		m.checkOnce(ctx)
		// The next check starts Interval after this one started, or at
		// once if this one overran; checks never overlap.
		timer.Reset(max(0, m.cfg.Interval-time.Since(start)))
	}
}

func (m *Monitor) checkOnce(ctx context.Context) {
	checkCtx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	start := time.Now()
	err := m.checker.Check(checkCtx)
	d := time.Since(start)
	if ctx.Err() != nil {
		return // shutting down: an interrupted check is no verdict
	}
	timedOut := checkCtx.Err() != nil
	if err != nil && timedOut && !errors.Is(err, ErrNotResponding) {
		// Whatever the checker made of it, no answer in time is no answer.
		err = &NotRespondingError{Err: fmt.Errorf("check timed out after %s: %w", m.cfg.Timeout, err)}
	}
	m.record(err, timedOut, d)
}

func (m *Monitor) record(err error, timedOut bool, d time.Duration) {
	if m.metrics != nil {
		result := "success"
		switch {
		case err == nil:
		case timedOut || errors.Is(err, context.DeadlineExceeded):
			result = "timeout"
		default:
			result = "failure"
		}
		m.metrics.CheckDone(result, d)
	}

	if err == nil {
		m.failures = 0
		m.successes++
		if m.successes >= m.cfg.Rise {
			m.setState(Healthy, nil)
		}
		return
	}
	m.successes = 0
	m.failures++
	kind := Unhealthy
	if errors.Is(err, ErrNotResponding) {
		kind = NotResponding
	}
	// The first failure after a success is worth an operator's attention;
	// repeats while failing would only flood the log.
	level := slog.LevelDebug
	if m.failures == 1 {
		level = slog.LevelWarn
	}
	m.logger.Log(context.Background(), level, "health check failed",
		"kind", kind.String(),
		"consecutive_failures", m.failures,
		"duration_seconds", d.Seconds(),
		"err", err)
	if m.failures >= m.cfg.Fall {
		m.setState(kind, err)
	}
}

func (m *Monitor) setState(to State, err error) {
	from := m.State()
	if from == to {
		return
	}
	m.state.Store(int32(to))
	if to == Healthy {
		m.logger.Info("health state changed", "from", from.String(), "to", to.String())
	} else {
		m.logger.Warn("health state changed", "from", from.String(), "to", to.String(), "err", err)
	}
	if m.onChange != nil {
		m.onChange(from, to, err)
	}
}
