package bench

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/clustertest"
)

func BenchmarkZZPerf(b *testing.B) {
	if os.Getenv("BENCH_PERF") == "" {
		b.Skip()
	}
	fc := footprintConfigs[1]
	c := startCluster(b, clustertest.Options{Nodes: 2, SessionTimeout: fc.session})
	for _, n := range c.Nodes {
		cfg, _ := os.ReadFile(n.Config)
		os.WriteFile(n.Config, []byte(fc.rewrite(string(cfg))), 0o644)
	}
	for _, n := range c.Nodes {
		n.Kill(syscall.SIGTERM)
		n.Start()
	}
	leader := c.ready(60 * time.Second)
	for _, n := range c.Nodes {
		role := "standby"
		if n == leader {
			role = "leader"
		}
		fmt.Printf("PID %s %d\n", role, n.Pid())
		os.WriteFile("/tmp/benchwork/pid-"+role, []byte(fmt.Sprint(n.Pid())), 0o644)
	}
	time.Sleep(envDuration("BENCH_PERF_FOR", 100*time.Second))
}
