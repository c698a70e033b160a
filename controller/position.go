package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/internal/proc"
)

// Data freshness (service.position). A runner goroutine reads the local
// service's replication position every interval and sends each result to
// the loop, which owns the value: the loop publishes it in the member
// record (through the status snapshot, so a record is written only when
// the value changed) and, while this node is the promoted leader, in the
// persistent LeaderPosition record, guarded by the term, in the
// background. A failed read makes the position unknown at once: a value
// that can no longer be confirmed is dropped rather than published stale,
// so a published position is never older than one interval plus the
// command's timeout (while the node lives; its member record goes with
// its session).

// PositionReader reads the local service's replication position once
// (service.position): the production one is ProcPosition, tests script
// their own.
type PositionReader interface {
	// ReadPosition returns the position, or an error (a *PositionError
	// names the reason) when there is none to trust.
	ReadPosition(ctx context.Context) (int64, error)
}

// Reasons of a PositionError (the failoverd_position_errors_total label).
const (
	PositionErrExit       = "exit"       // did not start, or exited non-zero
	PositionErrTimeout    = "timeout"    // killed at its timeout
	PositionErrOutput     = "output"     // printed something other than one non-negative integer
	PositionErrUnkillable = "unkillable" // still alive after SIGKILL
)

// PositionError is why a run of the position command gave no position.
type PositionError struct {
	Reason string // one of the PositionErr* labels
	Err    error
}

func (e *PositionError) Error() string { return e.Err.Error() }
func (e *PositionError) Unwrap() error { return e.Err }

// positionReason is err's metric label (a reader's own error that is not
// a *PositionError counts as "exit").
func positionReason(err error) string {
	if pe, ok := errors.AsType[*PositionError](err); ok {
		return pe.Reason
	}
	return PositionErrExit
}

// ParsePosition reads a position command's output: one non-negative
// decimal integer (at most 2^63-1), whitespace around it allowed, nothing
// else (no sign, no second line, no unit).
func ParsePosition(out string) (int64, error) {
	s := strings.TrimSpace(out)
	if s == "" {
		return 0, errors.New("no output, want one non-negative integer")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("output %q is not one non-negative decimal integer", snippet(s))
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("output %q is out of range (at most %d)", snippet(s), int64(1<<63-1))
	}
	return n, nil
}

