//go:build scale

package scale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/config"
	"github.com/failoverd/failoverd/controller"
)

// backendConn is one member's connection to the coordination service,
// built with the constructors the daemon uses (cmd/failoverd/backend.go:
// openZooKeeper, openEtcd), from a config.Config holding the defaults.
type backendConn struct {
	store   *cluster.Store
	elector cluster.Elector
	close   func()
	// crash cuts the member off as a SIGKILL of its daemon would: its
	// connections close without ending its session or revoking its lease,
	// which the coordination service expires on its own.
	crash func()
}

// severable dials TCP and can cut every connection it made, for good.
type severable struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

var errCrashed = errors.New("scale: the member crashed")

func (s *severable) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	s.mu.Lock()
	cut := s.cut
	s.mu.Unlock()
	if cut {
		return nil, errCrashed
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		c.Close()
		return nil, errCrashed
	}
	s.conns = append(s.conns, c)
	return c, nil
}

func (s *severable) sever() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	for _, c := range s.conns {
		c.Close()
	}
}

// memberConfig is the daemon's config of node id of cluster name: the
// documented defaults, on the servers given.
func memberConfig(backend, name, id string, servers []string) *config.Config {
	cfg := config.Default()
	cfg.Cluster = name
	cfg.Node.ID = id
	cfg.Node.Host = id
	if backend == "etcd" {
		cfg.Coordination.Backend = config.BackendEtcd
		cfg.Etcd = &config.Etcd{Endpoints: servers, Prefix: config.DefaultEtcdPrefix, LeaseTTL: config.Duration(config.DefaultEtcdLeaseTTL)}
	} else {
		cfg.Coordination.Backend = config.BackendZooKeeper
		cfg.ZooKeeper.Servers = servers
		if d := envDuration("SCALE_ZK_SESSION", 0); d > 0 {
			cfg.ZooKeeper.SessionTimeout = config.Duration(d)
		}
		if d := envDuration("SCALE_ZK_TICK", 0); d > 0 {
			cfg.ZooKeeper.TickTime = config.Duration(d)
		}
	}
	if os.Getenv("SCALE_WARM_STANDBY") == "0" {
		cfg.Election.WarmStandby = false
	}
	return cfg
}

func layoutOf(cfg *config.Config) cluster.Layout {
	if cfg.Coordination.Backend == config.BackendEtcd {
		return cluster.Layout{Root: cfg.Etcd.Prefix, Cluster: cfg.Cluster}
	}
	return cluster.Layout{Root: cfg.ZooKeeper.Root, Cluster: cfg.Cluster}
}

// controllerConfig is the part of the daemon's controller.Config the
// electors are sized with (controller.DemoteBudget).
func controllerConfig(cfg *config.Config, instance string) controller.Config {
	return controller.Config{
		Cluster: cfg.Cluster, NodeID: cfg.Node.ID, Host: cfg.Node.Host, ElectionMode: cfg.Election.Mode, Instance: instance,
		Promote: controller.Hook{Timeout: cfg.Service.Promote.Timeout.Std()},
		Demote:  controller.Hook{Timeout: cfg.Service.Demote.Timeout.Std()},
	}
}

