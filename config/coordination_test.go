package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// minimalWith is testdata/minimal.good.yaml with its zookeeper line
// replaced by zookeeper (nil: kept) and extra (top-level keys) appended.
func minimalWith(t *testing.T, zookeeper *string, extra string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/minimal.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if zookeeper != nil {
		const line = "zookeeper: {servers: [\"127.0.0.1:2181\"]}\n"
		if !bytes.Contains(data, []byte(line)) {
			t.Fatalf("testdata/minimal.good.yaml has no line %q", line)
		}
		data = bytes.Replace(data, []byte(line), []byte(*zookeeper), 1)
	}
	return append(data, extra...)
}

// An existing config, written before the coordination block, loads exactly
// as it does with the backend chosen explicitly: zookeeper, no etcd block.
func TestBackendAbsentIsZooKeeper(t *testing.T) {
	const path = "../examples/cluster/node-a.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("coordination")) {
		t.Fatalf("%s sets coordination; the test needs a config without it", path)
	}
	opts := LoadOptions{SkipFileChecks: true}
	base, err := opts.Parse(data, path)
	if err != nil {
		t.Fatal(err)
	}
	if base.Coordination.Backend != BackendZooKeeper || base.Etcd != nil {
		t.Fatalf("backend %q, etcd %+v; want %q and no etcd block", base.Coordination.Backend, base.Etcd, BackendZooKeeper)
	}
	for _, extra := range []string{
		"coordination: {backend: zookeeper}\n",
		"coordination: {backend: ~}\n",
		"coordination: {}\n",
		"coordination:\n",
	} {
		cfg, err := opts.Parse(append(bytes.Clone(data), extra...), path)
		if err != nil {
			t.Errorf("with %q: %v", extra, err)
			continue
		}
		if !reflect.DeepEqual(cfg, base) {
			a, _ := yaml.Marshal(base)
			b, _ := yaml.Marshal(cfg)
			t.Errorf("with %q the config differs:\n%s\nwithout:\n%s", extra, b, a)
		}
	}

	// The default is the zookeeper backend for a Config built in Go too.
	if d := Default(); d.Coordination.Backend != BackendZooKeeper || DefaultBackend != BackendZooKeeper {
		t.Errorf("Default().Coordination.Backend = %q, DefaultBackend = %q; want %q", d.Coordination.Backend, DefaultBackend, BackendZooKeeper)
	}
}

func TestBackendZooKeeperExplicit(t *testing.T) {
	got := mustLoad(t, "testdata/backend_zookeeper.good.yaml")
	want := mustLoad(t, "testdata/minimal.good.yaml")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("explicit backend: %+v\nwant the minimal config: %+v", got, want)
	}
	if got.Coordination.Backend != BackendZooKeeper {
		t.Errorf("backend %q, want %q", got.Coordination.Backend, BackendZooKeeper)
	}
}

