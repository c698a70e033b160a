package fencer

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/failoverd/failoverd/internal/proc"
)

// Shell fences by running a local command, for anything failoverd has no
// built-in method for (a PDU, a cloud API, a storage array).
//
// The command is run from Argv, never through a shell, so target data can
// never be interpreted as shell syntax. It learns about the target only from
// its environment:
//
//	FAILOVERD_TARGET_ID         node id of the node to fence
//	FAILOVERD_TARGET_HOST       host it runs on
//	FAILOVERD_TARGET_ADMIN_URL  its admin API base URL (may be empty)
//	FAILOVERD_TARGET_EPOCH      fencing token of its leadership
//	FAILOVERD_TARGET_ADDRESS    its node.service_address (may be empty)
//	FAILOVERD_CLUSTER           our cluster name
//	FAILOVERD_NODE_ID           our own node id
//
// Exit status 0 means the target is fenced: it can no longer act as leader.
// Any other status, a command that cannot be started, or one still running at
// the timeout means it is not. stdin is /dev/null; stdout and stderr are
// logged line by line, and their tail is part of the error. On timeout the
// command's whole process group gets SIGTERM, then SIGKILL after the kill
// grace.
type Shell struct {
	cfg    ShellConfig
	logger *slog.Logger
}

// ShellConfig configures the shell fencing method.
type ShellConfig struct {
	// Argv is the command to run, without a shell. Required.
	Argv []string
	// Timeout bounds one run. Zero leaves it to the caller's context.
	Timeout time.Duration
	// KillGrace is how long the command may take to exit after SIGTERM.
	// 0: proc.DefaultKillGrace.
	KillGrace time.Duration
	Cluster   string // exported as FAILOVERD_CLUSTER
	NodeID    string // our own node id, exported as FAILOVERD_NODE_ID
}

var _ Method = (*Shell)(nil)

// NewShell validates cfg.
func NewShell(cfg ShellConfig, deps Deps) (*Shell, error) {
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return nil, errors.New("command is required")
	}
	if cfg.Timeout < 0 || cfg.KillGrace < 0 {
		return nil, errors.New("timeout and kill grace must not be negative")
	}
	return &Shell{cfg: cfg, logger: deps.logger().With("method", "shell")}, nil
}

// Name implements Method.
func (s *Shell) Name() string { return "shell" }

// StepTimeout is the time to give this method in a Chain: the command's
// timeout, plus the kill grace it gets after SIGTERM, plus the time proc.Run
// waits for it to go after SIGKILL (proc.MaxDuration). With less, the
// chain's own timeout would fire first and report a bare "timed out"
// instead of the command's error and output.
func (s *Shell) StepTimeout() time.Duration { return s.cfg.StepTimeout() }

// StepTimeout is the StepTimeout of a Shell built from c, for callers
// that need the figure without building the method (the config's
// failover arithmetic).
func (c ShellConfig) StepTimeout() time.Duration {
	return proc.MaxDuration(c.Timeout, c.KillGrace)
}

// Fence implements Method.
func (s *Shell) Fence(ctx context.Context, t Target) error {
	logger := s.logger.With("target", t.NodeID)
	_, err := proc.Run(ctx, proc.Spec{
		Argv: s.cfg.Argv,
		Env: []string{
			"FAILOVERD_TARGET_ID=" + t.NodeID,
			"FAILOVERD_TARGET_HOST=" + t.Host,
			"FAILOVERD_TARGET_ADMIN_URL=" + t.AdminURL,
			"FAILOVERD_TARGET_EPOCH=" + strconv.FormatInt(t.Epoch, 10),
			"FAILOVERD_TARGET_ADDRESS=" + t.ServiceAddress,
			"FAILOVERD_CLUSTER=" + s.cfg.Cluster,
			"FAILOVERD_NODE_ID=" + s.cfg.NodeID,
		},
		Timeout:   s.cfg.Timeout,
		KillGrace: s.cfg.KillGrace,
		OnLine: func(stream, line string) {
			logger.Info("fence command output", "stream", stream, "line", line)
		},
	})
	return err // proc's errors name the command, its status and output tail
}
