package controller

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/internal/proc"
)

// The controller meets the outside through the small interfaces below and
// the coordination contract of package cluster: a coordination backend
// implements cluster.Elector and cluster.Records (cluster/zkcluster for
// ZooKeeper), and controller/controllertest implements all of them in
// memory for the state-machine tests.

// Elector, Warmer and Records are the coordination backend's side of the
// contract; their obligations are written on them in package cluster.
type (
	Elector = cluster.Elector
	Warmer  = cluster.Warmer
	Records = cluster.Records
)

// HookEnv is what a hook is told, besides the node.
type HookEnv struct {
	Reason   string
	Epoch    int64
	Previous *breadcrumb.Record // promote only: the leader fenced before it
	Leader   *cluster.Leader    // follow only: the leader to follow (nil: none, the no-leader run)
	// Timeout, when > 0, replaces the hook's configured timeout for this
	// run: the graceful demote's (Config.GracefulDemoteTimeout). The
	// context may still end the run earlier.
	Timeout time.Duration
}

// Hooks runs the service's promote, demote and follow hooks.
type Hooks interface {
	// Run runs "pre_promote", "promote", "demote" or "follow" and returns once it is over. reaped
	// is non-nil only with an error wrapping proc.ErrUnkillable: the hook
	// is still alive after SIGKILL, and reaped closes when it goes.
	Run(ctx context.Context, name string, env HookEnv) (reaped <-chan struct{}, err error)
}

// Fencer fences a target; *fencer.Chain implements it.
type Fencer interface {
	Fence(ctx context.Context, t fencer.Target) (method string, err error)
}

// Metrics is what the controller reports; the daemon backs it with
// Prometheus collectors (package metrics). result labels are "success" or
// "failure"; reason labels are short snake_case words.
type Metrics interface {
	StateChanged(from, to State)
	Leader(isLeader bool, epoch int64)
	ElectionWon()
	LeadershipLost(reason string)
	Promotion(result string)
	Demotion(result string)
	// FailoverDuration is the time from winning the election to the end of
	// the promote hook.
	FailoverDuration(d time.Duration)
	// BreadcrumbUnreadable counts refusals to promote over a corrupt breadcrumb.
	BreadcrumbUnreadable()
	// FencingFailed counts elections given up because fencing failed.
	FencingFailed()
	// HookUnkillable counts hooks still alive after SIGKILL.
	HookUnkillable(hook string)
	// PrePromoteVetoed counts promotions vetoed by the pre_promote hook.
	PrePromoteVetoed()
	// PromotionDeclined counts won terms that promoted nothing by choice
	// (reason "lagging" or "handoff_preferred", DeclineReasons).
	PromotionDeclined(reason string)
	// Preempted counts a leader's handovers to a standby of a higher
	// priority.
	Preempted()
	// FollowRun counts follow hook runs (result "success", "failure" or
	// "timeout").
	FollowRun(result string)
	// Following shows the epoch of the leader followed (0: none).
	Following(epoch int64)
	// CooldownHold counts the holds of an unhealthy leader within its
	// failover cooldown.
	CooldownHold()
	// HistoryAppendFailed counts failed appends to the cluster's history.
	HistoryAppendFailed()
	// PositionError counts the runs of the position command that gave no
	// position, by reason (a PositionErr* label); the position itself is
	// in Status.
	PositionError(reason string)
}

// Deps are the controller's parts. Fencer may be nil only when running
// without fencing was explicitly allowed; Logger nil discards.
type Deps struct {
	Elector Elector
	Records Records
	Hooks   Hooks
	Fencer  Fencer
	// Prover fences with the methods that prove only, for fencing first
	// (ProveOut); nil: none proves, ProveOut always refuses.
	Prover Fencer
	// Probe asks a suspected leader whether it is alive (ProveOut); nil:
	// no probe, every suspect counts as not answering.
	Probe   Prober
	Metrics Metrics
	Logger  *slog.Logger
	// Position reads the service's replication position (service.position;
	// nil: none, the member record carries no position).
	Position PositionReader
	// Home is the node's memory of the cluster it last ran in (nil: none,
	// every start is this node's first).
	Home Home
}

// Home is a node's memory, on its own disk, of the cluster record it last
// ran in and the highest epoch it led with (the daemon keeps it in
// node.state_dir). The join checks admit the node only to that record or
// to one a checked move made from it (cluster.Admit), and the node never
// leads at an epoch that is not above the one remembered.
type Home interface {
	// Load returns the record ID ("": none) and the highest epoch
	// remembered (0: none).
	Load() (id string, epoch int64)
	// Joined remembers id as the node's record; it returns once that is
	// durable.
	Joined(id string) error
	// Saw remembers epoch when it is above the one remembered.
	Saw(epoch int64) error
}

// noHome is the Home of a node that remembers nothing.
type noHome struct{}

