// Package metrics backs failoverd's reporting interfaces (controller.Metrics,
// fencer.Metrics, healthcheck.Metrics) with Prometheus collectors.
//
// Everything is registered on the Registerer given to New, never on
// prometheus.DefaultRegisterer, so tests and several daemons in one process
// do not collide. Every metric name starts with "failoverd_".
//
// Every series whose label values are known up front (states, health, hook
// and fencing results per method, leadership-loss reasons) is created at
// zero by New, so that an alert on increase(...{result="failure"}[5m]) has a
// series to work on from the first scrape, and the first failure is an
// increase that rate() sees rather than a new series. A label value outside
// those lists still works; its series appears on first use.
package metrics

import (
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/healthcheck"
)

const namespace = "failoverd"

// Result label values, as the reporting interfaces document them.
const (
	resultSuccess = "success"
	resultFailure = "failure"
	resultTimeout = "timeout"
)

// FenceMethods are the fencing methods' names (fencer.Method.Name), whose
// fence_attempts_total and fence_duration_seconds series New creates.
var FenceMethods = []string{"rpc", "ssh", "shell"}

// LeadershipLostReasons are the reasons the controller reports to
// LeadershipLost, whose leadership_lost_total series New creates: its own
// decisions, then what the election reported.
var LeadershipLostReasons = []string{
	"shutdown", "unhealthy", "operator_demote", "ceded", "failover_handoff",
	"hook_unkillable", "join_refused", "takeover_failed", "priority_zero", "pre_promote_veto", "paused",
	"lease_expired", "session_expired", "znode_deleted", "unknown",
}

// healthyState is healthcheck.Healthy.String(); HealthState takes strings so
// the controller can pass on what it publishes in Status.Health.
var healthyState = healthcheck.Healthy.String()

// Histogram buckets in seconds. Fencing and failover include hooks and ssh
// round trips with timeouts of tens of seconds, so they reach further than
// prometheus.DefBuckets.
var (
	fenceBuckets    = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	failoverBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
)

// Metrics holds failoverd's collectors. Its methods are safe for concurrent
// use.
type Metrics struct {
	isLeader             prometheus.Gauge
	epoch                prometheus.Gauge
	state                *prometheus.GaugeVec
	healthUp             prometheus.Gauge
	healthChecks         *prometheus.CounterVec
	healthCheckDuration  prometheus.Histogram
	electionsWon         prometheus.Counter
	leadershipLost       *prometheus.CounterVec
	fenceAttempts        *prometheus.CounterVec
	fenceDuration        *prometheus.HistogramVec
	promotions           *prometheus.CounterVec
	demotions            *prometheus.CounterVec
	failoverDuration     prometheus.Histogram
	breadcrumbUnreadable prometheus.Counter
	fencingFailed        prometheus.Counter
	followRuns           *prometheus.CounterVec
	followingEpoch       prometheus.Gauge
	hookUnkillable       *prometheus.CounterVec
	prePromoteVetoes     prometheus.Counter
	cooldownHolds        prometheus.Counter
	historyAppendFails   prometheus.Counter
	positionErrors       *prometheus.CounterVec
	promotionDeclined    *prometheus.CounterVec
	preemptions          prometheus.Counter
	configReloads        *prometheus.CounterVec
	configReloadOK       prometheus.Gauge
	configLoadedAt       prometheus.Gauge
}

var (
	_ controller.Metrics  = (*Metrics)(nil)
	_ fencer.Metrics      = (*Metrics)(nil)
	_ healthcheck.Metrics = (*Metrics)(nil)
)