// logger is where the backend code logs (SCALE_LOG: a file, warnings
// and errors; unset: discarded).
var logger = func() *slog.Logger {
	if p := os.Getenv("SCALE_LOG"); p != "" {
		if f, err := os.Create(p); err == nil {
			return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}
	return slog.New(slog.DiscardHandler)
}()

func open(cfg *config.Config, instance string) (*backendConn, error) {
	ccfg := controllerConfig(cfg, instance)
	log := logger.With("cluster", cfg.Cluster, "node", cfg.Node.ID)
	if cfg.Coordination.Backend == config.BackendEtcd {
		cli, err := etcdcluster.Dial(etcdcluster.DialConfig{Endpoints: cfg.Etcd.Endpoints, DialTimeout: cfg.Etcd.DialTimeout.Std()})
		if err != nil {
			return nil, err
		}
		conn, err := etcdcluster.NewConn(cli, etcdcluster.ConnConfig{LeaseTTL: cfg.Etcd.LeaseTTL.Std(), ReadKey: layoutOf(cfg).Config(), WarnVersions: true, Logger: log})
		if err != nil {
			cli.Close()
			return nil, err
		}
		closeAll := func() { conn.Close(); cli.Close() }
		store, err := etcdcluster.New(etcdcluster.Config{Layout: layoutOf(cfg), NodeID: cfg.Node.ID, Instance: instance}, etcdcluster.Deps{Conn: conn, Logger: log})
		if err != nil {
			closeAll()
			return nil, err
		}
		el, err := store.Elector(etcdcluster.ElectorConfig{NodeID: cfg.Node.ID, Mode: etcdcluster.Fair, DemoteBudget: controller.DemoteBudget(ccfg)})
		if err != nil {
			closeAll()
			return nil, err
		}
		return &backendConn{store: store.Store, elector: el, close: closeAll, crash: func() { cli.Close() }}, nil
	}
	sv := &severable{}
	client, err := zk.NewClient(zk.Config{Servers: cfg.ZooKeeper.Servers, SessionTimeout: cfg.ZooKeeper.SessionTimeout.Std()}, zk.Deps{Dial: sv.dial, Logger: log})
	if err != nil {
		return nil, err
	}
	store, err := zkcluster.New(zkcluster.Config{Layout: layoutOf(cfg), NodeID: cfg.Node.ID, Instance: instance}, zkcluster.Deps{Client: client, Logger: log})
	if err != nil {
		client.Close()
		return nil, err
	}
	el, err := election.New(election.Config{
		Dir: layoutOf(cfg).ElectionDir(), NodeID: cfg.Node.ID, Mode: election.Fair, Lease: cfg.Election.Lease.Std(),
		TickTime: cfg.ZooKeeper.TickTime.Std(), DemoteBudget: controller.DemoteBudget(ccfg), WarmStandby: cfg.Election.WarmStandby,
	}, election.Deps{Client: client, Logger: log})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &backendConn{store: store.Store, elector: store.Elector(el), close: client.Close, crash: sv.sever}, nil
}

// stats are counted by every member of a run.
type stats struct {
	wins      atomic.Int64 // terms won
	termsLost atomic.Int64 // terms that ended while the member's context ran (no fault injected: unexplained)
	errors    atomic.Int64 // failed publishes, join checks, breadcrumb writes
	mu        sync.Mutex
	minMargin time.Duration // smallest Expiry - now seen by a leader at rest
	margins   []time.Duration
	phaseMin  time.Duration // smallest since resetPhase (phaseSeen: any)
	phaseSeen bool
	lastErr   string
}

func (s *stats) margin(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.margins) == 0 || d < s.minMargin {
		s.minMargin = d
	}
	if !s.phaseSeen || d < s.phaseMin {
		s.phaseMin, s.phaseSeen = d, true
	}
	if len(s.margins) < 1_000_000 {
		s.margins = append(s.margins, d)
	}
}

// resetPhase starts a phase's smallest margin afresh.
func (s *stats) resetPhase() {
	s.mu.Lock()
	s.phaseSeen = false
	s.mu.Unlock()
}

// phaseMargin is the smallest margin since resetPhase, in ms (-1: none).
func (s *stats) phaseMargin() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.phaseSeen {
		return -1
	}
	return float64(s.phaseMin.Milliseconds())
}

func (s *stats) fail(err error) {
	s.errors.Add(1)
	s.mu.Lock()
	s.lastErr = err.Error()
	s.mu.Unlock()
}

// member is one daemon's coordination work with the controller's decisions
// replaced by the minimal loop: publish the member record (and run the join
// check) at start, on every change and every 30 s as the controller does,
// the known-member record every cluster.RememberEvery; campaign; on a win
// write the breadcrumb through the term and publish the record as leader;
// the leader watch the controller and the admin API's leader view share
// (the view's Fresh only on demand, and nobody asks), the failover and
// pause watches, and the leader's member watch.
type member struct {
	cfg      *config.Config
	instance string
	be       *backendConn
	st       *stats
	cl       *clusterState

	mu    sync.Mutex
	state string
	epoch int64
	since time.Time
	poke  chan struct{}
	pos   int64 // the service's replication position (busy phase), under mu
}

