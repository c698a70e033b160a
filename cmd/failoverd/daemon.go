package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	oklog "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/election"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/healthcheck"
	"github.com/failoverd/failoverd/internal/lease"
	"github.com/failoverd/failoverd/metrics"
	"github.com/failoverd/failoverd/zk"
)

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	f := newFlags("validate", "validate -c FILE", stderr)
	if code := f.parse(args); code >= 0 {
		return code
	}
	cfg, err := config.Load(f.config)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	fmt.Fprintln(stdout, "ok")
	return exitOK
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	f := newFlags("run", "run -c FILE", stderr)
	if code := f.parse(args); code >= 0 {
		return code
	}
	cfg, err := config.Load(f.config)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	logger := newLogger(stderr, cfg.Log.Format, cfg.Log.Level)
	for _, w := range cfg.Warnings() {
		logger.Warn(w)
	}

	d, err := build(cfg, logger)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return exitUsage
	}
	if err := d.run(); err != nil {
		if errors.Is(err, zk.ErrUnsafeACL) {
			logger.Error("refusing to run: others may change the znodes failoverd relies on; fix their ACLs and start again", "err", err)
			return exitUsage
		}
		logger.Error("failoverd stopped", "err", err)
		return exitRuntime
	}
	logger.Info("failoverd stopped")
	return exitOK
}

// daemon is every component of a running node.
type daemon struct {
	log     *slog.Logger
	client  *zk.Client
	ctrl    *controller.Controller
	monitor *healthcheck.Monitor
	server  *admin.Server
}

// layoutOf is where cfg's cluster lives in ZooKeeper.
func layoutOf(cfg *config.Config) cluster.Layout {
	return cluster.Layout{Root: cfg.ZooKeeper.Root, Cluster: cfg.Cluster}
}

func zkConfig(cfg *config.Config, logger *slog.Logger) (zk.Config, error) {
	zc := zk.Config{Servers: cfg.ZooKeeper.Servers, SessionTimeout: cfg.ZooKeeper.SessionTimeout.Std(), Logger: logger}
	if cfg.ZooKeeper.Auth != nil {
		cred, err := cfg.ReadCredentials()
		if err != nil {
			return zc, err
		}
		user, pass, ok := strings.Cut(cred.Reveal(), ":")
		if !ok {
			return zc, fmt.Errorf("zookeeper.auth.credentials_file: want user:password")
		}
		zc.Auth = &zk.Auth{User: user, Password: pass}
		// Nobody else may be able to change the znodes above and at the
		// cluster path, nor the ones we keep there (the breadcrumb names
		// the admin URL the fencer sends its token to): every new session
		// checks them first, fixes the ones we own and refuses the others.
		zc.Protect = layoutOf(cfg).Protected()
	}
	return zc, nil
}

// controllerConfig is the controller's part of cfg. The promote's and the
// demote's kill graces are set explicitly: both are part of the demote
// budget (controller.DemoteBudget, the same lease.DemoteBudget that config
// validation used).
func controllerConfig(cfg *config.Config, logger *slog.Logger) controller.Config {
	return controller.Config{
		Cluster: cfg.Cluster, NodeID: cfg.Node.ID, Host: cfg.Node.Host, AdminURL: cfg.AdminURL(),
		Root: cfg.ZooKeeper.Root, Version: version, ElectionMode: cfg.Election.Mode,
		Promote:         controller.Hook{Argv: cfg.Service.Promote.Command, Timeout: cfg.Service.Promote.Timeout.Std(), KillGrace: lease.KillGrace},
		Demote:          controller.Hook{Argv: cfg.Service.Demote.Command, Timeout: cfg.Service.Demote.Timeout.Std(), KillGrace: lease.KillGrace},
		ShutdownTimeout: cfg.Node.ShutdownTimeout.Std(),
		Logger:          logger,
	}
}

// electionConfig is the elector's part of cfg: the lease (0: derived from
// the timeout ZooKeeper grants), the ensemble's tickTime and the
// controller's demote budget.
func electionConfig(cfg *config.Config, ccfg controller.Config, logger *slog.Logger) election.Config {
	mode := election.Fair
	if cfg.Election.Mode == config.ModeUnfair {
		mode = election.Unfair
	}
	return election.Config{
		Dir:    layoutOf(cfg).ElectionDir(),
		NodeID: cfg.Node.ID, Mode: mode, Lease: cfg.Election.Lease.Std(), TickTime: cfg.ZooKeeper.TickTime.Std(),
		DemoteBudget: controller.DemoteBudget(ccfg), Logger: logger,
	}
}

