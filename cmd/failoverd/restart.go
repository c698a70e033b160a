package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// removeTimeout bounds the removal of the previous process's election
// entry: past it the node joins the election anyway, and the entry goes
// with its session or lease.
const removeTimeout = 2 * time.Second

// entryRemover is the backend's removal of an election entry (the
// cluster.Store's RemoveEntry).
type entryRemover interface {
	RemoveEntry(ctx context.Context, e cluster.Entry) error
}

// restarter is election.end_own_term_on_restart: it records the election
// entry of every term won in the node state file before the term reaches
// the controller, and, at the first candidacy of this process, removes
// the entry an earlier process of this node recorded. The controller
// starts a candidacy only after the startup demote succeeded, so the
// service is not primary then; the lock beside the state file proves
// that earlier process has exited, when it ran in this kernel boot. See
// docs/safety.md, "A restarted daemon ends its own old term".
type restarter struct {
	home     *homeFile
	rm       entryRemover
	instance string
	log      *slog.Logger

	prev   cluster.Entry // the earlier process's entry (zero: none, or not ours to remove)
	prevBy string
	once   sync.Once
}

// newRestarter reads the entry and the instance an earlier process
// recorded in the node state file, and records this one. home must hold
// the lock beside the file (openLockedHome): without it another process
// of this node may be alive, and newRestarter fails. What was recorded in
// another kernel boot (boot: this one's) is not trusted: a reboot, or a
// copy of the state directory on another host, whose lock proves nothing
// about the process named. prevInstance is the earlier process's instance
// ("": none, or not proven gone).
func newRestarter(home *homeFile, rm entryRemover, instance, boot string, log *slog.Logger) (r *restarter, prevInstance string, err error) {
	r = &restarter{home: home, rm: rm, instance: instance, log: log.With("component", "restart")}
	if home.lockFile == nil {
		return nil, "", fmt.Errorf("the lock beside the node state file %s is not held", home.path)
	}
	e, prev, ok, trusted, err := home.Started(instance, boot)
	if err != nil {
		r.log.Warn("could not record this process in the node state file", "err", err)
	}
	if !trusted {
		if boot == "" {
			r.log.Warn("not removing any previous election entry: the kernel boot id is unreadable", "file", bootIDPath)
		} else {
			r.log.Info("not removing any previous election entry: the node state file was not written in this kernel boot "+
				"(a reboot, or a copy of the state directory)", "boot_id", boot)
		}
		return r, "", nil
	}
	if ok {
		r.prev, r.prevBy = e, prev
	}
	return r, prev, nil
}

// removePrevious removes the earlier process's entry, once, bounded by
// removeTimeout; every failure is logged and falls back to waiting out
// the old session or lease.
func (r *restarter) removePrevious(ctx context.Context) {
	if r.prev.IsZero() {
		return
	}
	e := r.prev
	ctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	start := time.Now()
	err := r.rm.RemoveEntry(ctx, e)
	switch {
	case err == nil:
		r.log.Info("removed the previous process's election entry after the startup demote", "entry", e.String(),
			"previous_instance", r.prevBy, "took", time.Since(start).Round(time.Millisecond).String())
	case errors.Is(err, cluster.ErrEntryChanged):
		r.log.Info("the previous process's election entry is gone or another one; nothing removed", "entry", e.String(), "detail", err.Error())
	default:
		r.log.Warn("removing the previous process's election entry failed; the successor waits out its session or lease",
			"entry", e.String(), "err", err)
		return
	}
	if err := r.home.ForgetEntry(e); err != nil {
		r.log.Warn("could not update the node state file", "err", err)
	}
}

// won wraps the controller's won callback: it records the term's entry
// first.
func (r *restarter) won(won func(context.Context, cluster.Term)) func(context.Context, cluster.Term) {
	return func(ctx context.Context, t cluster.Term) {
		if e, ok := cluster.EntryOf(t); ok {
			if err := r.home.Entered(e); err != nil {
				r.log.Warn("could not record the term's election entry; a restart will wait out its session", "epoch", t.Epoch(), "err", err)
			}
		}
		won(ctx, t)
	}
}

// restartElector is an Elector with a restarter.
type restartElector struct {
	cluster.Elector
	r *restarter
}

func (e *restartElector) Campaign(ctx context.Context, won func(context.Context, cluster.Term)) error {
	if won == nil {
		return fmt.Errorf("nil won")
	}
	e.r.once.Do(func() { e.r.removePrevious(ctx) })
	return e.Elector.Campaign(ctx, e.r.won(won))
}

// restartWarmer keeps the inner elector's Warm.
type restartWarmer struct {
	*restartElector
	w cluster.Warmer
}

func (e *restartWarmer) Warm(on bool) { e.w.Warm(on) }

// withRestarter wraps el with r, keeping its Warmer.
func withRestarter(el cluster.Elector, r *restarter) cluster.Elector {
	re := &restartElector{Elector: el, r: r}
	if w, ok := el.(cluster.Warmer); ok {
		return &restartWarmer{restartElector: re, w: w}
	}
	return re
}