// busy is on during the busy phase: every member's replication position
// moves every second, as a service that is being written to with
// service.position configured (interval 1 s, the default): each member
// publishes its record again, and each leader writes its LeaderPosition
// record through its term, once a second.
var busy atomic.Bool

// moved advances the member's position (busy phase) and returns it.
func (m *member) moved() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pos++
	return m.pos
}

// clusterState is what a cluster's members' leader views saw.
type clusterState struct {
	lost   atomic.Int64 // terms of this cluster lost with no fault injected into it
	mu     sync.Mutex
	views  map[string]*cluster.Leader // member id -> its view's leader
	agreed chan struct{}              // closed once every view names one leader
	size   int
}

// view is what member id's leader view names now (nil: none, or not read).
func (c *clusterState) view(id string) *cluster.Leader {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.views[id]
}

// leading reports the member's epoch and whether it is in leader state.
func (m *member) leading() (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch, m.state == cluster.StateLeader
}

func (c *clusterState) set(id string, l *cluster.Leader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.views[id] = l
	if len(c.views) < c.size {
		return
	}
	var first *cluster.Leader
	for _, v := range c.views {
		if v == nil {
			return
		}
		if first == nil {
			first = v
		} else if !first.Same(v) {
			return
		}
	}
	select {
	case <-c.agreed:
	default:
		close(c.agreed)
	}
}

func (m *member) poked() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

func (m *member) record() cluster.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.cfg.Node.Priority
	role := "standby"
	if m.state == cluster.StateLeader {
		role = "leader"
	}
	r := cluster.Member{Cluster: m.cfg.Cluster, NodeID: m.cfg.Node.ID, Host: m.cfg.Node.Host, State: m.state, Role: role,
		Health: "healthy", Epoch: m.epoch, Since: m.since, Connected: true, ZKConnected: true, Version: "scale",
		Instance: m.instance, Priority: &p}
	if m.pos > 0 {
		pos := m.pos
		r.Position, r.PositionAt = &pos, time.Now().UTC()
	}
	return r
}

func (m *member) setState(state string, epoch int64) {
	m.mu.Lock()
	m.state, m.since = state, time.Now().UTC()
	if epoch != 0 {
		m.epoch = epoch
	}
	m.mu.Unlock()
	m.poked()
}

// run runs the member until ctx ends.
func (m *member) run(ctx context.Context) {
	var wg sync.WaitGroup
	goWatch := func(f func(ctx context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = f(ctx)
				sleep(ctx, time.Second)
			}
		}()
	}
	s := m.be.store
	goWatch(func(ctx context.Context) error { return s.WatchFailover(ctx, func(*cluster.FailoverRequest) {}) })
	goWatch(func(ctx context.Context) error { return s.WatchPause(ctx, func(*cluster.Pause) {}) })
	// The daemon's one leader watch, which its controller and its admin
	// API's leader view share (cmd/failoverd's leaderFeed).
	goWatch(func(ctx context.Context) error {
		return s.WatchLeader(ctx, func(l *cluster.Leader) { m.cl.set(m.cfg.Node.ID, l) })
	})
	// The view's freshness is proved on demand (a Fresh when GET
	// /v1/leader is asked and the last one is older than a poll): nobody
	// asks here, so no Fresh is sent, as in an idle daemon.
	joined := make(chan struct{})
	var floor atomic.Int64
	wg.Add(1)
	go func() { // the position reader: the record again when it moved
		defer wg.Done()
		for ctx.Err() == nil {
			sleep(ctx, time.Second)
			if busy.Load() {
				m.moved()
				m.poked()
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.publish(ctx, joined, &floor)
	}()
	select {
	case <-joined:
	case <-ctx.Done():
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			err := m.be.elector.Campaign(ctx, func(tctx context.Context, t cluster.Term) { m.lead(ctx, tctx, t, floor.Load()) })
			if err != nil && ctx.Err() == nil {
				m.st.fail(fmt.Errorf("campaign: %w", err))
				sleep(ctx, time.Second)
			}
		}
	}()
	wg.Wait()
}