// snippet shortens output for a message.
func snippet(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// ProcPosition runs the service.position command with internal/proc: its
// standard output is the position, its standard error is logged (debug).
type ProcPosition struct {
	Argv []string
	// Timeout bounds one run: the command then gets SIGTERM and, a kill
	// grace later, SIGKILL.
	Timeout         time.Duration
	Cluster, NodeID string
	Logger          *slog.Logger
}

// ReadPosition runs the command once. A command still alive after SIGKILL
// is waited for (within ctx) before ReadPosition returns, so that runs
// never pile up.
func (p ProcPosition) ReadPosition(ctx context.Context) (int64, error) {
	var mu sync.Mutex
	var out strings.Builder
	res, err := proc.Run(ctx, proc.Spec{
		Argv:        p.Argv,
		Env:         []string{"FAILOVERD_CLUSTER=" + p.Cluster, "FAILOVERD_NODE_ID=" + p.NodeID},
		Timeout:     p.Timeout,
		KillGrace:   KillGrace,
		OutputLimit: 4 << 10,
		OnLine: func(stream, line string) {
			if stream != "stdout" {
				if p.Logger != nil {
					p.Logger.Debug("position command output", "stream", stream, "line", line)
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			out.WriteString(line)
			out.WriteByte('\n')
		},
	})
	switch {
	case errors.Is(err, proc.ErrUnkillable):
		if res.Reaped != nil {
			select {
			case <-res.Reaped:
			case <-ctx.Done():
			}
		}
		return 0, &PositionError{Reason: PositionErrUnkillable, Err: fmt.Errorf("position command: %w", err)}
	case res.TimedOut:
		return 0, &PositionError{Reason: PositionErrTimeout, Err: fmt.Errorf("position command timed out after %s", p.Timeout)}
	case err != nil:
		return 0, &PositionError{Reason: PositionErrExit, Err: fmt.Errorf("position command: %w", err)}
	}
	mu.Lock()
	defer mu.Unlock()
	n, err := ParsePosition(out.String())
	if err != nil {
		return 0, &PositionError{Reason: PositionErrOutput, Err: fmt.Errorf("position command: %w", err)}
	}
	return n, nil
}

// defaultPositionInterval is Config.PositionInterval's default.
const defaultPositionInterval = time.Second

// positionWarnEvery bounds how often a repeated position failure is
// logged at warn level.
const positionWarnEvery = 30 * time.Second

// positionWriteTimeout bounds one LeaderPosition write.
const positionWriteTimeout = 10 * time.Second

// positionRead is one run's result (err: the position is unknown).
type positionRead struct {
	pos int64
	at  time.Time // when the run started
	err error
}

// positionWritten: a LeaderPosition write is over.
type positionWritten struct {
	rec cluster.LeaderPosition
	err error
}

func (positionRead) event()    {}
func (positionWritten) event() {}

// positionState is the loop's position: the value and what was written.
type positionState struct {
	// value is the latest position (nil: unknown, or no command). It is
	// replaced, never changed in place, and only when the value changes:
	// the status snapshot shares it, and an unchanged snapshot writes no
	// member record.
	value *int64
	at    time.Time // when the command first printed value

	failing  bool // the last run failed
	warnedAt time.Time
	warnMsg  string

	writing bool                    // a LeaderPosition write is in flight
	written *cluster.LeaderPosition // the last one this process wrote
	writeAt time.Time               // when the last write started
	failMsg string                  // the last write failure logged
}

// positionInterval is the position command's period.
func (c *Controller) positionInterval() time.Duration {
	if c.cfg.PositionInterval > 0 {
		return c.cfg.PositionInterval
	}
	return defaultPositionInterval
}

// readPositions runs the position command every interval (start to start;
// a run that takes longer delays the next) until ctx ends, and hands each
// result to the loop.
func (c *Controller) readPositions(ctx context.Context) {
	for ctx.Err() == nil {
		src := c.positions.Load() // a reload may replace it between runs
		start := time.Now()
		pos, err := src.reader.ReadPosition(ctx)
		if ctx.Err() != nil || !c.send(positionRead{pos: pos, at: start, err: err}) {
			return
		}
		sleepCtx(ctx, time.Until(start.Add(src.every())))
	}
}

// onPositionRead takes a run's result: a new value replaces the old one
// (and reaches the member record), a failure makes the position unknown.
func (c *Controller) onPositionRead(ev positionRead) {
	p := &c.l.pos
	if ev.err != nil {
		reason := positionReason(ev.err)
		c.metrics.PositionError(reason)
		c.warnPosition(ev.err, reason)
		p.failing = true
		p.value, p.at = nil, time.Time{}
		return
	}
	if p.failing {
		p.failing, p.warnMsg = false, ""
		c.log.Info("the position command works again", "position", ev.pos)
	}
	if p.value != nil && *p.value == ev.pos {
		return
	}
	v := ev.pos
	p.value, p.at = &v, ev.at
}

// warnPosition logs a failed run: at warn level when the failure is new
// or positionWarnEvery passed, else at debug level.
func (c *Controller) warnPosition(err error, reason string) {
	p := &c.l.pos
	msg := err.Error()
	if msg != p.warnMsg || time.Since(p.warnedAt) >= positionWarnEvery {
		p.warnMsg, p.warnedAt = msg, time.Now()
		c.log.Warn("no replication position: it is unknown until the command prints one again", "reason", reason, "err", err)
		return
	}
	c.log.Debug("no replication position", "reason", reason, "err", err)
}

// writeLeaderPosition starts the background write of the LeaderPosition
// record while this node is the promoted leader and its position changed
// since the last write of this term, at most once per interval and one at
// a time. It is never part of a takeover: it starts once promoted.
func (c *Controller) writeLeaderPosition(now time.Time) {
	l := &c.l
	p := &l.pos
	tm := l.term
	if tm == nil || tm.phase != phLeader || p.writing || p.value == nil || l.stopping {
		return
	}
	if w := p.written; w != nil && w.Epoch == tm.epoch && w.Position == *p.value {
		return
	}
	if now.Before(p.writeAt.Add(c.positionInterval())) || tm.gone() != nil {
		return
	}
	rec := cluster.LeaderPosition{NodeID: c.cfg.NodeID, Epoch: tm.epoch, Position: *p.value, At: p.at.UTC()}
	p.writing, p.writeAt = true, now
	go func() {
		ctx, cancel := context.WithTimeout(tm.ctx, positionWriteTimeout)
		defer cancel()
		c.send(positionWritten{rec: rec, err: tm.t.WriteLeaderPosition(ctx, rec)})
	}()
}

// onPositionWritten records a write's outcome; a failed one is tried
// again after an interval if this node still leads (a term that is over
// cannot write: the record is guarded by it).
func (c *Controller) onPositionWritten(ev positionWritten) {
	p := &c.l.pos
	p.writing = false
	if ev.err == nil {
		rec := ev.rec
		p.written, p.failMsg = &rec, ""
		return
	}
	if msg := ev.err.Error(); msg != p.failMsg {
		p.failMsg = msg
		c.log.Warn("cannot write the leader position", "epoch", ev.rec.Epoch, "position", ev.rec.Position, "err", ev.err)
	}
}

// considerPosition adds the next LeaderPosition write that waits for its
// interval to the loop's timer.
func (c *Controller) considerPosition(consider func(time.Time)) {
	if p := &c.l.pos; c.l.term != nil && p.value != nil && !p.writing {
		consider(p.writeAt.Add(c.positionInterval()))
	}
}
