package healthcheck_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failoverd/failoverd/healthcheck"
)

// A check in progress finishes with the old checker; the next one runs the
// new checker at the new interval, and its failures (fall 1) make the
// service unhealthy.
func TestMonitorReconfigure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var oldRuns, newRuns atomic.Int32
		release := make(chan struct{})
		old := checkFunc(func(ctx context.Context) error {
			if oldRuns.Add(1) == 3 {
				<-release // the third check is in progress during Reconfigure
			}
			return nil
		})
		rec := &recorder{}
		m, err := healthcheck.New(healthcheck.Config{Interval: time.Second, Timeout: time.Minute, Rise: 2, Fall: 3},
			healthcheck.Deps{Checker: old, OnChange: rec.onChange, Metrics: rec})
		if err != nil {
			t.Fatal(err)
		}
		defer startMonitor(t, m)()
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if m.State() != healthcheck.Healthy || oldRuns.Load() != 3 {
			t.Fatalf("state %s after %d checks, want healthy and the third check running", m.State(), oldRuns.Load())
		}
		failing := checkFunc(func(ctx context.Context) error { newRuns.Add(1); return errNo })
		if err := m.Reconfigure(healthcheck.Config{Interval: 100 * time.Millisecond, Fall: 1}, failing); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if newRuns.Load() != 0 {
			t.Fatal("the new check ran while the old one was in progress")
		}
		close(release)
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		if m.State() != healthcheck.Unhealthy || newRuns.Load() == 0 {
			t.Fatalf("state %s after %d new checks, want unhealthy", m.State(), newRuns.Load())
		}
		time.Sleep(time.Second)
		if n := newRuns.Load(); n < 9 {
			t.Errorf("%d checks in about 1.1s at the new 100ms interval, want about 11", n)
		}
		if got := rec.transitions(); !slices.Equal(got, []string{"initializing>healthy", "healthy>unhealthy"}) {
			t.Errorf("transitions %v", got)
		}
		if m.Reconfigure(healthcheck.Config{}, failing) == nil || m.Reconfigure(healthcheck.Config{Interval: time.Second}, nil) == nil {
			t.Error("Reconfigure accepted a zero interval or a nil checker")
		}
	})
}
