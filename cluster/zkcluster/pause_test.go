package zkcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// The pause record against real ZooKeeper: set is idempotent (the first
// pause stands), clear is idempotent, an unreadable record still pauses,
// and the watch sees every change, also after its connection was lost
// (server restarted within the session timeout) and after its session
// expired.
func TestPauseRecordAndWatch(t *testing.T) {
	zkc := zktest.Start(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	op, opc := newStore(t, zkc, "", "")
	w, wc := newStore(t, zkc, "", "")
	session(t, opc)

	if p, err := op.ReadPause(ctx); err != nil || p != nil {
		t.Fatalf("ReadPause on a fresh cluster = %+v, %v; want nil, nil", p, err)
	}
	if was, err := op.ClearPause(ctx); err != nil || was {
		t.Fatalf("ClearPause when not paused = %v, %v; want false, nil", was, err)
	}

	got := make(chan *cluster.Pause, 100)
	done := make(chan error, 1)
	go func() { done <- w.WatchPause(ctx, func(p *cluster.Pause) { got <- p }) }()
	next := func(what string, ok func(*cluster.Pause) bool) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case p := <-got:
				if ok(p) {
					return
				}
			case <-timeout:
				t.Fatalf("WatchPause did not deliver %s", what)
			}
		}
	}
	next("not paused", func(p *cluster.Pause) bool { return p == nil })

	first := cluster.Pause{By: "ops@host", Reason: "kernel upgrade", At: time.Now().UTC().Truncate(time.Millisecond)}
	cur, created, err := op.SetPause(ctx, first)
	if err != nil || !created || cur != first {
		t.Fatalf("SetPause = %+v, %v, %v; want %+v, true, nil", cur, created, err, first)
	}
	next("the pause", func(p *cluster.Pause) bool { return p != nil && p.Reason == "kernel upgrade" })
	// Pausing again keeps the first pause (who, since when, why).
	cur, created, err = op.SetPause(ctx, cluster.Pause{By: "other@host", Reason: "again", At: time.Now()})
	if err != nil || created || cur.By != first.By || !cur.At.Equal(first.At) {
		t.Fatalf("second SetPause = %+v, %v, %v; want the first pause, false, nil", cur, created, err)
	}

	// Resume, then pause while the watcher's server is down (its session
	// survives the restart): the watch is armed again on reconnect.
	if was, err := op.ClearPause(ctx); err != nil || !was {
		t.Fatalf("ClearPause = %v, %v; want true, nil", was, err)
	}
	next("resumed", func(p *cluster.Pause) bool { return p == nil })
	sess := session(t, wc)
	zkc.Stop(0)
	time.Sleep(500 * time.Millisecond)
	zkc.Restart(0)
	zkc.WaitServing(30 * time.Second)
	// The server serving does not mean the operator's client is back on
	// it yet: a request sent before it is fails with a connection loss
	// (a CI run hit that). Wait for the reconnect, and send
	// again on a connection loss (setting the pause is idempotent).
	connected(t, opc)
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, _, err := op.SetPause(ctx, cluster.Pause{By: "ops@host", Reason: "after a disconnect", At: time.Now()})
		if err == nil {
			break
		}
		if !errors.Is(err, zk.ErrConnectionLoss) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		connected(t, opc)
	}
	next("the pause after a disconnect", func(p *cluster.Pause) bool { return p != nil && p.Reason == "after a disconnect" })
	if session(t, wc) != sess {
		t.Log("the watcher's session did not survive the restart; the new-session path was tested instead")
	}

	// A new session: the watch reads again and follows the record.
	expire(t, zkc, wc)
	if _, err := op.ClearPause(ctx); err != nil {
		t.Fatal(err)
	}
	next("resumed after the watcher's session expired", func(p *cluster.Pause) bool { return p == nil })

	// An unreadable record pauses too.
	osess := session(t, opc)
	if err := osess.EnsurePath(ctx, testLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := osess.Create(ctx, testLayout.Pause(), []byte("{not json"), 0); err != nil {
		t.Fatal(err)
	}
	next("an unreadable pause", func(p *cluster.Pause) bool { return p != nil && p.By == "unknown" })
	if was, err := op.ClearPause(ctx); err != nil || !was {
		t.Fatalf("ClearPause of an unreadable record = %v, %v; want true, nil", was, err)
	}
	next("resumed from the unreadable pause", func(p *cluster.Pause) bool { return p == nil })

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WatchPause returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchPause did not return when its context ended")
	}
}
