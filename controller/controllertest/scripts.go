package controllertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/proc"
)

// Result scripts one hook run.
type Result struct {
	Err        error         // the hook fails with it (after Take)
	Take       time.Duration // how long it runs (ctx ending kills it)
	Unkillable bool          // it outlives SIGKILL until Hooks.Reap
	// KillTake is how long it takes to exit once its ctx ended (a hook
	// that ignores SIGTERM until the kill grace, say).
	KillTake time.Duration
}

// Call is one hook run as the controller asked for it.
type Call struct {
	Name string
	Env  controller.HookEnv
	At   time.Time
	End  time.Time // zero while it runs
	Err  error     // how it ended
}

// Hooks is a scripted controller.Hooks: each run takes the next Result
// queued for its name (none: success at once). It records every call and
// whether two ever overlapped.
type Hooks struct {
	mu       sync.Mutex
	script   map[string][]Result
	always   map[string]*Result
	calls    []Call
	running  int
	overlaps int
	reap     chan struct{}
}

// NewHooks returns hooks that succeed at once.
func NewHooks() *Hooks {
	return &Hooks{script: map[string][]Result{}, always: map[string]*Result{}}
}

// On queues r for the next run of name.
func (h *Hooks) On(name string, r ...Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.script[name] = append(h.script[name], r...)
}

// Always makes every run of name (after the queued ones) end as r; nil
// restores success.
func (h *Hooks) Always(name string, r *Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.always[name] = r
}

// Reap lets every unkillable hook go.
func (h *Hooks) Reap() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reap != nil {
		close(h.reap)
		h.reap = nil
	}
}

// Calls lists the runs so far.
func (h *Hooks) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Call(nil), h.calls...)
}

// Reasons lists "name:reason" of every run, in order.
func (h *Hooks) Reasons() []string {
	var out []string
	for _, c := range h.Calls() {
		out = append(out, c.Name+":"+c.Env.Reason)
	}
	return out
}

// Overlaps counts runs that started while another ran.
func (h *Hooks) Overlaps() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.overlaps
}

// ErrKilled is how a hook ends when its context ended first.
var ErrKilled = errors.New("controllertest: hook killed")

// Run implements controller.Hooks.
func (h *Hooks) Run(ctx context.Context, name string, env controller.HookEnv) (<-chan struct{}, error) {
	h.mu.Lock()
	r := Result{}
	if q := h.script[name]; len(q) > 0 {
		r, h.script[name] = q[0], q[1:]
	} else if a := h.always[name]; a != nil {
		r = *a
	}
	if h.running > 0 {
		h.overlaps++
	}
	h.running++
	i := len(h.calls)
	h.calls = append(h.calls, Call{Name: name, Env: env, At: time.Now()})
	var reaped chan struct{}
	if r.Unkillable {
		if h.reap == nil {
			h.reap = make(chan struct{})
		}
		reaped = h.reap
	}
	h.mu.Unlock()

	err := r.Err
	if r.Take > 0 {
		t := time.NewTimer(r.Take)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			err = ErrKilled
			if r.KillTake > 0 {
				time.Sleep(r.KillTake)
			}
		}
	}
	var out <-chan struct{}
	if r.Unkillable {
		err = fmt.Errorf("%s hook: %w", name, proc.ErrUnkillable)
		out = reaped
	}
	h.mu.Lock()
	h.running--
	h.calls[i].Err, h.calls[i].End = err, time.Now()
	h.mu.Unlock()
	return out, err
}

// Fencer is a scripted controller.Fencer: it succeeds unless told to fail.
type Fencer struct {
	mu      sync.Mutex
	fail    int
	take    time.Duration
	targets []fencer.Target
	times   []time.Time
}

// Fail makes the next n fences fail.
func (f *Fencer) Fail(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = n
}

// Take makes every fence take d (its context ending first fails it).
func (f *Fencer) Take(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.take = d
}

// Targets lists the fenced targets (successful or not).
func (f *Fencer) Targets() []fencer.Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fencer.Target(nil), f.targets...)
}

// Times lists when each fence began.
func (f *Fencer) Times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.times...)
}

// ErrFenceFailed is a scripted fence failure.
var ErrFenceFailed = errors.New("controllertest: fence failed")

// Fence implements controller.Fencer.
func (f *Fencer) Fence(ctx context.Context, t fencer.Target) (string, error) {
	f.mu.Lock()
	f.targets = append(f.targets, t)
	f.times = append(f.times, time.Now())
	fail := f.fail > 0
	if fail {
		f.fail--
	}
	take := f.take
	f.mu.Unlock()
	if take > 0 {
		tm := time.NewTimer(take)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if fail {
		return "", ErrFenceFailed
	}
	return "test", nil
}

var _ controller.Metrics = (*Metrics)(nil)

// Metrics records every call as a string ("lost:unhealthy", "promotion:success", ...).
type Metrics struct {
	mu     sync.Mutex
	events []string
}

func (m *Metrics) add(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, s)
}

// Events lists the calls so far.
func (m *Metrics) Events() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.events...)
}

// Count counts calls equal to s.
func (m *Metrics) Count(s string) int {
	n := 0
	for _, e := range m.Events() {
		if e == s {
			n++
		}
	}
	return n
}

func (m *Metrics) StateChanged(from, to controller.State) { m.add("state:" + string(to)) }
func (m *Metrics) Leader(isLeader bool, epoch int64)      { m.add(fmt.Sprintf("leader:%v", isLeader)) }
func (m *Metrics) ElectionWon()                           { m.add("won") }
func (m *Metrics) LeadershipLost(reason string)           { m.add("lost:" + reason) }
func (m *Metrics) Promotion(result string)                { m.add("promotion:" + result) }
func (m *Metrics) Demotion(result string)                 { m.add("demotion:" + result) }
func (m *Metrics) FailoverDuration(d time.Duration)       { m.add("failover_duration") }
func (m *Metrics) BreadcrumbUnreadable()                  { m.add("breadcrumb_unreadable") }
func (m *Metrics) FencingFailed()                         { m.add("fencing_failed") }
func (m *Metrics) HookUnkillable(hook string)             { m.add("unkillable:" + hook) }
func (m *Metrics) FollowRun(result string)                { m.add("follow:" + result) }
func (m *Metrics) Following(epoch int64)                  { m.add(fmt.Sprintf("following:%d", epoch)) }
func (m *Metrics) PrePromoteVetoed()                      { m.add("pre_promote_veto") }
func (m *Metrics) HistoryAppendFailed()                   { m.add("history_append_failed") }
func (m *Metrics) CooldownHold()                          { m.add("cooldown_hold") }
func (m *Metrics) PositionError(reason string)            { m.add("position_error:" + reason) }
func (m *Metrics) PromotionDeclined(reason string)        { m.add("declined:" + reason) }
func (m *Metrics) Preempted()                             { m.add("preempted") }
