package controller

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"time"
)

// FailpointPauseBeforeBreadcrumb names a test-only failpoint (used by
// test/e2e): when this environment variable names a file that exists as a
// leadership is about to write its breadcrumb, the controller stops there
// until the file is removed. Without the variable, or without the file,
// nothing changes.
const FailpointPauseBeforeBreadcrumb = "FAILOVERD_TEST_PAUSE_BEFORE_BREADCRUMB"

// failpointMaxPause bounds the pause, so a forgotten file cannot wedge a node.
const failpointMaxPause = 2 * time.Minute

// pauseBeforeBreadcrumb implements FailpointPauseBeforeBreadcrumb: it writes
// FILE.reached (holding the epoch), waits until FILE is gone whatever
// happens to the leadership meanwhile, and returns a context that the end
// of the leadership does not cancel. That models a write already on its way
// to ZooKeeper when the leadership is lost, which only ZooKeeper's guard (the
// check that our election znode still exists) can refuse. Without the
// failpoint it returns ctx unchanged.
func pauseBeforeBreadcrumb(ctx context.Context, log *slog.Logger, epoch int64) context.Context {
	path := os.Getenv(FailpointPauseBeforeBreadcrumb)
	if path == "" {
		return ctx
	}
	if _, err := os.Stat(path); err != nil {
		return ctx
	}
	log.Warn("test failpoint: paused before the breadcrumb write", "file", path, "epoch", epoch)
	if err := os.WriteFile(path+".reached", []byte(strconv.FormatInt(epoch, 10)), 0o644); err != nil {
		log.Warn("test failpoint: cannot write the marker", "err", err)
	}
	for deadline := time.Now().Add(failpointMaxPause); time.Now().Before(deadline); {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Warn("test failpoint: released; writing the breadcrumb", "epoch", epoch, "leadership_ended", ctx.Err() != nil)
	return context.WithoutCancel(ctx)
}
