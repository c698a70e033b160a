package chaos

import (
	"fmt"
	"os"
	"regexp"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// ReloadConfig is the operator's reload under a takeover: every daemon
// reloads (SIGHUP) its file with service.demote.timeout halved; the
// leader cedes, so a successor wins while the lower
// timeout is in force; every daemon reloads its original file, raising
// the timeout back to its start value while that term runs; then the new
// leader is cut off from the coordination service past its lease. Its
// term must still end a whole demote budget (the one the lease was sized
// for) before a successor may win, and its service stand down in time:
// stale_leader, late_stand_down and service_overlap judge it. A reload a
// daemon did not apply (its config_hash unchanged after 10s) is logged as
// config_reload ok=false and fails the run: the fault then tested nothing.
const ReloadConfig = "reload-config"

// KindConfigReload is the harness's account of one daemon's reload:
// node= step=lower|restore ok= hash=.
const KindConfigReload = "config_reload"

func init() {
	harnessKinds[KindConfigReload] = true
	noVetoKinds[ReloadConfig] = true
}

// demoteTimeoutLine is the demote hook's timeout in a clustertest config.
var demoteTimeoutLine = regexp.MustCompile(`(?m)^(  demote:\n    command: \[[^\]]*\]\n    timeout: )(\S+)$`)

// lowerDemoteTimeout returns cfg with the demote timeout halved.
func lowerDemoteTimeout(cfg string) (string, error) {
	m := demoteTimeoutLine.FindStringSubmatch(cfg)
	if m == nil {
		return "", fmt.Errorf("no demote timeout in the config")
	}
	d, err := time.ParseDuration(m[2])
	if err != nil {
		return "", err
	}
	return demoteTimeoutLine.ReplaceAllString(cfg, "${1}"+(d/2).Round(time.Millisecond).String()), nil
}

// promoteTimeoutLine is the promote hook's timeout in a clustertest config.
var promoteTimeoutLine = regexp.MustCompile(`(?m)^(  promote:\n    command: \[[^\]]*\]\n    timeout: )(\S+)$`)

// withPromoteTimeout returns cfg with the promote hook's timeout set to d.
func withPromoteTimeout(cfg string, d time.Duration) (string, error) {
	if !promoteTimeoutLine.MatchString(cfg) {
		return "", fmt.Errorf("no promote timeout in the config")
	}
	return promoteTimeoutLine.ReplaceAllString(cfg, "${1}"+d.String()), nil
}

// editConfigs reads every node's config file and returns it as it is
// and as edit changes it (by node id); the files are not written.
func (e *Env) editConfigs(what string, edit func(string) (string, error)) (orig, edited map[string]string) {
	orig, edited = map[string]string{}, map[string]string{}
	for _, n := range e.C.Nodes {
		b, err := os.ReadFile(n.Config)
		if err != nil {
			e.t.Fatal(err)
		}
		orig[n.ID] = string(b)
		if edited[n.ID], err = edit(string(b)); err != nil {
			e.t.Fatalf("%s: %s: %v", what, n.Config, err)
		}
	}
	return orig, edited
}

// reloadAll writes each node's config (files[id]), SIGHUPs its daemon and
// waits until its status shows a new config hash.
func (e *Env) reloadAll(step string, files map[string]string) {
	for _, n := range e.C.Nodes {
		st, ok := n.Status()
		if !ok {
			continue // down (an earlier fault): it reads the file at its restart
		}
		if err := os.WriteFile(n.Config, []byte(files[n.ID]), 0o600); err != nil {
			e.t.Fatalf("writing %s: %v", n.Config, err)
		}
		n.Signal(syscall.SIGHUP)
		applied := false
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if now, ok := n.Status(); ok && now.ConfigHash != st.ConfigHash {
				applied = true
				break
			}
		}
		e.Log(KindConfigReload, "node", n.ID, "step", step, "ok", applied)
		if !applied {
			e.t.Errorf("reload (%s): %s did not apply the reloaded config within 10s", step, n.ID)
		}
	}
}

// reloadConfig injects reload-config.
func (m *Nemesis) reloadConfig(id int, leader *clustertest.Node, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	orig, lowered := e.editConfigs(ReloadConfig, lowerDemoteTimeout)
	defer func() { // the files as at start, whatever happened
		for _, n := range e.C.Nodes {
			os.WriteFile(n.Config, []byte(orig[n.ID]), 0o600)
		}
	}()
	cands := e.successors(leader)
	e.waitStandby(cands, 20*time.Second)
	inject(leader.ID, "step", "lower")
	e.reloadAll("lower", lowered)
	cede(e, leader, holdIn(3*time.Second, 5*time.Second))
	var next *clustertest.Node
	for end := time.Now().Add(15 * time.Second); next == nil && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, n := range cands {
			if st, ok := n.Status(); ok && st.State == controller.StateLeader {
				next = n
			}
		}
	}
	e.reloadAll("restore", orig)
	if next == nil {
		e.t.Logf("fault %d (%s): no successor led within 15s of the cede; nothing to cut off", id, ReloadConfig)
		heal(leader.ID)
		return
	}
	e.Log(KindFault, "phase", "strike", "kind", ReloadConfig, "id", id, "target", next.ID)
	e.cutOff(next, true)
	time.Sleep(holdIn(e.Session+time.Second, e.Session+3*time.Second))
	e.cutOff(next, false)
	heal(next.ID)
}
