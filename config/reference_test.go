package config

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/healthcheck"
)

// referenceDefaults is every key configs/failoverd.yaml sets to its
// default, with the default as the code has it and the package that owns
// it. A key whose default lives outside config (config keeps 0 for unset
// and the package applies its own) must say so in its comment, naming
// the package, so that a reader knows where to look and the default is
// defined once.
func referenceDefaults() []struct{ key, want, owner string } {
	d := Default()
	return []struct{ key, want, owner string }{
		{"node.shutdown_timeout", d.Node.ShutdownTimeout.String(), "config"},
		{"node.state_dir", d.Node.StateDir, "config"},
		{"node.priority", strconv.Itoa(d.Node.Priority), "config"},
		{"node.admin.listen", d.Node.Admin.Listen, "config"},
		{"coordination.backend", d.Coordination.Backend, "config"},
		{"zookeeper.root", d.ZooKeeper.Root, "config"},
		{"zookeeper.session_timeout", d.ZooKeeper.SessionTimeout.String(), "config"},
		{"zookeeper.tick_time", d.ZooKeeper.TickTime.String(), "config"},
		{"zookeeper.auth.scheme", AuthSchemeDigest, "config"},
		{"election.mode", d.Election.Mode, "config"},
		{"election.lease", d.Election.Lease.String(), "cluster/zkcluster/lease"},
		{"election.warm_standby", strconv.FormatBool(d.Election.WarmStandby), "config"},
		{"election.failover_cooldown", d.Election.FailoverCooldown.String(), "config"},
		{"election.preempt_after", d.Election.PreemptAfter.String(), "config"},
		{"election.end_own_term_on_restart", strconv.FormatBool(d.Election.EndOwnTermOnRestart), "config"},
		{"election.take_over_at_deadline", strconv.FormatBool(d.Election.TakeOverAtDeadline), "config"},
		{"election.fence_first", strconv.FormatBool(d.Election.FenceFirst), "config"},
		{"election.suspect_after", d.Election.SuspectAfter.String(), "config"},
		{"election.renew_interval", d.Election.RenewInterval.String(), "cluster/zkcluster/lease"},
		{"health.interval", d.Health.Interval.String(), "config"},
		{"health.timeout", d.Health.Timeout.String(), "config"},
		{"health.rise", strconv.Itoa(healthcheck.DefaultRise), "healthcheck"},
		{"health.fall", strconv.Itoa(healthcheck.DefaultFall), "healthcheck"},
		{"service.promote.timeout", d.Service.Promote.Timeout.String(), "config"},
		{"service.demote.timeout", d.Service.Demote.Timeout.String(), "config"},
		{"fencing.allow_none", strconv.FormatBool(d.Fencing.AllowNone), "config"},
		{"fencing.methods.rpc.timeout", fencer.DefaultRPCTimeout.String(), "fencer"},
		{"fencing.methods.ssh.port", strconv.Itoa(fencer.DefaultSSHPort), "fencer"},
		{"fencing.methods.ssh.connect_timeout", fencer.DefaultSSHConnectTimeout.String(), "fencer"},
		{"fencing.methods.ssh.timeout", Duration(DefaultSSHTimeout).String(), "config"},
		{"fencing.methods.shell.timeout", Duration(DefaultShellFencingTimeout).String(), "config"},
		{"log.format", d.Log.Format, "config"},
		{"log.level", d.Log.Level, "config"},
	}
}

// defaultIsAnotherKey lists the keys whose comment gives as default
// another key rather than a value.
var defaultIsAnotherKey = map[string]bool{
	"fencing.methods.rpc.token_file":  true, // node.admin.token_file
	"service.demote.graceful_timeout": true, // service.demote.timeout
}

// referenceLeaf is a scalar the reference config sets, with the comment
// above its key (its words, one space apart).
type referenceLeaf struct{ value, comment string }

// referenceLeaves flattens a YAML document into dotted keys (list items
// add no element: fencing.methods.rpc.timeout).
func referenceLeaves(n *yaml.Node, prefix string, out map[string]referenceLeaf) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			referenceLeaves(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := k.Value
			if prefix != "" {
				key = prefix + "." + key
			}
			if v.Kind == yaml.ScalarNode {
				out[key] = referenceLeaf{value: v.Value, comment: ownComment(k.HeadComment)}
				continue
			}
			referenceLeaves(v, key, out)
		}
	}
}