func (noHome) Load() (string, int64) { return "", 0 }
func (noHome) Joined(string) error   { return nil }
func (noHome) Saw(int64) error       { return nil }

// Hook is a command run on promotion or demotion.
type Hook struct {
	Argv    []string
	Timeout time.Duration
	// KillGrace is how long the hook may take to exit after SIGTERM (0:
	// KillGrace). The promote's and the demote's are part of the demote
	// budget (see DemoteBudget).
	KillGrace time.Duration
}

// ProcHooks runs the configured commands with internal/proc: the
// production Hooks.
type ProcHooks struct {
	Promote, Demote, Follow Hook
	// PrePromote runs before the breadcrumb write (empty Argv: never).
	PrePromote      Hook
	Cluster, NodeID string
	Logger          *slog.Logger
}

// Run runs the hook name with the documented environment (FAILOVERD_*).
func (p ProcHooks) Run(ctx context.Context, name string, env HookEnv) (<-chan struct{}, error) {
	var h Hook
	var vars []string
	switch name {
	case "promote":
		h, vars = p.Promote, p.roleEnv("leader", env)
		vars = append(vars, previousEnv(env)...)
	case "pre_promote":
		h, vars = p.PrePromote, p.roleEnv("leader", env)
		vars = append(vars, previousEnv(env)...)
	case "follow":
		h, vars = p.Follow, followEnv(p.Cluster, p.NodeID, env)
	default:
		h, vars = p.Demote, p.roleEnv("standby", env)
	}
	if len(h.Argv) == 0 {
		return nil, nil
	}
	if env.Timeout > 0 {
		h.Timeout = env.Timeout
	}
	if h.Timeout > 0 {
		// The hook's own deadline, so that it can pace itself (a clean
		// stop first, a hard one before the daemon's SIGTERM).
		vars = append(vars, "FAILOVERD_TIMEOUT_MS="+strconv.FormatInt(h.Timeout.Milliseconds(), 10))
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("component", "controller", "hook", name)
	if name == "follow" {
		log.Info("running hook", "reason", env.Reason, "leader", leaderID(env.Leader), "leader_epoch", leaderEpoch(env.Leader))
	} else {
		log.Info("running hook", "reason", env.Reason, "epoch", env.Epoch)
	}
	res, err := proc.Run(ctx, proc.Spec{
		Argv: h.Argv, Env: vars, Timeout: h.Timeout, KillGrace: killGrace(h),
		OnLine: func(stream, line string) { log.Info("hook output", "stream", stream, "line", line) },
	})
	if err != nil {
		log.Error("hook failed", "err", err, "duration_seconds", res.Duration.Seconds())
	} else {
		log.Info("hook done", "duration_seconds", res.Duration.Seconds())
	}
	if errors.Is(err, proc.ErrUnkillable) {
		return res.Reaped, err
	}
	return nil, err
}

// roleEnv is the environment of the promote and demote hooks.
func (p ProcHooks) roleEnv(role string, env HookEnv) []string {
	return []string{
		"FAILOVERD_CLUSTER=" + p.Cluster,
		"FAILOVERD_NODE_ID=" + p.NodeID,
		"FAILOVERD_EPOCH=" + strconv.FormatInt(env.Epoch, 10),
		"FAILOVERD_ROLE=" + role,
		"FAILOVERD_REASON=" + env.Reason,
	}
}

// previousEnv describes the leader fenced before a promotion, for the
// pre_promote and promote hooks (none: no variables).
func previousEnv(env HookEnv) []string {
	prev := env.Previous
	if prev == nil || prev.NodeID == "" {
		return nil
	}
	vars := []string{"FAILOVERD_PREVIOUS_LEADER=" + prev.NodeID, "FAILOVERD_PREVIOUS_EPOCH=" + strconv.FormatInt(prev.Epoch, 10)}
	if prev.ServiceAddress != "" {
		vars = append(vars, "FAILOVERD_PREVIOUS_ADDRESS="+prev.ServiceAddress)
	}
	return vars
}

// followEnv is the follow hook's environment: the four FAILOVERD_LEADER_*
// are always set, empty in the no-leader run.
func followEnv(clusterName, nodeID string, env HookEnv) []string {
	var id, host, addr, epoch string
	if ld := env.Leader; ld != nil {
		id, host, addr, epoch = ld.NodeID, ld.Host, ld.ServiceAddress, strconv.FormatInt(ld.Epoch, 10)
	}
	return []string{
		"FAILOVERD_CLUSTER=" + clusterName,
		"FAILOVERD_NODE_ID=" + nodeID,
		"FAILOVERD_ROLE=standby",
		"FAILOVERD_REASON=" + env.Reason,
		"FAILOVERD_LEADER_ID=" + id,
		"FAILOVERD_LEADER_HOST=" + host,
		"FAILOVERD_LEADER_ADDRESS=" + addr,
		"FAILOVERD_LEADER_EPOCH=" + epoch,
	}
}