func build(cfg *config.Config, logger *slog.Logger) (*daemon, error) {
	zc, err := zkConfig(cfg, logger)
	if err != nil {
		return nil, err
	}
	client, err := zk.NewClient(zc)
	if err != nil {
		return nil, err
	}
	ccfg := controllerConfig(cfg, logger)
	el, err := election.New(client, electionConfig(cfg, ccfg, logger))
	if err != nil {
		return nil, err
	}

	reg := prometheus.NewRegistry()
	var ctrl *controller.Controller
	m := metrics.New(reg, version, func() controller.Status {
		if ctrl == nil {
			return controller.Status{}
		}
		return ctrl.Status()
	})

	chain, err := buildFencer(cfg, logger, m)
	if err != nil {
		return nil, err
	}
	var fence controller.Fencer
	if chain != nil {
		fence = chain
	}
	ctrl, err = controller.New(ccfg, client, el, fence, m)
	if err != nil {
		return nil, err
	}

	checker, err := buildChecker(cfg)
	if err != nil {
		return nil, err
	}
	monitor, err := healthcheck.New(checker, healthcheck.Config{
		Interval: cfg.Health.Interval.Std(), Timeout: cfg.Health.Timeout.Std(), Rise: cfg.Health.Rise, Fall: cfg.Health.Fall,
	}, logger, healthcheck.WithMetrics(m), healthcheck.WithOnChange(func(from, to healthcheck.State, err error) {
		m.HealthState(to.String())
		ctrl.HealthChanged(from, to, err)
	}))
	if err != nil {
		return nil, err
	}

	token := ""
	if cfg.Node.Admin.TokenFile != "" {
		s, err := cfg.ReadToken()
		if err != nil {
			return nil, err
		}
		token = s.Reveal()
	}
	h := admin.NewHandler(ctrl, reg, token, logger)
	opts := []admin.ServerOption{admin.WithLogger(logger)}
	if t := cfg.Node.Admin.TLS; t != nil {
		cert, err := t.LoadCertificate()
		if err != nil {
			return nil, fmt.Errorf("node.admin.tls: %w", err)
		}
		opts = append(opts, admin.WithTLS(admin.TLSConfig(cert)))
	}
	server := admin.NewServer(cfg.Node.Admin.Listen, h, opts...)
	if err := server.Listen(); err != nil { // a port in use fails before we join
		return nil, err
	}
	return &daemon{log: logger, client: client, ctrl: ctrl, monitor: monitor, server: server}, nil
}

func buildFencer(cfg *config.Config, logger *slog.Logger, m fencer.Metrics) (*fencer.Chain, error) {
	if len(cfg.Fencing.Methods) == 0 {
		if !cfg.Fencing.AllowNone {
			return nil, errors.New("no fencing method configured and fencing.allow_none is not set")
		}
		logger.Warn("running WITHOUT fencing (fencing.allow_none: true): a paused or partitioned old leader may still act")
		return nil, nil
	}
	var steps []fencer.Step
	for i, fm := range cfg.Fencing.Methods {
		switch {
		case fm.RPC != nil:
			tok, err := fm.RPC.ReadToken()
			if err != nil {
				if tok, err = cfg.ReadToken(); err != nil {
					return nil, fmt.Errorf("fencing.methods[%d].rpc: %w", i, err)
				}
			}
			r, err := fencer.NewRPC(fencer.RPCConfig{
				URL: fm.RPC.URL, Token: tok.Reveal(), Timeout: fm.RPC.Timeout.Std(), From: cfg.Node.ID,
				CAFile: fm.RPC.CAFile, AllowInsecureHTTP: fm.RPC.AllowInsecureHTTP,
			}, logger)
			if err != nil {
				return nil, fmt.Errorf("fencing.methods[%d].rpc: %w", i, err)
			}
			steps = append(steps, fencer.Step{Method: r, Timeout: fm.RPC.Timeout.Std()})
		case fm.SSH != nil:
			s, err := fencer.NewSSH(fencer.SSHConfig{
				User: fm.SSH.User, Port: fm.SSH.Port, IdentityFiles: fm.SSH.Identities(), UseAgent: fm.SSH.UseAgent,
				KnownHostsFile: fm.SSH.KnownHosts, InsecureIgnoreHostKey: fm.SSH.InsecureIgnoreHostKey,
				ConnectTimeout: fm.SSH.ConnectTimeout.Std(), Command: fm.SSH.Command, KillPort: fm.SSH.KillPort,
			}, logger)
			if err != nil {
				return nil, fmt.Errorf("fencing.methods[%d].ssh: %w", i, err)
			}
			steps = append(steps, fencer.Step{Method: s, Timeout: fm.SSH.Timeout.Std()})
		case fm.Shell != nil:
			steps = append(steps, fencer.Step{Method: &fencer.Shell{
				Argv: fm.Shell.Command, Timeout: fm.Shell.Timeout.Std(), Cluster: cfg.Cluster, NodeID: cfg.Node.ID, Logger: logger,
			}, Timeout: fm.Shell.Timeout.Std() + 2*time.Second})
		}
	}
	return fencer.NewChain(steps, logger, m)
}

