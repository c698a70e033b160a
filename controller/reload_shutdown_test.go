package controller_test

import (
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/controller/controllertest"
)

// A reload that sets no ShutdownTimeout derives the default from the new
// graceful demote timeout, as New does: one computed at start from a
// shorter graceful timeout (30s here) would kill a raised graceful
// demote (60s) at the next stop.
func TestReloadRecomputesTheDefaultShutdownTimeout(t *testing.T) {
	test(t, func(t *testing.T, w *controllertest.World) {
		a := leader(t, w, "a", gracefulTimeout(5*time.Second))
		if err := a.reload(func(c *controller.Config) { c.GracefulDemoteTimeout = time.Minute }); err != nil {
			t.Fatal(err)
		}
		a.hooks.On("demote", controllertest.Result{Take: 40 * time.Second})
		stopped := time.Now()
		if err := a.stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		if d := lastDemote(t, a); d.Err != nil || d.End.Sub(stopped) < 40*time.Second {
			t.Errorf("a's graceful demote ended at +%v with %v; want its 40s run, within the raised graceful timeout", d.End.Sub(stopped), d.Err)
		}
	})
}