// commentedKey matches a comment line that may show an optional key
// (which starts that key's own comment); the name must be a config key.
var commentedKey = regexp.MustCompile(`^-? *([a-z_]+):( |$)`)

// isConfigKey reports whether name is a key somewhere in the Config tree.
func isConfigKey(name string) bool {
	for _, ks := range knownKeys {
		if slices.Contains(ks, name) {
			return true
		}
	}
	return false
}

// ownComment is the part of a key's head comment that documents it: the
// lines after the last commented-out key above it, as one line of words.
func ownComment(head string) string {
	var own []string
	for _, line := range strings.Split(head, "\n") {
		text := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if m := commentedKey.FindStringSubmatch(text); m != nil && isConfigKey(m[1]) {
			own = nil
			continue
		}
		own = append(own, text)
	}
	return strings.Join(strings.Fields(strings.Join(own, " ")), " ")
}

// TestReferenceShowsTheDefaults loads configs/failoverd.yaml and checks
// that every default it shows is the one the code applies, and that a
// default owned by another package says which.
func TestReferenceShowsTheDefaults(t *testing.T) {
	data, err := os.ReadFile("../configs/failoverd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	leaves := map[string]referenceLeaf{}
	referenceLeaves(&doc, "", leaves)
	known := map[string]bool{}
	for _, d := range referenceDefaults() {
		known[d.key] = true
		l, ok := leaves[d.key]
		if !ok {
			t.Errorf("configs/failoverd.yaml does not set %s (default %s)", d.key, d.want)
			continue
		}
		if l.value != d.want {
			t.Errorf("configs/failoverd.yaml sets %s: %s, but its default (%s) is %s", d.key, l.value, d.owner, d.want)
		}
		if !strings.Contains(l.comment, "Default") {
			t.Errorf("configs/failoverd.yaml: the comment of %s does not give its default", d.key)
		}
		if d.owner != "config" && !strings.Contains(l.comment, "package "+d.owner) {
			t.Errorf("configs/failoverd.yaml: the comment of %s does not say that its default lives in package %s", d.key, d.owner)
		}
	}
	for key, l := range leaves {
		if strings.Contains(l.comment, "Default ") && !known[key] && !defaultIsAnotherKey[key] {
			t.Errorf("configs/failoverd.yaml gives a default for %s (%q); add it to referenceDefaults with the code's value", key, l.value)
		}
	}
}

// The reference config's commented etcd block, uncommented in place of the
// zookeeper block with backend etcd, is a valid config.
func TestReferenceEtcdBlockValidates(t *testing.T) {
	data, err := os.ReadFile("../configs/failoverd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	skipping, inEtcd := false, false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case line == "zookeeper:":
			skipping = true
			continue
		case skipping && (line == "" || strings.HasPrefix(line, " ")):
			if line == "" {
				skipping = false
			}
			continue
		case line == "# etcd:":
			inEtcd = true
			out = append(out, "etcd:")
			continue
		case inEtcd && strings.HasPrefix(line, "#   "):
			out = append(out, strings.TrimPrefix(line, "# "))
			continue
		case inEtcd:
			inEtcd = false
		}
		out = append(out, strings.Replace(line, "backend: zookeeper", "backend: etcd", 1))
	}
	cfg, err := (LoadOptions{SkipFileChecks: true}).Parse([]byte(strings.Join(out, "\n")), "")
	if err != nil {
		t.Fatalf("the reference config on etcd: %v", err)
	}
	if cfg.Coordination.Backend != BackendEtcd || cfg.Etcd == nil || len(cfg.Etcd.Endpoints) != 3 || cfg.Etcd.Username != "failoverd" ||
		cfg.Etcd.TLS == nil || cfg.Etcd.TLS.KeyFile != "/etc/failoverd/etcd.key" || cfg.Etcd.LeaseTTL.Std() != DefaultEtcdLeaseTTL {
		t.Errorf("etcd block %+v", cfg.Etcd)
	}
}