func buildChecker(cfg *config.Config) (healthcheck.Checker, error) {
	h := cfg.Health
	switch {
	case h.HTTP != nil:
		return healthcheck.HTTP{URL: h.HTTP.URL, ExpectBody: h.HTTP.ExpectBody, Timeout: h.Timeout.Std()}, nil
	case h.TCP != nil:
		return healthcheck.TCP{Address: h.TCP.Address, Timeout: h.Timeout.Std()}, nil
	case h.Exec != nil:
		return healthcheck.Exec{Argv: h.Exec.Command, Timeout: h.Timeout.Std()}, nil
	}
	return nil, errors.New("health: no check configured")
}

// run starts every actor and returns after a graceful stop.
func (d *daemon) run() error {
	var g oklog.Group
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Signals: SIGTERM/SIGINT start a graceful stop.
	g.Add(oklog.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))

	// Health monitor.
	hctx, hcancel := context.WithCancel(ctx)
	g.Add(func() error { return d.monitor.Run(hctx) }, func(error) { hcancel() })

	// Controller: its interrupt blocks until the graceful stop finished
	// (demote, breadcrumb, leave, close the session). Interrupts run in the
	// order actors were added, so the admin API below stays up meanwhile.
	cctx, ccancel := context.WithCancel(ctx)
	cdone := make(chan struct{})
	var cerr error
	g.Add(func() error {
		defer close(cdone)
		cerr = d.ctrl.Run(cctx)
		return cerr
	}, func(error) {
		d.log.Info("stopping controller")
		ccancel()
		<-cdone
		d.log.Info("controller stopped")
	})

	// The first session: unsafe ACLs found then stop the daemon (exit 2).
	fctx, fcancel := context.WithCancel(ctx)
	g.Add(func() error { return d.firstSession(fctx) }, func(error) { fcancel() })

	// Admin API (metrics, status, and the rpc fencer's demote endpoint).
	actx, acancel := context.WithCancel(ctx)
	g.Add(func() error { return d.server.Run(actx) }, func(error) { acancel() })

	err := g.Run()
	if errors.Is(err, oklog.ErrSignal) {
		d.log.Info("stopped on signal", "err", err)
		return cerr
	}
	return err
}

// firstSession waits for the first ZooKeeper session. With zookeeper.auth,
// a session is refused when others may change a znode at or above the
// cluster that is not ours to fix (zk.ErrUnsafeACL): found at startup, that
// is a setup error, and the daemon refuses to run (returning it stops every
// actor, the controller demotes as it stops). Found later, on a new
// session, it is retried and shown in status like any ZooKeeper failure.
func (d *daemon) firstSession(ctx context.Context) error {
	for ctx.Err() == nil {
		_, err := d.client.Session(ctx)
		if err == nil {
			<-ctx.Done()
			return nil
		}
		if errors.Is(err, zk.ErrUnsafeACL) {
			return err
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}
