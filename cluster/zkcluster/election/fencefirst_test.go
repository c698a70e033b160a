package election

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/netproxy"
	"github.com/failoverd/failoverd/test/zktest"
)

// proveOuts records what a successor asked ProveOut and answers with err;
// with fence set and err nil it first fences (stops) the suspect, as a
// proving fence would.
type proveOuts struct {
	mu    sync.Mutex
	asked []cluster.Suspect
	err   error
	fence func(s cluster.Suspect)
}

func (p *proveOuts) prove(_ context.Context, s cluster.Suspect) error {
	p.mu.Lock()
	p.asked = append(p.asked, s)
	err, fence := p.err, p.fence
	p.mu.Unlock()
	if err == nil && fence != nil {
		fence(s)
	}
	return err
}

func (p *proveOuts) list() []cluster.Suspect {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]cluster.Suspect(nil), p.asked...)
}

// A leader cut off from ZooKeeper stops heartbeating; the candidate next
// in line suspects it after suspect_after and, once ProveOut proved it
// out, ends its term at once: long before the leader's own deadline and
// the session's expiry. While the leader's heartbeat moved, nothing was
// asked.
func TestFenceFirstEndsAProvedOutTerm(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	proxy := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
	const timeout = 4 * time.Second
	p := &proveOuts{}
	ff := cluster.FenceFirst{SuspectAfter: 300 * time.Millisecond, ProveOut: p.prove}
	a := startCandidate(t, r, "a", opts{mode: Fair, timeout: timeout, servers: []string{proxy.Addr()}, fenceFirst: ff, budget: 300 * time.Millisecond})
	if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
		t.Fatalf("leader %s, want a", l)
	}
	epoch := r.leaderOf(t, "a").Epoch
	// The proving fence: a's Run is stopped and its term callback
	// returned before ProveOut answers.
	p.fence = func(cluster.Suspect) {
		a.mu.Lock()
		cancel := a.cancel
		a.mu.Unlock()
		cancel()
		for i := 0; i < 200; i++ {
			if _, ok := r.current("a"); !ok {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Error("a still leads 2 s after it was fenced")
	}
	startCandidate(t, r, "b", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), fenceFirst: ff, budget: 300 * time.Millisecond})
	waitQueueLen(t, zks.Addrs(), 2)
	time.Sleep(timeout) // many suspect_after periods of a moving heartbeat
	if got := p.list(); len(got) != 0 {
		t.Fatalf("ProveOut asked about a leader whose heartbeat moved: %+v", got)
	}

	cut := time.Now()
	proxy.Blackhole(true)
	if l := r.waitLeader(t, "a", 4*timeout); l != "b" {
		t.Fatalf("successor %s, want b", l)
	}
	won := time.Since(cut)
	got := p.list()
	if len(got) != 1 {
		t.Fatalf("ProveOut asked %d times, want once: %+v", len(got), got)
	}
	s := got[0]
	if s.Beat.NodeID != "a" || s.Beat.Entry.Created != epoch || s.Stood < ff.SuspectAfter {
		t.Errorf("suspect %+v: want node a, created %d, stood ≥ %v", s, epoch, ff.SuspectAfter)
	}
	if b := r.leaderOf(t, "b").Epoch; b <= epoch {
		t.Errorf("b's epoch %d is not above a's %d", b, epoch)
	}
	// a's lease is about 2.9 s (timeout less budget less margin) after
	// its last heartbeat: b won well inside it.
	if won > timeout/2 {
		t.Errorf("b won %v after the cut; want within %v (fencing first)", won, timeout/2)
	}
	t.Logf("b won %v after the cut (suspected after %v)", won.Round(time.Millisecond), s.Stood.Round(time.Millisecond))
	r.check(t)
}

// When ProveOut fails, nothing is removed early: the successor wins only
// once ZooKeeper expired the old session.
func TestFenceFirstWithoutProofWaitsForTheExpiry(t *testing.T) {
	zks := zktest.Start(t, 1)
	r := newReferee()
	proxy := netproxy.New(t, func() string { return zks.Servers[0].Addr() })
	const timeout = 2 * time.Second
	p := &proveOuts{err: errors.New("no proving method succeeded")}
	ff := cluster.FenceFirst{SuspectAfter: 200 * time.Millisecond, ProveOut: p.prove}
	startCandidate(t, r, "a", opts{mode: Fair, timeout: timeout, servers: []string{proxy.Addr()}, fenceFirst: ff})
	if l := r.waitLeader(t, "", 10*time.Second); l != "a" {
		t.Fatalf("leader %s, want a", l)
	}
	probe := probeSession(t, r, "a")
	startCandidate(t, r, "b", opts{mode: Fair, timeout: timeout, servers: zks.Addrs(), fenceFirst: ff})
	waitQueueLen(t, zks.Addrs(), 2)
	time.Sleep(timeout)
	proxy.Blackhole(true)
	if l := r.waitLeader(t, "a", 6*timeout); l != "b" {
		t.Fatalf("successor %s, want b", l)
	}
	if exists(t, zks.Addrs(), probe) {
		t.Errorf("b won while a's session was still alive, without a proof")
	}
	if len(p.list()) == 0 {
		t.Errorf("ProveOut was never asked: the test proves nothing")
	}
	r.check(t)
}
