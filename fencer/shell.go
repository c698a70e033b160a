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
//	FAILOVERD_CLUSTER           our cluster name
//	FAILOVERD_NODE_ID           our own node id
//
// Exit status 0 means the target is fenced: it can no longer act as leader.
// Any other status, a command that cannot be started, or one still running at
// the timeout means it is not. stdin is /dev/null; stdout and stderr are
// logged line by line, and their tail is part of the error. On timeout the
// command's whole process group gets SIGTERM, then SIGKILL after KillGrace.
type Shell struct {
	Argv []string
	// Timeout bounds one run. Keep it below the chain step's timeout so
	// that the command's own error, with its output, is what gets reported.
	// Zero leaves it to the caller's context.
	Timeout time.Duration
	// KillGrace is how long the command may take to exit after SIGTERM.
	// Default proc.DefaultKillGrace.
	KillGrace time.Duration
	Cluster   string // exported as FAILOVERD_CLUSTER
	NodeID    string // our own node id, exported as FAILOVERD_NODE_ID
	Logger    *slog.Logger
}

var _ Method = (*Shell)(nil)

// Name implements Method.
func (s *Shell) Name() string { return "shell" }

// Fence implements Method.
func (s *Shell) Fence(ctx context.Context, t Target) error {
	if len(s.Argv) == 0 {
		return errors.New("no command configured")
	}
	logger := s.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("method", s.Name(), "target", t.NodeID)
	_, err := proc.Run(ctx, proc.Spec{
		Argv: s.Argv,
		Env: []string{
			"FAILOVERD_TARGET_ID=" + t.NodeID,
			"FAILOVERD_TARGET_HOST=" + t.Host,
			"FAILOVERD_TARGET_ADMIN_URL=" + t.AdminURL,
			"FAILOVERD_TARGET_EPOCH=" + strconv.FormatInt(t.Epoch, 10),
			"FAILOVERD_CLUSTER=" + s.Cluster,
			"FAILOVERD_NODE_ID=" + s.NodeID,
		},
		Timeout:   s.Timeout,
		KillGrace: s.KillGrace,
		OnLine: func(stream, line string) {
			logger.Info("fence command output", "stream", stream, "line", line)
		},
	})
	return err // proc's errors name the command, its status and output tail
}
