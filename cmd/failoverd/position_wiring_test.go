package main

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
)

// service.position reaches the controller: its interval, and a reader of
// its command with its timeout and the node's names; none without it.
func TestWiringPosition(t *testing.T) {
	cfg := config.Default()
	cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "c", "n", "h"
	if r := positionReader(cfg, slog.Default()); r != nil || controllerConfig(cfg).PositionInterval != 0 {
		t.Fatalf("without service.position: reader %v, interval %v", r, controllerConfig(cfg).PositionInterval)
	}
	cfg.Service.Position = &config.PositionCommand{Command: []string{"/bin/pos", "x"}, Interval: config.Duration(3 * time.Second), Timeout: config.Duration(2 * time.Second)}
	if iv := controllerConfig(cfg).PositionInterval; iv != 3*time.Second {
		t.Errorf("interval %v, want 3s", iv)
	}
	p, ok := positionReader(cfg, slog.Default()).(controller.ProcPosition)
	if !ok || !slices.Equal(p.Argv, []string{"/bin/pos", "x"}) || p.Timeout != 2*time.Second || p.Cluster != "c" || p.NodeID != "n" {
		t.Fatalf("reader %+v", p)
	}
}

// The POSITION and LAG columns: "-" when unknown, the lag never negative
// (a member ahead of the leader's last published position is not behind).
func TestStatusPositionColumns(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	lp := &cluster.LeaderPosition{NodeID: "a", Epoch: 3, Position: 1000}
	for _, tc := range []struct {
		m        cluster.Member
		lp       *cluster.LeaderPosition
		pos, lag string
	}{
		{cluster.Member{Position: p(400)}, lp, "400", "600"},
		{cluster.Member{Position: p(1200)}, lp, "1200", "0"},
		{cluster.Member{Position: p(400)}, nil, "400", "-"},
		{cluster.Member{}, lp, "-", "-"},
	} {
		if got, lag := position(tc.m), lag(tc.m, tc.lp); got != tc.pos || lag != tc.lag {
			t.Errorf("%v vs %+v: POSITION %s LAG %s, want %s %s", tc.m.Position, tc.lp, got, lag, tc.pos, tc.lag)
		}
	}
}
