package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/internal/proc"
)

// FuzzLoadConfig checks that Parse never panics, that a config that
// validates still validates, unchanged, once marshalled and parsed again,
// that it names the one backend this build runs (zookeeper, with no etcd
// block), and that the daemon can derive everything it needs from it
// without a panic or an overflow (see derived).
func FuzzLoadConfig(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	ref, _ := filepath.Glob("../configs/*.yaml")
	for _, p := range append(seeds, ref...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("cluster: [a, {b: c}]\n"))
	// A lease whose renewal ticker would be 0.
	minimal, err := os.ReadFile("testdata/minimal.good.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, extra := range []string{"election: {lease: 3ns}\n", "election: {lease: 200ms}\n", "election: {lease: 2562047h}\n"} {
		f.Add(append(bytes.Clone(minimal), extra...))
	}
	// A session so long that 2/3 of it overflows.
	f.Add(bytes.Replace(minimal, []byte(`["127.0.0.1:2181"]}`), []byte(`["127.0.0.1:2181"], session_timeout: 2562047h}`), 1))
	f.Add([]byte("&a [*a]"))
	// The coordination backend: refused, unknown, and blocks missing or extra.
	for _, extra := range []string{
		"coordination: {backend: etcd}\netcd: {endpoints: [\"http://127.0.0.1:2379\"], lease_ttl: 5s, tls: {ca_file: ca.pem}}\n",
		"coordination: {backend: \"\"}\n",
		"coordination: {backend: ~}\netcd:\n",
	} {
		f.Add(append(bytes.Clone(minimal), extra...))
	}
	f.Add(bytes.Replace(minimal, []byte("zookeeper: {servers: [\"127.0.0.1:2181\"]}\n"), []byte("coordination: {backend: zookeeper}\n"), 1))

	opts := LoadOptions{SkipFileChecks: true} // the file system is not under test
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := opts.Parse(data, "")
		if err != nil {
			return
		}
		if cfg.Coordination.Backend != BackendZooKeeper || cfg.Etcd != nil {
			t.Fatalf("valid config with backend %q and etcd block %+v; this build runs only %s", cfg.Coordination.Backend, cfg.Etcd, BackendZooKeeper)
		}
		derived(t, cfg)
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal of a valid config: %v", err)
		}
		cfg2, err := opts.Parse(out, "")
		if err != nil {
			t.Fatalf("valid config does not validate once marshalled: %v\ninput:\n%s\nmarshalled:\n%s", err, data, out)
		}
		out2, err := yaml.Marshal(cfg2)
		if err != nil {
			t.Fatalf("Marshal of the reparsed config: %v", err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("marshal, parse, marshal changed the config:\n%s\nthen:\n%s", out, out2)
		}
	})
}

// derived does with a valid config what the daemon does with it: the lease
// and its renewal ticker (for the configured session timeout and for any
// timeout ZooKeeper may grant that still fits the lease), the health check
// ticker, the hooks' and fencers' deadlines, and the breadcrumb this node
// writes. Nothing that validated may panic or overflow there.
func derived(t *testing.T, cfg *Config) {
	t.Helper()
	session := cfg.ZooKeeper.SessionTimeout.Std()
	tm, err := zkTiming(cfg, session)
	switch {
	case err != nil:
		t.Fatalf("validated, but the lease does not fit: %v", err)
	case tm.Lease < MinLease || tm.Renew <= 0:
		t.Fatalf("lease %v, renew interval %v", tm.Lease, tm.Renew)
	case tm.Lease+tm.Budget+tm.Margin > session:
		t.Fatalf("lease %v + budget %v + margin does not fit session %v", tm.Lease, tm.Budget, session)
	}
	ticker(t, "lease renewal", tm.Renew)
	timer(t, "lease", tm.Lease)
	// A server may grant a different timeout: the timing follows it or
	// refuses it, without panicking.
	for _, granted := range []time.Duration{session / 2, session * 2, MinSessionTimeout} {
		if tm, err := zkTiming(cfg, granted); err == nil && (tm.Lease <= 0 || tm.Renew <= 0) {
			t.Fatalf("timing %+v for a granted timeout of %v", tm, granted)
		}
	}

	ticker(t, "health.interval", cfg.Health.Interval.Std())
	timer(t, "health.timeout", cfg.Health.Timeout.Std())
	timer(t, "node.shutdown_timeout", cfg.Node.ShutdownTimeout.Std())
	// The daemon gives both hooks controller.KillGrace.
	timer(t, "promote timeout plus kill grace", proc.MaxDuration(cfg.Service.Promote.Timeout.Std(), controller.KillGrace))
	timer(t, "demote timeout plus kill grace", proc.MaxDuration(cfg.Service.Demote.Timeout.Std(), controller.KillGrace))
	timer(t, "graceful demote timeout plus kill grace", proc.MaxDuration(cfg.Service.Demote.Graceful(), controller.KillGrace))
	for i, m := range cfg.Fencing.Methods {
		switch {
		// 0 leaves the rpc timeout and the ssh connect timeout to fencer's
		// defaults.
		case m.RPC != nil:
			if m.RPC.Timeout != 0 {
				timer(t, fmt.Sprintf("fencing.methods[%d].rpc.timeout", i), m.RPC.Timeout.Std())
			}
		case m.SSH != nil:
			if m.SSH.ConnectTimeout != 0 {
				timer(t, fmt.Sprintf("fencing.methods[%d].ssh.connect_timeout", i), m.SSH.ConnectTimeout.Std())
			}
			timer(t, fmt.Sprintf("fencing.methods[%d].ssh.timeout", i), m.SSH.Timeout.Std())
		case m.Shell != nil:
			timer(t, fmt.Sprintf("fencing.methods[%d].shell.timeout plus kill grace", i), proc.MaxDuration(m.Shell.Timeout.Std(), 0)) // fencer.Shell.StepTimeout
		}
	}

	// The breadcrumb this node would write must be one every node reads.
	rec := breadcrumb.Record{NodeID: cfg.Node.ID, Host: cfg.Node.Host, AdminURL: cfg.AdminURL(), Epoch: 1, Since: time.Unix(0, 0).UTC()}
	b, err := breadcrumb.Encode(rec)
	if err != nil {
		t.Fatalf("a valid config gives a breadcrumb that does not encode: %v", err)
	}
	if _, err := breadcrumb.Decode(b); err != nil {
		t.Fatalf("a valid config gives a breadcrumb other nodes refuse: %v", err)
	}
}

// ticker makes a ticker of d, as the daemon does; it panics on d <= 0.
func ticker(t *testing.T, what string, d time.Duration) {
	t.Helper()
	if d <= 0 {
		t.Fatalf("%s: ticker of %v", what, d)
	}
	time.NewTicker(d).Stop()
}

// timer checks a timeout that becomes a timer or deadline: positive (no
// overflow) and at most a day past MaxDuration.
func timer(t *testing.T, what string, d time.Duration) {
	t.Helper()
	if d <= 0 || d > MaxDuration+24*time.Hour {
		t.Fatalf("%s: timer of %v", what, d)
	}
	time.NewTimer(d).Stop()
}
