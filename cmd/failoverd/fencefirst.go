package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
)

// lateProver is the elector's ProveOut before the controller exists: the
// elector is built first, the controller (which proves suspects out) after
// it. Until set, it refuses.
type lateProver struct {
	ctrl atomic.Pointer[controller.Controller]
}

func (l *lateProver) set(c *controller.Controller) {
	if l != nil {
		l.ctrl.Store(c)
	}
}

func (l *lateProver) ProveOut(ctx context.Context, s cluster.Suspect) error {
	c := l.ctrl.Load()
	if c == nil {
		return errors.New("the controller is not running yet")
	}
	return c.ProveOut(ctx, s)
}

// Ended is the elector's report that it ended a proved-out term itself.
func (l *lateProver) Ended(b cluster.Beat) {
	if c := l.ctrl.Load(); c != nil {
		c.ProvedEnded(b)
	}
}

// fenceFirstOf is the elector's part of election.fence_first (off: the
// zero FenceFirst).
func fenceFirstOf(cfg *config.Config, p *lateProver) cluster.FenceFirst {
	if !cfg.Election.FenceFirst {
		return cluster.FenceFirst{}
	}
	return cluster.FenceFirst{SuspectAfter: cfg.Election.SuspectAfter.Std(), ProveOut: p.ProveOut, Ended: p.Ended}
}

// proverOf is the chain of f's proving methods (nil: none, or no chain).
func proverOf(f controller.Fencer) controller.Fencer {
	ch, ok := f.(*fencer.Chain)
	if !ok || ch == nil {
		return nil
	}
	if p, ok := ch.Proving(); ok {
		return p
	}
	return nil
}

// statusProbe asks a suspected leader's admin API for its status (GET
// /v1/status, no token): it answers as alive only with 200 and a status
// of the suspected node leading (leader, promoting or demoting) at the
// breadcrumb's epoch or a later one, which says it reaches the
// coordination service. A daemon that restarted on that host answers as
// a standby: its old term is not alive. A later epoch is a live leader
// whose new breadcrumb the successor has not read yet.
type statusProbe struct {
	client  *http.Client
	timeout time.Duration
}

// newStatusProbe returns the probe of cfg, on the rpc fencer's transport
// (direct connections, https verified against the first rpc method's
// ca_file when one is set, else the system roots); each probe is bounded by suspect_after, at most config.SuspectProbeMax.
func newStatusProbe(cfg *config.Config) (*statusProbe, error) {
	var caFile string
	for _, m := range cfg.Fencing.Methods {
		if m.RPC != nil && m.RPC.CAFile != "" {
			caFile = m.RPC.CAFile
			break
		}
	}
	tr, err := fencer.NewTransport(caFile)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &statusProbe{client: client, timeout: min(cfg.Election.SuspectAfter.Std(), config.SuspectProbeMax)}, nil
}

// Probe implements controller.Prober.
func (p *statusProbe) Probe(ctx context.Context, t fencer.Target) error {
	if t.AdminURL == "" {
		return errors.New("the breadcrumb names no admin URL")
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(t.AdminURL, "/")+admin.StatusPath, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	var st struct {
		NodeID    string           `json:"node_id"`
		State     controller.State `json:"state"`
		Epoch     int64            `json:"epoch"`
		Connected bool             `json:"connected"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return fmt.Errorf("reading its status: %w", err)
	}
	switch {
	case st.NodeID != t.NodeID:
		return fmt.Errorf("%s answers as node %q", t.AdminURL, st.NodeID)
	case st.Epoch < t.Epoch:
		return fmt.Errorf("it answers at epoch %d, before the suspected term's %d", st.Epoch, t.Epoch)
	case st.State != controller.StateLeader && st.State != controller.StatePromoting && st.State != controller.StateDemoting:
		return fmt.Errorf("it answers as %s, not leading", st.State)
	case !st.Connected:
		return errors.New("it does not reach the coordination service")
	}
	return nil
}