func TestBackendErrors(t *testing.T) {
	none := ""
	empty := "zookeeper:\n"
	etcdBlock := "etcd: {endpoints: [\"http://127.0.0.1:2379\"]}\n"
	for _, tc := range []struct {
		name      string
		zookeeper *string // the zookeeper line; nil keeps minimal's
		extra     string
		want      []string // exactly these errors, in order
	}{
		{"unknown backend", nil, "coordination: {backend: consul}\n",
			[]string{`coordination.backend: "consul" is not one of zookeeper, etcd`}},
		{"backend in capitals", nil, "coordination: {backend: ZooKeeper}\n",
			[]string{`coordination.backend: "ZooKeeper" is not one of zookeeper`}},
		{"empty backend", nil, "coordination: {backend: \"\"}\n",
			[]string{`coordination.backend: "" is not one of zookeeper`}},
		{"unknown backend, no blocks", &none, "coordination: {backend: consul}\n",
			[]string{`coordination.backend: "consul" is not one of zookeeper`}},
		{"missing etcd block", &none, "coordination: {backend: etcd}\n",
			[]string{"etcd: missing: coordination.backend is etcd"}},
		{"extra zookeeper block", nil, "coordination: {backend: etcd}\n" + etcdBlock,
			[]string{"zookeeper: set, but coordination.backend is etcd (remove the block or change the backend)"}},
		{"empty etcd block", &none, "coordination: {backend: etcd}\netcd:\n",
			[]string{"etcd.endpoints: required: list the cluster's client URLs"}},
		{"election.lease with etcd", &none, "coordination: {backend: etcd}\n" + etcdBlock + "election: {lease: 2s}\n",
			[]string{"election.lease: applies to the zookeeper backend only"}},
		{"missing zookeeper block", &none, "coordination: {backend: zookeeper}\n",
			[]string{"zookeeper: missing: coordination.backend is zookeeper"}},
		{"missing zookeeper block, default backend", &none, "",
			[]string{"zookeeper: missing: coordination.backend is zookeeper (the default)"}},
		{"missing zookeeper block, null backend", &none, "coordination: {backend: ~}\n",
			[]string{"zookeeper: missing: coordination.backend is zookeeper (the default)"}},
		{"empty zookeeper block is a block", &empty, "",
			[]string{"zookeeper.servers: required: list the ensemble as host:port"}},
		{"extra etcd block", nil, etcdBlock,
			[]string{"etcd: set, but coordination.backend is zookeeper (remove the block or change the backend)"}},
		{"extra empty etcd block", nil, "coordination: {backend: zookeeper}\netcd:\n",
			[]string{"etcd: set, but coordination.backend is zookeeper (remove the block or change the backend)"}},
		{"extra etcd block, {}", nil, "etcd: {}\n",
			[]string{"etcd: set, but coordination.backend is zookeeper (remove the block or change the backend)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := (LoadOptions{SkipFileChecks: true}).Parse(minimalWith(t, tc.zookeeper, tc.extra), "")
			if err == nil {
				t.Fatalf("Parse = %+v, nil; want errors %q", cfg, tc.want)
			}
			checkErrors(t, fieldErrors(t, err), tc.want)
		})
	}
}

// Every coordination problem is listed beside the others, each with its
// YAML path; the etcd block's keys all parse.
func TestBackendFiles(t *testing.T) {
	for _, tc := range []struct {
		file  string
		want  []string
		paths []string
	}{
		{"backend_blocks", []string{
			"zookeeper: missing: coordination.backend is zookeeper",
			"etcd: set, but coordination.backend is zookeeper (remove the block or change the backend)",
			`log.level: "loud" is not one of debug, info, warn, error`,
		}, []string{"zookeeper", "etcd", "log.level"}},
		{"backend_etcd", []string{
			`etcd.endpoints[1]: "etcd2" is not host:port`,
			`etcd.endpoints[2]: "http://etcd3:2379" is plain http, but etcd.tls is set: use https://`,
			`etcd.endpoints[3]: "https://etcd1:2379" repeats etcd.endpoints[0]`,
			"etcd.endpoints: mixes http and https endpoints",
			`etcd.prefix: "failoverd/" must be absolute`,
			"etcd.lease_ttl: 1.5s is shorter than etcd grants",
			"etcd.dial_timeout: must be > 0",
			"etcd.tls.ca_file: file not found: ",
			"etcd.tls.cert_file: required with etcd.tls.key_file",
			"etcd.password_file: required with etcd.username",
			"election.lease: applies to the zookeeper backend only",
		}, []string{"etcd.endpoints[1]", "etcd.endpoints[2]", "etcd.endpoints[3]", "etcd.endpoints", "etcd.prefix", "etcd.lease_ttl",
			"etcd.dial_timeout", "etcd.tls.ca_file", "etcd.tls.cert_file", "etcd.password_file", "election.lease"}},
		{"backend_unknown", []string{`coordination.backend: "consul" is not one of zookeeper`}, []string{"coordination.backend"}},
		{"etcd_unknown_key", []string{
			"coordination.backnd: unknown key; did you mean backend? (line 4)",
			`etcd.endpoints: want a list of strings, got "http://127.0.0.1:2379" (line 7)`,
			"etcd.prefx: unknown key; did you mean prefix? (line 8)",
			`etcd.lease_ttl: invalid duration "5": want a number with a unit, like "5s" or "250ms" (line 9)`,
			"etcd.tls.ca: unknown key; known keys: ca_file, cert_file, key_file (line 10)",
		}, []string{"coordination.backnd", "etcd.endpoints", "etcd.prefx", "etcd.lease_ttl", "etcd.tls.ca"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file+".bad.yaml")
			_, err := Load(path)
			if err == nil {
				t.Fatalf("Load(%q) = nil error; want %q", path, tc.want)
			}
			errs := fieldErrors(t, err)
			checkErrors(t, errs, tc.want)
			for i, p := range tc.paths {
				if i < len(errs) && errs[i].Path != p {
					t.Errorf("error %d has path %q, want %q", i, errs[i].Path, p)
				}
			}
		})
	}
}

