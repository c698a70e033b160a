package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	oklog "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/healthcheck"
	"github.com/failoverd/failoverd/metrics"
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
	if w := homeWarning(cfg); w != "" {
		fmt.Fprintln(stderr, "warning:", w)
	}
	for _, l := range cfg.FailoverArithmetic() {
		fmt.Fprintln(stdout, l)
	}
	fmt.Fprintln(stdout, "ok")
	return exitOK
}

// homeWarning says when the node state file names another place than cfg
// does ("": it does not, or there is none or it cannot be read here, as
// by a user other than the daemon's): the daemon would stay out of the
// election there.
func homeWarning(cfg *config.Config) string {
	st, found, err := readHome(homePath(cfg))
	if err != nil || !found || st.RecordID == "" || st.Coordination == "" || st.Coordination == placeOf(cfg) {
		return ""
	}
	return fmt.Sprintf("node.state_dir: this node last ran in %s (cluster record %s); this file names %s. "+
		"If that is another coordination service, ensemble, root or prefix, the daemon will stay out of the election "+
		"there until the cluster is moved with failoverd migrate (docs/operations.md, \"Moving a cluster\"); "+
		"if it is the same ensemble with other servers listed, ignore this", st.Coordination, st.RecordID, placeOf(cfg))
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	f := newFlags("run", "run -c FILE", stderr)
	if code := f.parse(args); code >= 0 {
		return code
	}
	// SIGHUP reloads the config file. Caught from here on, so that one
	// sent during start-up (systemctl reload) does not kill the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, data, err := readConfig(f.config)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	file := loadedConfig{path: f.config, hash: configHash(data), at: time.Now(), level: new(slog.LevelVar)}
	file.level.Set(logLevel(cfg.Log.Level))
	logger := newLevelLogger(stderr, cfg.Log.Format, file.level)
	for _, w := range cfg.Warnings() {
		logger.Warn(w)
	}
	logger.Info("config loaded", "file", f.config, "config_hash", file.hash)

	d, err := build(cfg, logger, file)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return exitUsage
	}
	d.hup = hup
	if err := d.run(); err != nil {
		if errors.Is(err, zk.ErrUnsafeACL) {
			logger.Error("refusing to run: others may change the znodes failoverd relies on; fix their ACLs and start again", "err", err)
			return exitUsage
		}
		if errors.Is(err, errEtcdSetup) {
			logger.Error("refusing to run: fix the etcd block and start again", "err", err)
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
	backend *backend
	ctrl    *controller.Controller
	monitor *healthcheck.Monitor
	server  *admin.Server
	leaders *leaderView // GET /v1/leader
	feed    *leaderFeed // the one leader watch, which leaders and ctrl share
	// reloader applies the config file again on hup (SIGHUP) and on POST
	// /v1/reload; hup nil: no signal.
	reloader *reloader
	hup      <-chan os.Signal
}

func zkConfig(cfg *config.Config) (zk.Config, error) {
	zc := zk.Config{Servers: cfg.ZooKeeper.Servers, SessionTimeout: cfg.ZooKeeper.SessionTimeout.Std()}
	tc, err := cfg.ZooKeeper.ClientTLS()
	if err != nil {
		return zc, err
	}
	zc.TLS = tc
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

// controllerConfig is the controller's part of cfg. No hook sets a kill
// grace: each gets the controller's KillGrace, which the demote budget
// counts for the promote and the demote (controller.DemoteBudget, the one
// config validation checks the lease against: config.Timing). The follow
// hook's is the same: a node elected while its follow runs waits that
// long at most for the slot.
func controllerConfig(cfg *config.Config) controller.Config {
	ccfg := controller.Config{
		Cluster: cfg.Cluster, NodeID: cfg.Node.ID, Host: cfg.Node.Host, AdminURL: cfg.AdminURL(),
		ServiceAddress: cfg.Node.ServiceAddress,
		Version:        version, ElectionMode: cfg.Election.Mode, Instance: controller.NewInstance(),
		Promote:               controller.Hook{Argv: cfg.Service.Promote.Command, Timeout: cfg.Service.Promote.Timeout.Std()},
		Demote:                controller.Hook{Argv: cfg.Service.Demote.Command, Timeout: cfg.Service.Demote.Timeout.Std()},
		GracefulDemoteTimeout: cfg.Service.Demote.Graceful(),
		ShutdownTimeout:       cfg.Node.ShutdownTimeout.Std(),
		FailoverCooldown:      cfg.Election.FailoverCooldown.Std(),
	}
	priority := cfg.Node.Priority
	ccfg.Priority = &priority
	ccfg.MaxLag, ccfg.PreemptAfter = cfg.Election.MaxLag, cfg.Election.PreemptAfter.Std()
	if p := cfg.Service.PrePromote; p != nil {
		ccfg.PrePromote = &controller.Hook{Argv: p.Command, Timeout: p.Timeout.Std()}
	}
	if p := cfg.Service.Position; p != nil {
		ccfg.PositionInterval = p.Interval.Std()
	}
	if f := cfg.Service.Follow; f != nil {
		ccfg.Follow = &controller.Follow{
			Hook:          controller.Hook{Argv: f.Command, Timeout: f.Timeout.Std()},
			NoLeaderAfter: f.NoLeaderWait(),
		}
	}
	return ccfg
}

// prePromoteHook is the pre_promote hook's command (none when not configured).
func prePromoteHook(ccfg controller.Config) controller.Hook {
	if ccfg.PrePromote == nil {
		return controller.Hook{}
	}
	return *ccfg.PrePromote
}

// positionReader runs service.position (nil when not configured).
func positionReader(cfg *config.Config, logger *slog.Logger) controller.PositionReader {
	p := cfg.Service.Position
	if p == nil {
		return nil
	}
	return controller.ProcPosition{Argv: p.Command, Timeout: p.Timeout.Std(), Cluster: cfg.Cluster, NodeID: cfg.Node.ID,
		Logger: logger.With("component", "position")}
}

// followHook is the follow hook's command (none when not configured).
func followHook(ccfg controller.Config) controller.Hook {
	if ccfg.Follow == nil {
		return controller.Hook{}
	}
	return ccfg.Follow.Hook
}

// electionConfig is the elector's part of cfg: the lease (0: derived from
// the timeout ZooKeeper grants), the ensemble's tickTime, the
// controller's demote budget and whether standbys keep a warm chain.
func electionConfig(cfg *config.Config, ccfg controller.Config, prove *lateProver) election.Config {
	mode := election.Fair
	if cfg.Election.Mode == config.ModeUnfair {
		mode = election.Unfair
	}
	return election.Config{
		Dir:    layoutOf(cfg).ElectionDir(),
		NodeID: cfg.Node.ID, Mode: mode, Lease: cfg.Election.Lease.Std(), TickTime: cfg.ZooKeeper.TickTime.Std(),
		DemoteBudget: controller.DemoteBudget(ccfg), WarmStandby: cfg.Election.WarmStandby,
		TakeOverAtDeadline: cfg.Election.TakeOverAtDeadline,
		FenceFirst:         fenceFirstOf(cfg, prove),
		RenewInterval:      cfg.Election.RenewInterval.Std(),
	}
}

// build makes every part of a node from cfg, in dependency order, without
// starting anything; run starts them. The admin API binds here, so that a
// port in use fails before the node joins an election it could not be
// fenced in.
func build(cfg *config.Config, logger *slog.Logger, file loadedConfig) (*daemon, error) {
	// Coordination backend: the store of our cluster and our candidate.
	ccfg := controllerConfig(cfg)
	ccfg.ConfigHash, ccfg.ConfigLoadedAt = file.hash, file.at
	be, err := openBackend(cfg, cfg.Node.ID, ccfg.Instance, logger)
	if err != nil {
		return nil, err
	}
	el, err := be.elector(ccfg)
	if err != nil {
		be.close()
		return nil, err
	}
	d, err := buildOn(cfg, logger, ccfg, be, el, file)
	if err != nil {
		be.close()
		return nil, err
	}
	return d, nil
}

// buildOn is build's part after the coordination backend.
func buildOn(cfg *config.Config, logger *slog.Logger, ccfg controller.Config, be *backend, el cluster.Elector, file loadedConfig) (*daemon, error) {
	// Metrics, on our own registry; the status gauges follow the controller.
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, version)
	m.ConfigLoaded(file.at)
	rl := &reloader{log: logger.With("component", "reload"), metrics: m, start: cfg, cur: cfg, file: file}

	// Fencing, then the controller that uses it.
	fence, err := buildFencer(cfg, logger, m)
	if err != nil {
		return nil, err
	}
	// With election.end_own_term_on_restart the lock beside the node
	// state file is taken before the file is read: what the file names is
	// ours to remove only if no other process of this node runs.
	open := openHome
	if cfg.Election.EndOwnTermOnRestart {
		open = openLockedHome
	}
	home, err := open(cfg, placeOf(cfg))
	if err != nil {
		return nil, err
	}
	if id, epoch := home.Load(); id != "" {
		logger.Info("node state read", "file", home.path, "record_id", id, "highest_epoch", epoch)
	}
	if cfg.Election.EndOwnTermOnRestart {
		r, prev, err := newRestarter(home, be.store, ccfg.Instance, bootID(), logger)
		if err != nil {
			return nil, err
		}
		if prev != "" {
			be.store.SetPrevious(prev)
		}
		el = withRestarter(el, r)
	}
	probe, err := newStatusProbe(cfg)
	if err != nil {
		return nil, err
	}
	feed := newLeaderFeed(be.store.WatchLeader)
	ctrl, err := controller.New(ccfg, controller.Deps{
		Elector: el, Records: feedRecords{Records: be.store, feed: feed}, Fencer: fence, Prover: proverOf(fence), Probe: probe, Metrics: m, Logger: logger,
		Hooks:    procHooks(cfg, ccfg, logger),
		Position: positionReader(cfg, logger),
		Home:     home,
	})
	if err != nil {
		return nil, err
	}
	be.prove.set(ctrl)
	reg.MustRegister(metrics.StatusCollector(ctrl.Status))

	// Health monitor, reporting to the controller.
	monitor, err := buildMonitor(cfg, logger, m, ctrl)
	if err != nil {
		return nil, err
	}

	// Admin API, answering GET /v1/leader from the leader view.
	leaders := newLeaderView(be.store, be.stale, be.etcdName())
	leaders.watch = feed.subscribe
	server, err := buildAdmin(cfg, logger, reg, ctrl, leaders, be.store, be.store, rl)
	if err != nil {
		return nil, err
	}
	if err := server.Listen(); err != nil {
		return nil, err
	}
	rl.ctrl, rl.monitor, rl.server = ctrl, monitor, server
	return &daemon{log: logger, backend: be, ctrl: ctrl, monitor: monitor, server: server, leaders: leaders, feed: feed, reloader: rl}, nil
}

// procHooks runs the hooks of cfg (ccfg is its controller part).
func procHooks(cfg *config.Config, ccfg controller.Config, logger *slog.Logger) controller.ProcHooks {
	return controller.ProcHooks{Promote: ccfg.Promote, Demote: ccfg.Demote, Follow: followHook(ccfg), PrePromote: prePromoteHook(ccfg),
		Cluster: cfg.Cluster, NodeID: cfg.Node.ID, Logger: logger}
}

// healthConfig is the health monitor's part of cfg.
func healthConfig(cfg *config.Config) healthcheck.Config {
	h := cfg.Health
	return healthcheck.Config{Interval: h.Interval.Std(), Timeout: h.Timeout.Std(), Rise: h.Rise, Fall: h.Fall}
}

// buildFencer returns the fencing chain of cfg, or nil (no fencing) when
// none is configured and fencing.allow_none says that is acceptable.
func buildFencer(cfg *config.Config, logger *slog.Logger, m fencer.Metrics) (controller.Fencer, error) {
	if len(cfg.Fencing.Methods) == 0 {
		if !cfg.Fencing.AllowNone {
			return nil, errors.New("no fencing method configured and fencing.allow_none is not set")
		}
		logger.Warn("running WITHOUT fencing (fencing.allow_none: true): a paused or partitioned old leader may still act")
		return nil, nil
	}
	deps := fencer.Deps{Logger: logger, Metrics: m}
	var steps []fencer.Step
	for i, fm := range cfg.Fencing.Methods {
		step, err := buildFenceStep(cfg, i, deps)
		if err != nil {
			return nil, fmt.Errorf("fencing.methods[%d].%s: %w", i, fm.Name(), err)
		}
		step.Proves = fm.Proving()
		steps = append(steps, step)
	}
	return fencer.NewChain(steps, deps)
}

// buildFenceStep builds fencing method i with the time the chain gives it.
func buildFenceStep(cfg *config.Config, i int, deps fencer.Deps) (fencer.Step, error) {
	fm := cfg.Fencing.Methods[i]
	switch {
	case fm.RPC != nil:
		tok, err := cfg.RPCToken(i)
		if err != nil {
			return fencer.Step{}, err
		}
		r, err := fencer.NewRPC(fencer.RPCConfig{
			URL: fm.RPC.URL, Token: tok.Reveal(), Timeout: fm.RPC.Timeout.Std(), From: cfg.Node.ID,
			CAFile: fm.RPC.CAFile, AllowInsecureHTTP: fm.RPC.AllowInsecureHTTP,
		}, deps)
		if err != nil {
			return fencer.Step{}, err
		}
		return fencer.Step{Method: r, Timeout: r.StepTimeout()}, nil
	case fm.SSH != nil:
		s, err := fencer.NewSSH(fencer.SSHConfig{
			User: fm.SSH.User, Port: fm.SSH.Port, IdentityFiles: fm.SSH.Identities(), UseAgent: fm.SSH.UseAgent,
			KnownHostsFile: fm.SSH.KnownHosts, InsecureIgnoreHostKey: fm.SSH.InsecureIgnoreHostKey,
			ConnectTimeout: fm.SSH.ConnectTimeout.Std(), Command: fm.SSH.Command, KillPort: fm.SSH.KillPort,
		}, deps)
		if err != nil {
			return fencer.Step{}, err
		}
		return fencer.Step{Method: s, Timeout: fm.SSH.Timeout.Std()}, nil
	case fm.Shell != nil:
		s, err := fencer.NewShell(fencer.ShellConfig{
			Argv: fm.Shell.Command, Timeout: fm.Shell.Timeout.Std(), Cluster: cfg.Cluster, NodeID: cfg.Node.ID,
		}, deps)
		if err != nil {
			return fencer.Step{}, err
		}
		return fencer.Step{Method: s, Timeout: s.StepTimeout()}, nil
	}
	return fencer.Step{}, errors.New("no method set")
}

// buildMonitor returns the health monitor; every change of health goes to
// the metrics and to the controller.
func buildMonitor(cfg *config.Config, logger *slog.Logger, m *metrics.Metrics, ctrl *controller.Controller) (*healthcheck.Monitor, error) {
	checker, err := buildChecker(cfg)
	if err != nil {
		return nil, err
	}
	return healthcheck.New(healthConfig(cfg), healthcheck.Deps{
		Checker: checker, Logger: logger, Metrics: m,
		OnChange: func(from, to healthcheck.State, err error) {
			m.HealthState(to.String())
			ctrl.HealthChanged(from, to, err)
		},
	})
}

// buildAdmin returns the admin API of ctrl, serving reg on /metrics and
// the leader view on /v1/leader and the history on /v1/history; pauser
// serves POST /v1/pause and /v1/resume, reloader POST /v1/reload.
func buildAdmin(cfg *config.Config, logger *slog.Logger, reg prometheus.Gatherer, ctrl *controller.Controller, leaders admin.LeaderSource,
	history admin.HistorySource, pauser admin.Pauser, reloader admin.Reloader) (*admin.Server, error) {
	acfg := admin.Config{Listen: cfg.Node.Admin.Listen}
	tok, err := cfg.ReadToken() // "" without token_file: mutating endpoints disabled
	if err != nil {
		return nil, fmt.Errorf("node.admin.token_file: %w", err)
	}
	acfg.Token = tok
	if t := cfg.Node.Admin.TLS; t != nil {
		cert, err := t.LoadCertificate()
		if err != nil {
			return nil, fmt.Errorf("node.admin.tls: %w", err)
		}
		acfg.TLS = admin.TLSConfig(cert)
	}
	return admin.New(acfg, admin.Deps{Node: ctrl, Leaders: leaders, History: history, Pauser: pauser, Reloader: reloader, Gatherer: reg, Logger: logger})
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

// run starts one actor per part and returns after a graceful stop. The
// first actor to return (a signal, or a part that failed) interrupts all of
// them, in the order they are added here.
func (d *daemon) run() error {
	var g oklog.Group
	ctx := context.Background()

	// Signals: SIGTERM and SIGINT start a graceful stop.
	g.Add(oklog.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))

	// SIGHUP reloads the config file.
	if d.hup != nil {
		d.add(&g, "reload on SIGHUP", d.reloadOnSignal, false)
	}

	// Health monitor: the first to stop, as nothing waits for its verdicts
	// once the controller stops.
	d.add(&g, "health monitor", d.monitor.Run, false)

	// Controller. Its interrupt waits until the graceful stop is over
	// (demote, delete the breadcrumb, leave the election): the admin API
	// must still answer meanwhile (a successor's rpc fence, status for
	// operators), and the ZooKeeper session must still be open (the
	// breadcrumb delete and the leave are ZooKeeper writes, and closing the
	// session early would drop our election znode before the demote ended).
	// Interrupts run in the order actors were added, so both are stopped
	// only after this one returned.
	var ctrlErr error
	d.add(&g, "controller", func(ctx context.Context) error {
		ctrlErr = d.ctrl.Run(ctx)
		return ctrlErr
	}, true)

	// Admin API: metrics, status, and the rpc fencer's demote endpoint.
	d.add(&g, "admin api", d.server.Run, false)

	// Leader view (GET /v1/leader), after the admin API that answers it,
	// and the leader watch it shares with the controller: stopped after
	// the controller's graceful stop is over, like the view.
	d.add(&g, "leader view", d.leaders.run, false)
	d.add(&g, "leader watch", d.feed.run, false)

	// Coordination session (ZooKeeper's session, etcd's lease), last: it
	// holds our ephemeral records, which must go only after the controller
	// is done with them.
	d.add(&g, d.backend.name()+" session", d.session, false)

	err := g.Run()
	if errors.Is(err, oklog.ErrSignal) {
		d.log.Info("stopped on signal", "err", err)
		return ctrlErr // a graceful stop that took too long, say
	}
	return err
}

// add adds the actor run(ctx) named name to g. Its interrupt cancels ctx;
// with wait it also blocks until run returned. Both ends are logged
// ("stopping X", "X stopped").
func (d *daemon) add(g *oklog.Group, name string, run func(context.Context) error, wait bool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g.Add(func() error {
		defer close(done)
		err := run(ctx)
		if err != nil {
			d.log.Info(name+" stopped", "err", err)
		} else {
			d.log.Info(name + " stopped")
		}
		return err
	}, func(error) {
		d.log.Info("stopping " + name)
		cancel()
		if wait {
			<-done
		}
	})
}

// session waits for the first session with the coordination service and
// then holds the connection open until ctx ends, when it closes it. With
// zookeeper.auth, a first session that finds others able to change a
// znode at or above the cluster, one not ours to fix (zk.ErrUnsafeACL),
// is a setup error: it is returned, which stops every actor (the
// controller demotes as it stops) and makes the daemon exit 2. Found
// later, on a new session, the same refusal is retried and shown in status
// like any ZooKeeper failure.
func (d *daemon) session(ctx context.Context) error {
	defer d.backend.close()
	if err := d.backend.session(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
