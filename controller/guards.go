package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/internal/lease"
)

// primaryTracker remembers whether the local service may be acting as
// primary, across leaderships. Hooks never overlap, so the last hook event
// decides: a promote that starts (whatever it then does) makes the service
// possibly primary; only a demote that succeeded makes it surely not. A
// failed or stuck demote changes nothing. It starts true: whatever the
// service did before this process started is unknown until the startup
// demote succeeded. demotes counts successful demotes, so that a demote
// request can tell whether one succeeded since it arrived.
type primaryTracker struct {
	mayBePrimary bool
	demotes      uint64
}

func (p *primaryTracker) promoteStarted() { p.mayBePrimary = true }

func (p *primaryTracker) demoted() {
	p.mayBePrimary = false
	p.demotes++
}

// demotedSince reports whether the service is known not to be primary by a
// demote that succeeded after the count was seen (and after every promote).
func (p *primaryTracker) demotedSince(seen uint64) bool {
	return !p.mayBePrimary && p.demotes > seen
}

// ErrHookStuck is returned instead of running a hook while an earlier hook
// is still alive after SIGKILL.
var ErrHookStuck = errors.New("an earlier hook is still running after SIGKILL")

// stuckHook is a hook that proc.Run gave up on: it did not exit after
// SIGKILL (uninterruptible sleep). Reaped closes when it finally goes.
type stuckHook struct {
	name   string
	since  time.Time
	reaped <-chan struct{}
	msg    string // what it put in lastErr (guarded by c.mu)
}

// stuckErr returns ErrHookStuck (wrapped) while a stuck hook is alive. Once
// it was reaped, hooks run again, but c.stuck stays (keeping this node out
// of the election) until afterReap cleared it. Call it with hookMu held.
func (c *Controller) stuckErr(next string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.stuck
	if h == nil {
		return nil
	}
	select {
	case <-h.reaped:
		return nil
	default:
	}
	return fmt.Errorf("%s hook not started: %w (the %s hook, stuck for %s)",
		next, ErrHookStuck, h.name, time.Since(h.since).Round(time.Second))
}

// hookUnkillable records a hook that did not exit after SIGKILL and says so
// loudly. Until it is reaped, no hook runs and this node stays out of the
// election: a leadership in progress ends (the callback returns, the
// elector deletes our znode), so a successor is elected and fences us, and
// the service counts as possibly primary (a demote cannot succeed).
func (c *Controller) hookUnkillable(name string, reaped <-chan struct{}, err error) {
	h := &stuckHook{name: name, since: time.Now(), reaped: reaped}
	c.mu.Lock()
	c.stuck = h
	h.msg = fmt.Sprintf("%s hook did not exit after SIGKILL; out of the election until it exits: %v", name, err)
	c.lastErr = h.msg
	c.mu.Unlock()
	c.log.Error("HOOK DID NOT EXIT AFTER SIGKILL: giving up leadership and staying out of the election until it exits; the successor fences this node",
		"hook", name, "err", err)
	if m, ok := c.metrics.(interface{ HookUnkillable(hook string) }); ok {
		m.HookUnkillable(name)
	}
	c.poke(c.wake)
	c.poke(c.memberChanged)
	go c.afterReap(h)
}

// afterReap waits for the stuck hook h to be reaped, then keeps this node
// out of the election until the service is known not to be primary: the
// stuck hook may have been a promote, or a demote that never finished, so
// the service may still act as primary while a successor leads. The
// demote is retried (with the takeover backoff) until it succeeds. If it
// gets stuck in turn, that hook's own afterReap takes over.
func (c *Controller) afterReap(h *stuckHook) {
	select {
	case <-h.reaped:
	case <-c.stopped:
		return
	}
	c.log.Warn("the stuck hook finally exited", "hook", h.name, "stuck_for", time.Since(h.since).Round(time.Millisecond).String())
	for failures := 0; ; failures++ {
		c.mu.Lock()
		may, epoch := c.primary.mayBePrimary, c.epoch
		c.mu.Unlock()
		if !may {
			break
		}
		c.log.Warn("the service may still be primary: demoting it before joining the election again", "epoch", epoch)
		err := c.runHook(context.Background(), "demote", c.cfg.Demote, reasonStuckHook, epoch, nil)
		if err == nil {
			break
		}
		c.mu.Lock()
		replaced := c.stuck != h
		if !replaced {
			h.msg = "after a stuck hook exited, the demote failed; out of the election until it succeeds: " + err.Error()
			c.lastErr = h.msg
		}
		c.mu.Unlock()
		if replaced {
			return
		}
		d := c.retryDelay(failures)
		select {
		case <-c.stopped:
			return
		case <-time.After(d):
		}
	}
	c.mu.Lock()
	if c.stuck == h {
		c.stuck = nil
		if c.lastErr == h.msg {
			c.lastErr = ""
		}
	}
	c.mu.Unlock()
	c.log.Warn("the service is demoted; this node may join the election again", "hook", h.name)
	c.poke(c.wake)
	c.poke(c.memberChanged)
}

// DemoteBudget is how long, after a leadership's lease ended, this
// controller may need to stop the service: kill a promote that may be
// running, then demote (timeout, then kill grace). It is lease.DemoteBudget
// of the configured hooks, the one function the elector and config
// validation use too; the daemon hands it to the elector
// (election.Config.DemoteBudget), which keeps that much between the lease
// and the session timeout.
func DemoteBudget(cfg Config) time.Duration {
	return lease.DemoteBudget(killGrace(cfg.Promote), cfg.Demote.Timeout, killGrace(cfg.Demote))
}

// killGrace is a hook's kill grace: lease.KillGrace unless set.
func killGrace(h Hook) time.Duration {
	if h.KillGrace > 0 {
		return h.KillGrace
	}
	return lease.KillGrace
}

// checkDemoteBudget refuses a leadership whose grace (the time after its
// lease during which no successor can be elected, as the elector computed
// it from the session timeout ZooKeeper granted) cannot hold this
// controller's demote budget. The elector refuses such a leadership
// before it campaigns when it was given the budget; this catches an
// elector configured without it.
func checkDemoteBudget(cfg Config, l election.Leadership) error {
	need := DemoteBudget(cfg)
	if need <= l.Grace {
		return nil
	}
	return fmt.Errorf("the demote budget %s (promote kill grace %s + service.demote.timeout %s + kill grace %s) does not fit in the %s left after the lease "+
		"(session timeout ZooKeeper granted %s - lease %s - margin %s); shorten the demote timeout or the lease, or raise the session timeout",
		need, killGrace(cfg.Promote), cfg.Demote.Timeout, killGrace(cfg.Demote), l.Grace, l.SessionTimeout, l.Lease, l.SessionTimeout-l.Lease-l.Grace)
}
