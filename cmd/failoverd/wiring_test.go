package main

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
)

// The daemon hands the elector the controller's demote budget, and it is
// the one config validation checked (config.Timing, through the wired
// timing check): a config that validates never has its elector refuse (or
// its controller reject) the leadership for the session timeout it was
// validated against.
func TestWiringDemoteBudgetMatchesConfig(t *testing.T) {
	for _, tc := range []struct {
		session, tick, demote, lease time.Duration
	}{
		{5 * time.Second, 0, time.Second, 0},
		{5 * time.Second, 2 * time.Second, time.Second, 0},
		{2 * time.Second, 200 * time.Millisecond, 600 * time.Millisecond, 0},
		{9 * time.Second, 2 * time.Second, 2500 * time.Millisecond, 5 * time.Second},
	} {
		cfg := config.Default()
		cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "c", "n", "h"
		cfg.ZooKeeper.SessionTimeout, cfg.ZooKeeper.TickTime = config.Duration(tc.session), config.Duration(tc.tick)
		cfg.Service.Demote.Timeout, cfg.Election.Lease = config.Duration(tc.demote), config.Duration(tc.lease)
		cfg.ZooKeeper.Servers = []string{"127.0.0.1:2181"}
		ccfg := controllerConfig(cfg)
		ecfg := electionConfig(cfg, ccfg, nil)
		if got, want := ecfg.DemoteBudget, cfg.Timing().DemoteBudget; got != want || controller.DemoteBudget(ccfg) != want {
			t.Errorf("%+v: elector budget %v, controller %v, config %v", tc, got, controller.DemoteBudget(ccfg), want)
		}
		if kg := cfg.Timing().KillGrace; kg != controller.KillGrace {
			t.Errorf("%+v: validation names a kill grace of %v, the controller's is %v", tc, kg, controller.KillGrace)
		}
		var timingErrs []string
		var es config.ValidationErrors
		errors.As(cfg.Validate(), &es)
		for _, e := range es {
			if e.Path == "election.lease" || strings.HasPrefix(e.Path, "zookeeper.") {
				timingErrs = append(timingErrs, e.Error())
			}
		}
		et, eerr := ecfg.Timing(tc.session)
		if len(timingErrs) != 0 || eerr != nil || et.Clamped {
			t.Errorf("%+v: config %q, elector %+v (%v)", tc, timingErrs, et, eerr)
		}
		if ecfg.WarmStandby != cfg.Election.WarmStandby {
			t.Errorf("%+v: elector warm_standby %v, config %v", tc, ecfg.WarmStandby, cfg.Election.WarmStandby)
		}
		cfg.Election.WarmStandby = !cfg.Election.WarmStandby
		if electionConfig(cfg, ccfg, nil).WarmStandby != cfg.Election.WarmStandby {
			t.Errorf("%+v: election.warm_standby %v does not reach the elector", tc, cfg.Election.WarmStandby)
		}
		if et.Grace() < controller.DemoteBudget(ccfg) {
			t.Errorf("%+v: grace %v below the controller's budget", tc, et.Grace())
		}
		t.Logf("session %v tick %v demote %v: lease %v, renew %v, tolerance %v (budget %v)",
			tc.session, tc.tick, tc.demote, et.Lease, et.Renew, et.Tolerance(), et.Budget)
	}
}

// An rpc method whose own token file cannot be read fails the start with
// the method's key; the daemon used to fall back to node.admin.token_file
// and send that token instead, hiding the error. With no method and
// fencing.allow_none the controller gets a nil Fencer, not a typed nil.
func TestBuildFencerTokenAndNone(t *testing.T) {
	dir := t.TempDir()
	adminToken := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(adminToken, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "c", "n", "127.0.0.1"
	cfg.Node.Admin.TokenFile = adminToken
	cfg.Fencing.Methods = []config.FencingMethod{{RPC: &config.RPCFencing{TokenFile: filepath.Join(dir, "gone")}}}
	if _, err := buildFencer(cfg, slog.New(slog.DiscardHandler), nil); err == nil ||
		!strings.Contains(err.Error(), "fencing.methods[0].rpc.token_file") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("buildFencer with an unreadable rpc token_file = %v, want its read error", err)
	}
	cfg.Fencing.Methods[0].RPC.TokenFile = "" // node.admin.token_file then
	if f, err := buildFencer(cfg, slog.New(slog.DiscardHandler), nil); err != nil || f == nil {
		t.Errorf("buildFencer with the admin token = %v, %v; want a chain", f, err)
	}

	cfg.Fencing.Methods, cfg.Fencing.AllowNone = nil, true
	if f, err := buildFencer(cfg, slog.New(slog.DiscardHandler), nil); err != nil || f != nil {
		t.Errorf("buildFencer with allow_none = %#v, %v; want a nil Fencer", f, err)
	}
}

// service.follow and node.service_address reach the controller: the follow
// hook with its timeout, the promote's kill grace (a node elected while
// its follow runs waits that long at most) and no_leader_after (its
// default, and 0 for never); no follow block, no follow hook.
func TestWiringFollow(t *testing.T) {
	cfg := config.Default()
	cfg.Cluster, cfg.Node.ID, cfg.Node.Host, cfg.Node.ServiceAddress = "c", "n", "h", "h:6379"
	ccfg := controllerConfig(cfg)
	if ccfg.Follow != nil || followHook(ccfg).Argv != nil || ccfg.ServiceAddress != "h:6379" {
		t.Fatalf("without service.follow: follow %+v, service address %q", ccfg.Follow, ccfg.ServiceAddress)
	}
	cfg.Service.Follow = &config.FollowHook{Command: []string{"/bin/true"}, Timeout: config.Duration(7 * time.Second)}
	ccfg = controllerConfig(cfg)
	f := ccfg.Follow
	if f == nil || f.Hook.Timeout != 7*time.Second || f.Hook.KillGrace != ccfg.Promote.KillGrace || f.NoLeaderAfter != config.DefaultFollowNoLeaderAfter ||
		followHook(ccfg).Argv[0] != "/bin/true" {
		t.Fatalf("follow %+v", f)
	}
	never := config.Duration(0)
	cfg.Service.Follow.NoLeaderAfter = &never
	if f := controllerConfig(cfg).Follow; f.NoLeaderAfter != 0 {
		t.Errorf("no_leader_after 0 became %v", f.NoLeaderAfter)
	}
}

// service.demote.graceful_timeout reaches the controller (the timeout of
// a graceful end's demote), and stays out of the demote budget the
// elector and the lease are sized with.
func TestWiringGracefulDemoteTimeout(t *testing.T) {
	cfg := config.Default()
	cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "c", "n", "h"
	if got := controllerConfig(cfg).GracefulDemoteTimeout; got != config.DefaultDemoteTimeout {
		t.Errorf("graceful demote timeout %v by default, want service.demote.timeout %v", got, config.DefaultDemoteTimeout)
	}
	budget := cfg.Timing().DemoteBudget
	g := config.Duration(time.Minute)
	cfg.Service.Demote.GracefulTimeout = &g
	ccfg := controllerConfig(cfg)
	if ccfg.GracefulDemoteTimeout != time.Minute {
		t.Errorf("graceful demote timeout %v, want 1m", ccfg.GracefulDemoteTimeout)
	}
	if got := electionConfig(cfg, ccfg, nil).DemoteBudget; got != budget || controller.DemoteBudget(ccfg) != budget {
		t.Errorf("demote budget %v (controller %v) with a 1m graceful timeout, want %v", got, controller.DemoteBudget(ccfg), budget)
	}
}