// New creates failoverd's collectors and registers them, together with build
// info, Go runtime and process collectors, on reg. The gauges read from the
// controller's status at scrape time (ZooKeeper connection, lease) come from
// StatusCollector, which the daemon registers once the controller exists.
//
// Like promauto, New panics if a collector cannot be registered, which only
// happens when reg already holds failoverd's metrics.
func New(reg prometheus.Registerer, version string) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		isLeader: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "is_leader",
			Help:      "1 while this node is the promoted leader, else 0.",
		}),
		epoch: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "epoch",
			Help:      "Fencing token of this node's current or last leadership, 0 if none.",
		}),
		state: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "state",
			Help:      "1 for the controller's current state, 0 for every other state.",
		}, []string{"state"}),
		healthUp: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "health_up",
			Help:      "1 while the local service is judged healthy, else 0.",
		}),
		healthChecks: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "health_checks_total",
			Help:      "Health checks of the local service, by result (success, failure, timeout).",
		}, []string{"result"}),
		healthCheckDuration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "health_check_duration_seconds",
			Help:      "Duration of health checks of the local service.",
			Buckets:   prometheus.DefBuckets,
		}),
		electionsWon: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "elections_won_total",
			Help:      "Elections this node won; each one starts fencing and promotion.",
		}),
		leadershipLost: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "leadership_lost_total",
			Help:      "Leaderships this node lost or gave up, by reason.",
		}, []string{"reason"}),
		fenceAttempts: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "fence_attempts_total",
			Help:      "Attempts to fence a previous leader, by method and result.",
		}, []string{"method", "result"}),
		fenceDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "fence_duration_seconds",
			Help:      "Duration of fencing attempts, by method.",
			Buckets:   fenceBuckets,
		}, []string{"method"}),
		promotions: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "promotions_total",
			Help:      "Runs of the promote hook, by result.",
		}, []string{"result"}),
		demotions: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "demotions_total",
			Help:      "Runs of the demote hook, by result.",
		}, []string{"result"}),
		failoverDuration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "failover_duration_seconds",
			Help:      "Time from winning the election to the end of the promote hook, fencing included.",
			Buckets:   failoverBuckets,
		}),
		breadcrumbUnreadable: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "breadcrumb_unreadable_total",
			Help:      "Elections in which promotion was refused because the breadcrumb could not be read.",
		}),
		fencingFailed: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "fencing_failed_total",
			Help:      "Elections given up because every fencing method failed.",
		}),
		followRuns: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "follow_runs_total",
			Help:      "Runs of the follow hook, by result (success, failure, timeout); runs stopped by the daemon itself are not counted.",
		}, []string{"result"}),
		followingEpoch: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "following_epoch",
			Help:      "Epoch of the leader the follow hook last pointed the service at, 0 if none.",
		}),
		hookUnkillable: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "hook_unkillable_total",
			Help:      "Hooks still alive after SIGKILL, by hook: the node stays out of the election until the process is gone.",
		}, []string{"hook"}),
		prePromoteVetoes: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "pre_promote_vetoes_total",
			Help:      "Elections given up because the pre_promote hook failed or timed out.",
		}),
		cooldownHolds: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "cooldown_holds_total",
			Help:      "Times this leader kept leadership although unhealthy because it was within election.failover_cooldown of its automatic promotion (once per hold).",
		}),
		historyAppendFails: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "history_append_failures_total",
			Help:      "Failed attempts of a new leader to append its leadership change to the cluster history (retried a few times within the term).",
		}),
		positionErrors: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "position_errors_total",
			Help:      "Runs of the service.position command that gave no position, by reason (exit, timeout, output, unkillable); the position is unknown until the next good run.",
		}, []string{"reason"}),
		promotionDeclined: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "promotion_declined_total",
			Help:      "Elections won that promoted nothing by choice: lagging (more than election.max_lag behind), handoff_preferred (a better candidate was asked to take over).",
		}, []string{"reason"}),
		preemptions: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "preemptions_total",
			Help:      "Handovers this leader started to a standby of a higher priority (election.preempt_after).",
		}),
		configReloads: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "config_reloads_total",
			Help:      "Config reloads (SIGHUP, failoverd reload), by result: success (applied) or failure (invalid file, a refused key, or applying failed; nothing applied).",
		}, []string{"result"}),
		configReloadOK: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "config_last_reload_successful",
			Help:      "1 when the last config reload applied (or none was tried since start), 0 when it failed: the daemon runs an older config than its file.",
		}),
		configLoadedAt: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "config_last_reload_success_timestamp_seconds",
			Help:      "Unix time the config the daemon runs was loaded (at start or by the last reload that applied).",
		}),
	}

	f.NewGauge(prometheus.GaugeOpts{
		Namespace:   namespace,
		Name:        "build_info",
		Help:        "Always 1; labels name the failoverd version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	}).Set(1)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	// A controller starts in StateInitializing and reports only the changes
	// after that.
	for _, s := range controller.AllStates {
		m.state.WithLabelValues(string(s))
	}
	m.state.WithLabelValues(string(controller.StateInitializing)).Set(1)
	for _, r := range []string{resultSuccess, resultFailure, resultTimeout} {
		m.healthChecks.WithLabelValues(r)
		m.followRuns.WithLabelValues(r)
	}
	for _, h := range []string{"promote", "demote", "follow"} {
		m.hookUnkillable.WithLabelValues(h)
	}
	for _, r := range []string{resultSuccess, resultFailure} {
		m.configReloads.WithLabelValues(r)
		m.promotions.WithLabelValues(r)
		m.demotions.WithLabelValues(r)
		for _, method := range FenceMethods {
			m.fenceAttempts.WithLabelValues(method, r)
		}
	}
	for _, method := range FenceMethods {
		m.fenceDuration.WithLabelValues(method)
	}
	for _, r := range controller.DeclineReasons {
		m.promotionDeclined.WithLabelValues(r)
	}
	for _, r := range LeadershipLostReasons {
		m.leadershipLost.WithLabelValues(r)
	}
	for _, r := range []string{controller.PositionErrExit, controller.PositionErrTimeout, controller.PositionErrOutput, controller.PositionErrUnkillable} {
		m.positionErrors.WithLabelValues(r)
	}
	return m
}

// StatusCollector exposes the gauges that are read from the controller's
// status at every scrape: failoverd_coordination_connected (and its
// deprecated duplicate failoverd_zk_connected),
// failoverd_lease_remaining_seconds, failoverd_position (absent while
// the position is unknown or no service.position is configured) and
// failoverd_standby_not_following. status is called once per scrape; it
// must be cheap and safe to call from any goroutine (controller.Status is).
func StatusCollector(status func() controller.Status) prometheus.Collector {
	return statusCollector{status: status}
}

var (
	connectedDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "coordination_connected"),
		"1 while the coordination service (ZooKeeper) is reachable, else 0.", nil, nil)
	zkConnectedDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "zk_connected"),
		"Deprecated (dropped in the next release): failoverd_coordination_connected under its earlier name.", nil, nil)
	leaseRemainingDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "lease_remaining_seconds"),
		"Time left on the leader lease before this node must demote itself, 0 when not leader.", nil, nil)
	positionDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "position"),
		"The service's replication position as service.position last printed it; absent while unknown (the command failed) or not configured. Exact up to 2^53.", nil, nil)
	notFollowingDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "standby_not_following"),
		"1 while this node is a standby that does not follow the current promoted leader (its follow hook points the service at another leader or epoch, or fails, or its position stalled while the leader's advanced; the reason is in /v1/status not_following), else 0.", nil, nil)
	pausedDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "paused"),
		"1 while the cluster is paused (maintenance mode: no automatic promotion, demotion or fencing), as this node last saw it, else 0.", nil, nil)
)

