package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// Reload is a new configuration for a running controller (Controller.Reload).
//
// The loop takes it as one event: its state stays its own. Goroutines
// other than the loop never read what a reload replaces: a hook run, a
// takeover (its fence included) and a position read keep the settings they
// started with, so that nothing in progress changes halfway.
type Reload struct {
	// Config is the new configuration. Only the reloadable fields are
	// taken: Priority, MaxLag, PreemptAfter, FailoverCooldown, Promote,
	// Demote, GracefulDemoteTimeout, PrePromote, Follow, PositionInterval,
	// ShutdownTimeout, ConfigHash and ConfigLoadedAt. The others are kept.
	Config Config
	// Hooks runs the new hook commands.
	Hooks Hooks
	// Fencer is the new fencing chain (nil: none, when that was allowed).
	Fencer Fencer
	// Prover is the new chain of the methods that prove (nil: none).
	Prover Fencer
	// Position reads the position with the new command; nil exactly when
	// there was none at start.
	Position PositionReader
}

// reloadReq is Controller.Reload.
type reloadReq struct {
	r     Reload
	reply chan reloadReply // cap 1
}

// reloadReply is the loop's answer to a reloadReq: the refusal, or the
// notes of an applied reload.
type reloadReply struct {
	notes []string
	err   error
}

func (reloadReq) event() {}

// positionSource is the position reader and its period, as readPositions
// takes them before each run.
type positionSource struct {
	reader   PositionReader
	interval time.Duration
}

func (p *positionSource) every() time.Duration {
	if p.interval > 0 {
		return p.interval
	}
	return defaultPositionInterval
}

// takeoverSettings are the reloadable settings a term's takeover uses,
// taken when it is won.
type takeoverSettings struct {
	priority   int
	maxLag     *int64
	prePromote bool
	handover   time.Duration // the timeout of a handover request at the win
	fence      Fencer
}

func (c *Controller) takeoverSettings(t cluster.Term) takeoverSettings {
	return takeoverSettings{priority: c.priority, maxLag: c.cfg.MaxLag, prePromote: c.cfg.PrePromote != nil,
		handover: c.handoverTimeout(t), fence: c.fence}
}

// Reload applies r, or refuses all of it, and returns once the loop did
// (ctx bounds only the wait for the loop to take it).
// It refuses a demote budget above the one at start (the elector's lease
// was sized for it), a negative priority, and adding or removing the
// follow hook or the position reader. A change that ends a leadership
// (priority 0 on the leader) says so in the log.
func (c *Controller) Reload(ctx context.Context, r Reload) error {
	_, err := c.ReloadNotes(ctx, r)
	return err
}

// ReloadNotes is Reload that also returns what an applied reload does
// beyond taking the new settings, for the operator (priority 0 on the
// leader: it hands its leadership over), as the log says it.
func (c *Controller) ReloadNotes(ctx context.Context, r Reload) ([]string, error) {
	reply := make(chan reloadReply, 1)
	select {
	case c.events <- reloadReq{r: r, reply: reply}:
	case <-c.loopDone:
		return nil, errors.New("controller: stopped")
	case <-ctx.Done():
		return nil, fmt.Errorf("controller: reload not taken, nothing applied: %w", ctx.Err())
	}
	// Taken: the loop applies it or refuses it now, whatever ctx does, so
	// the answer must say which.
	select {
	case rr := <-reply:
		return rr.notes, rr.err
	case <-c.loopDone:
		select {
		case rr := <-reply:
			return rr.notes, rr.err
		default:
			return nil, errors.New("controller: stopped")
		}
	}
}

// onReload applies a reload in the loop.
func (c *Controller) onReload(ev reloadReq) {
	n := ev.r.Config
	priority := DefaultPriority
	if n.Priority != nil {
		priority = *n.Priority
	}
	switch {
	case priority < 0:
		ev.reply <- reloadReply{err: fmt.Errorf("controller: priority must be >= 0, got %d", priority)}
		return
	case DemoteBudget(n) > c.budget:
		ev.reply <- reloadReply{err: fmt.Errorf("controller: the demote budget %s exceeds %s, the one at start that the lease was sized for", DemoteBudget(n), c.budget)}
		return
	case (n.Follow == nil) != (c.cfg.Follow == nil):
		ev.reply <- reloadReply{err: errors.New("controller: the follow hook cannot be added or removed at run time")}
		return
	case (ev.r.Position == nil) != (c.position == nil):
		ev.reply <- reloadReply{err: errors.New("controller: the position command cannot be added or removed at run time")}
		return
	}
	old := c.cfg
	cfg := &c.cfg // field by field: goroutines still read the fields a reload keeps
	cfg.Priority, cfg.MaxLag, cfg.PreemptAfter, cfg.FailoverCooldown = &priority, n.MaxLag, n.PreemptAfter, n.FailoverCooldown
	cfg.Promote, cfg.Demote, cfg.GracefulDemoteTimeout = n.Promote, n.Demote, n.GracefulDemoteTimeout
	cfg.PrePromote, cfg.Follow, cfg.PositionInterval = n.PrePromote, n.Follow, n.PositionInterval
	// Unset, the default follows the new graceful demote, as New derives
	// it: one computed at start from a shorter graceful timeout would cut
	// the raised one's demote short at the next stop.
	cfg.ShutdownTimeout = n.ShutdownTimeout
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = defaultShutdown(n)
	}
	cfg.ConfigHash, cfg.ConfigLoadedAt = n.ConfigHash, n.ConfigLoadedAt
	c.hooks, c.fence, c.prover, c.position = ev.r.Hooks, ev.r.Fencer, ev.r.Prover, ev.r.Position
	c.readsLag.Store(n.MaxLag != nil)
	if c.position != nil {
		c.positions.Store(&positionSource{reader: c.position, interval: n.PositionInterval})
	}

	var notes []string
	if c.priority != priority {
		was := c.priority
		c.priority = priority
		switch {
		case priority == 0 && c.keepsWhilePaused():
			const msg = "node.priority is now 0, but the cluster is paused: this node keeps leading until it is resumed, then hands its leadership over gracefully"
			c.log.Warn(msg, "was", was, "epoch", c.l.epoch)
			notes = append(notes, msg)
		case priority == 0 && c.l.term != nil:
			const msg = "node.priority is now 0: this node may not lead, so it hands its leadership over gracefully (demote, then the breadcrumb is deleted)"
			c.log.Warn(msg, "was", was, "epoch", c.l.epoch)
			notes = append(notes, msg)
		case priority == 0:
			c.log.Info("node.priority is now 0: this node leaves the election (it checks health, follows the leader and publishes its status)", "was", was)
		default:
			c.log.Info("node.priority changed", "from", was, "to", priority)
		}
	}
	if tm := c.l.term; tm != nil && c.leading() && !tm.membersWatched && n.PreemptAfter > 0 {
		tm.membersWatched = true // the promotion starts it only when preemption is on
		go c.watchMembers(tm.ctx, tm.epoch)
	}
	if old.MaxLag == nil && n.MaxLag != nil && c.l.term != nil && !c.leading() {
		c.log.Info("election.max_lag applies from the next election won, not to the takeover in progress")
	}
	ev.reply <- reloadReply{notes: notes}
}