// publish is the controller's publishMembers without the busy states.
func (m *member) publish(ctx context.Context, joined chan<- struct{}, floor *atomic.Int64) {
	home := ""
	var remembered time.Time
	first := true
	for ctx.Err() == nil {
		changed := m.be.store.SessionChanged()
		err := m.be.store.PublishMember(ctx, m.record())
		if err == nil {
			var rec cluster.ClusterRecord
			rec, err = m.be.store.CheckJoin(ctx, config.ModeFair, home)
			if err == nil {
				home = rec.ID
				floor.Store(rec.EpochFloor)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.st.fail(err)
			sleep(ctx, time.Second)
			continue
		}
		if first {
			first = false
			close(joined)
		}
		if time.Since(remembered) >= cluster.RememberEvery {
			r := m.record()
			if err := m.be.store.RememberMember(ctx, cluster.KnownMember{NodeID: r.NodeID, Host: r.Host, Instance: r.Instance, LastSeen: time.Now().UTC()}); err == nil {
				remembered = time.Now()
			} else if ctx.Err() == nil {
				m.st.fail(err)
			}
		}
		select {
		case <-ctx.Done():
		case <-m.poke:
			sleep(ctx, 25*time.Millisecond)
		case <-changed:
		case <-time.After(30 * time.Second):
		}
	}
}

// lead holds one term: the breadcrumb through the term, the record as
// leader, the member watch, and the lease margin sampled until the term
// ends.
func (m *member) lead(runCtx, ctx context.Context, t cluster.Term, floor int64) {
	m.st.wins.Add(1)
	epoch := t.Epoch() + floor
	defer func() {
		if ctx.Err() != nil && runCtx.Err() == nil {
			m.st.termsLost.Add(1)
			m.cl.lost.Add(1)
			m.st.fail(fmt.Errorf("%s lost its term %d: %v", m.cfg.Node.ID, epoch, context.Cause(ctx)))
		}
		m.setState("standby", 0)
	}()
	_, rev, err := t.ReadBreadcrumb(ctx)
	if err != nil && !errors.Is(err, breadcrumb.ErrAbsent) {
		var ce *breadcrumb.CorruptError
		if !errors.As(err, &ce) {
			m.st.fail(fmt.Errorf("reading the breadcrumb: %w", err))
			return
		}
	}
	now := time.Now().UTC()
	if _, err := t.WriteBreadcrumb(ctx, breadcrumb.Record{Version: breadcrumb.Version, NodeID: m.cfg.Node.ID, Host: m.cfg.Node.Host,
		Epoch: epoch, Since: now, Instance: m.instance}, rev); err != nil {
		if ctx.Err() == nil {
			m.st.fail(fmt.Errorf("writing the breadcrumb: %w", err))
		}
		return
	}
	m.setState(cluster.StateLeader, epoch)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			_ = m.be.store.WatchMembers(ctx, func([]cluster.Member) {})
			sleep(ctx, time.Second)
		}
	}()
	tk := time.NewTicker(250 * time.Millisecond)
	defer tk.Stop()
	var posAt time.Time
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tk.C:
			if exp, err := t.Expiry(); err == nil {
				m.st.margin(time.Until(exp))
			}
			if busy.Load() && time.Since(posAt) >= time.Second {
				posAt = time.Now()
				m.mu.Lock()
				pos := m.pos
				m.mu.Unlock()
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := t.WriteLeaderPosition(wctx, cluster.LeaderPosition{NodeID: m.cfg.Node.ID, Epoch: epoch, Position: pos, At: time.Now().UTC()})
				cancel()
				if err != nil && ctx.Err() == nil {
					m.st.fail(fmt.Errorf("writing the leader position: %w", err))
				}
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