type statusCollector struct{ status func() controller.Status }

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectedDesc
	ch <- zkConnectedDesc
	ch <- leaseRemainingDesc
	ch <- positionDesc
	ch <- notFollowingDesc
	ch <- pausedDesc
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.status()
	ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, boolFloat(s.Connected))
	ch <- prometheus.MustNewConstMetric(zkConnectedDesc, prometheus.GaugeValue, boolFloat(s.Connected))
	ch <- prometheus.MustNewConstMetric(leaseRemainingDesc, prometheus.GaugeValue, s.LeaseRemaining)
	if s.Position != nil {
		ch <- prometheus.MustNewConstMetric(positionDesc, prometheus.GaugeValue, float64(*s.Position))
	}
	ch <- prometheus.MustNewConstMetric(notFollowingDesc, prometheus.GaugeValue, boolFloat(s.NotFollowing != ""))
	ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, boolFloat(s.Paused != nil))
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// StateChanged implements controller.Metrics: to becomes the only state at
// 1. A state missing from controller.AllStates leaves every series at 0
// rather than growing the label set.
func (m *Metrics) StateChanged(from, to controller.State) {
	// Setting every state, not just from and to, repairs the gauge even if
	// a report was missed or from is stale.
	for _, s := range controller.AllStates {
		m.state.WithLabelValues(string(s)).Set(boolFloat(s == to))
	}
}