// The etcd block gets its defaults, and its file names are taken relative
// to the config's directory, as every other block's.
func TestEtcdDefaultsAndPaths(t *testing.T) {
	cfg := Default()
	cfg.Etcd = &Etcd{
		Endpoints:    []string{"http://127.0.0.1:2379"},
		TLS:          &EtcdTLS{CAFile: "ca.pem", CertFile: "/abs/etcd.crt", KeyFile: "etcd.key"},
		PasswordFile: "secrets/etcd.password",
	}
	cfg.resolvePaths("/etc/failoverd")
	cfg.applyDefaults()
	want := &Etcd{
		Endpoints:    []string{"http://127.0.0.1:2379"},
		Prefix:       DefaultEtcdPrefix,
		LeaseTTL:     Duration(5 * time.Second),
		TLS:          &EtcdTLS{CAFile: "/etc/failoverd/ca.pem", CertFile: "/abs/etcd.crt", KeyFile: "/etc/failoverd/etcd.key"},
		PasswordFile: "/etc/failoverd/secrets/etcd.password",
	}
	if !reflect.DeepEqual(cfg.Etcd, want) {
		t.Errorf("etcd block %+v (tls %+v)\nwant %+v (tls %+v)", cfg.Etcd, cfg.Etcd.TLS, want, want.TLS)
	}
	if DefaultEtcdPrefix != "/failoverd" {
		t.Errorf("DefaultEtcdPrefix = %q, want /failoverd", DefaultEtcdPrefix)
	}

	// Set values are kept.
	cfg.Etcd = &Etcd{Prefix: "/ha", LeaseTTL: Duration(time.Second)}
	cfg.applyDefaults()
	if cfg.Etcd.Prefix != "/ha" || cfg.Etcd.LeaseTTL != Duration(time.Second) {
		t.Errorf("etcd block %+v; want prefix /ha and lease_ttl 1s kept", cfg.Etcd)
	}
}

// Validate applies the coordination checks to a Config built in Go: its
// zookeeper block counts as missing while it holds Default's values.
func TestValidateBuiltConfigCoordination(t *testing.T) {
	build := func() *Config {
		cfg := Default()
		cfg.Cluster, cfg.Node.ID, cfg.Node.Host = "c", "n", "h"
		cfg.Health.TCP = &TCPCheck{Address: "127.0.0.1:1"}
		cfg.Service.Promote.Command = []string{"promote"}
		cfg.Service.Demote.Command = []string{"demote"}
		cfg.Fencing.AllowNone = true
		return cfg
	}
	cfg := build()
	checkErrors(t, fieldErrors(t, cfg.Validate()), []string{"zookeeper: missing: coordination.backend is zookeeper"})
	if strings.Contains(cfg.Validate().Error(), "(the default)") {
		t.Errorf("a Config built in Go has its backend set; got %v", cfg.Validate())
	}

	cfg.ZooKeeper.Servers = []string{"z:2181"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	cfg.Etcd = &Etcd{}
	checkErrors(t, fieldErrors(t, cfg.Validate()), []string{"etcd: set, but coordination.backend is zookeeper"})

	cfg = build()
	cfg.Coordination.Backend = BackendEtcd
	checkErrors(t, fieldErrors(t, cfg.Validate()), []string{"etcd: missing: coordination.backend is etcd"})
	cfg.Etcd = &Etcd{Endpoints: []string{"http://127.0.0.1:2379"}, Prefix: DefaultEtcdPrefix, LeaseTTL: Duration(DefaultEtcdLeaseTTL)}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() with an etcd block = %v, want nil", err)
	}
}
