package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/fencer"
)

// Prober asks a suspected leader whether it still leads (fencing first).
// Probe returns nil only when the target answered that it is alive and
// connected to the coordination service: then it is not fenced.
type Prober interface {
	Probe(ctx context.Context, t fencer.Target) error
}

// ErrLeaderAnswers is ProveOut's refusal when the suspect answered its
// probe.
var ErrLeaderAnswers = errors.New("the suspected leader answers its probe")

// proveReq asks the loop for the settings ProveOut uses.
type proveReq struct{ reply chan proveSettings }

type proveSettings struct {
	prover Fencer
	probe  Prober
}

// provedOut is the term a proving fence stopped before this node's term:
// the breadcrumb that named it, the heartbeat it was suspected at and the
// method that fenced it. The loop keeps the newest, and only once the
// elector reported that it ended that very term itself (ProvedEnded) does
// the next term won skip its fence of it, when its breadcrumb names
// exactly it (docs/safety.md, "Fencing first, then taking over", step 5).
type provedOut struct {
	rec    breadcrumb.Record
	beat   cluster.Beat
	method string
	at     time.Time
	reply  chan struct{} // closed once the loop took it
}

// provedEnded: the elector ended the term of beat itself.
type provedEnded struct{ beat cluster.Beat }

func (proveReq) event()    {}
func (*provedOut) event()  {}
func (provedEnded) event() {}

// ProvedEnded is the elector's report that it ended the term b names
// itself, after ProveOut proved it out (cluster.FenceFirst.Ended).
func (c *Controller) ProvedEnded(b cluster.Beat) { c.send(provedEnded{beat: b}) }

// ProveOut is the elector's fencing-first step (cluster.ProveOut): it
// fences the leader s names with the methods that prove, and returns nil
// only when one of them did. It refuses when the breadcrumb does not
// name s's node (the leader has not written one: it cannot have
// promoted, and a proving fence of another node says nothing about it),
// when the breadcrumb names this node, and when the suspect answers its
// probe. A success is handed to the loop before ProveOut returns; it
// stands once the elector reports that it ended that term itself
// (ProvedEnded), and then for the next term won only (events are taken
// in order, so that term finds it).
func (c *Controller) ProveOut(ctx context.Context, s cluster.Suspect) error {
	reply := make(chan proveSettings, 1)
	if !c.send(proveReq{reply: reply}) {
		return errors.New("controller: stopped")
	}
	var set proveSettings
	select {
	case set = <-reply:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if set.prover == nil {
		return errors.New("no fencing method proves")
	}
	rec, _, err := c.rec.ReadBreadcrumb(ctx)
	if err != nil {
		return fmt.Errorf("reading the breadcrumb: %w", err)
	}
	switch {
	case rec.NodeID != s.Beat.NodeID:
		return fmt.Errorf("the breadcrumb names %q (epoch %d), not the suspected leader %q", rec.NodeID, rec.Epoch, s.Beat.NodeID)
	case rec.NodeID == c.cfg.NodeID:
		return errors.New("the breadcrumb names this node")
	}
	t := fencer.Target{NodeID: rec.NodeID, Host: rec.Host, AdminURL: rec.AdminURL, Epoch: rec.Epoch, ServiceAddress: rec.ServiceAddress}
	probeErr := errors.New("no probe")
	if set.probe != nil {
		probeErr = set.probe.Probe(ctx, t)
	}
	if probeErr == nil {
		return ErrLeaderAnswers
	}
	c.log.Info("suspected leader does not answer: fencing it before taking over", "target", rec.NodeID, "target_epoch", rec.Epoch,
		"stood_seconds", s.Stood.Seconds(), "probe", probeErr)
	start := time.Now()
	method, err := set.prover.Fence(ctx, t)
	if err != nil {
		return fmt.Errorf("no proving fence succeeded: %w", err)
	}
	p := &provedOut{rec: rec, beat: s.Beat, method: method, at: time.Now(), reply: make(chan struct{})}
	if !c.send(p) {
		return errors.New("controller: stopped")
	}
	select {
	case <-p.reply:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	c.log.Warn("fenced the suspected leader before taking over", "target", rec.NodeID, "target_epoch", rec.Epoch, "method", method,
		"duration_seconds", time.Since(start).Seconds())
	return nil
}

// onProveReq answers ProveOut with the current settings.
func (c *Controller) onProveReq(ev proveReq) {
	ev.reply <- proveSettings{prover: c.prover, probe: c.probe}
}

// onProvedOut keeps p as the term proved out, not yet ended.
func (c *Controller) onProvedOut(p *provedOut) {
	c.l.proving = p
	close(p.reply)
}

// onProvedEnded: the elector ended the term it suspected at ev.beat; if
// that is the term proved out, the next term won may skip its fence.
func (c *Controller) onProvedEnded(ev provedEnded) {
	if p := c.l.proving; p != nil && p.beat == ev.beat {
		c.l.provedOut, c.l.proving = p, nil
	}
}

// covers reports whether p proved out exactly the term rec names (nil:
// no proof).
func (p *provedOut) covers(rec breadcrumb.Record) bool {
	return p != nil && p.rec.NodeID == rec.NodeID && p.rec.Epoch == rec.Epoch && p.rec.Instance == rec.Instance && p.rec.Host == rec.Host
}