// Leader implements controller.Metrics.
func (m *Metrics) Leader(isLeader bool, epoch int64) {
	m.isLeader.Set(boolFloat(isLeader))
	m.epoch.Set(float64(epoch))
}

// ElectionWon implements controller.Metrics.
func (m *Metrics) ElectionWon() { m.electionsWon.Inc() }

// LeadershipLost implements controller.Metrics.
func (m *Metrics) LeadershipLost(reason string) { m.leadershipLost.WithLabelValues(reason).Inc() }

// Promotion implements controller.Metrics.
func (m *Metrics) Promotion(result string) { m.promotions.WithLabelValues(result).Inc() }

// Demotion implements controller.Metrics.
func (m *Metrics) Demotion(result string) { m.demotions.WithLabelValues(result).Inc() }

// FailoverDuration implements controller.Metrics.
func (m *Metrics) FailoverDuration(d time.Duration) { m.failoverDuration.Observe(d.Seconds()) }

// BreadcrumbUnreadable implements controller.Metrics.
func (m *Metrics) BreadcrumbUnreadable() { m.breadcrumbUnreadable.Inc() }

// FencingFailed implements controller.Metrics.
func (m *Metrics) FencingFailed() { m.fencingFailed.Inc() }

// HookUnkillable counts a hook still alive after SIGKILL.
func (m *Metrics) HookUnkillable(hook string) { m.hookUnkillable.WithLabelValues(hook).Inc() }

// FollowRun counts a follow hook run (result success, failure or timeout).
func (m *Metrics) FollowRun(result string) { m.followRuns.WithLabelValues(result).Inc() }

// Following sets the epoch of the leader followed (0: none).
func (m *Metrics) Following(epoch int64) { m.followingEpoch.Set(float64(epoch)) }

// PrePromoteVetoed implements controller.Metrics.
func (m *Metrics) PrePromoteVetoed() { m.prePromoteVetoes.Inc() }

// CooldownHold implements controller.Metrics.
func (m *Metrics) CooldownHold() { m.cooldownHolds.Inc() }

// HistoryAppendFailed implements controller.Metrics.
func (m *Metrics) HistoryAppendFailed() { m.historyAppendFails.Inc() }

// PositionError implements controller.Metrics.
func (m *Metrics) PositionError(reason string) { m.positionErrors.WithLabelValues(reason).Inc() }

// PromotionDeclined implements controller.Metrics.
func (m *Metrics) PromotionDeclined(reason string) { m.promotionDeclined.WithLabelValues(reason).Inc() }

// Preempted implements controller.Metrics.
func (m *Metrics) Preempted() { m.preemptions.Inc() }

// ConfigLoaded records the config loaded at start, at.
func (m *Metrics) ConfigLoaded(at time.Time) {
	m.configReloadOK.Set(1)
	m.configLoadedAt.Set(float64(at.UnixNano()) / 1e9)
}

// ConfigReloaded counts a reload at at; applied says whether it applied.
func (m *Metrics) ConfigReloaded(applied bool, at time.Time) {
	if !applied {
		m.configReloads.WithLabelValues(resultFailure).Inc()
		m.configReloadOK.Set(0)
		return
	}
	m.configReloads.WithLabelValues(resultSuccess).Inc()
	m.ConfigLoaded(at)
}

// FenceAttempt implements fencer.Metrics.
func (m *Metrics) FenceAttempt(method, result string, d time.Duration) {
	m.fenceAttempts.WithLabelValues(method, result).Inc()
	m.fenceDuration.WithLabelValues(method).Observe(d.Seconds())
}

// CheckDone implements healthcheck.Metrics.
func (m *Metrics) CheckDone(result string, d time.Duration) {
	m.healthChecks.WithLabelValues(result).Inc()
	m.healthCheckDuration.Observe(d.Seconds())
}

// HealthState sets failoverd_health_up from a health state name as
// healthcheck.State.String() spells it: 1 for "healthy", 0 for anything else.
func (m *Metrics) HealthState(state string) {
	m.healthUp.Set(boolFloat(state == healthyState))
}
