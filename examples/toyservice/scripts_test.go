package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestScripts runs the hook scripts of examples/scripts, as failoverd would,
// against a toy service, with this package built as the binary they wrap.
func TestScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the toyservice binary")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "toyservice")
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	_, a := startService(t, ServiceConfig{Node: "node-a", StateDir: t.TempDir()})
	_, b := startService(t, ServiceConfig{Node: "node-b", StateDir: t.TempDir()})
	events := filepath.Join(dir, "events.log")

	script := func(env []string, name string, args ...string) error {
		t.Helper()
		cmd := exec.Command(filepath.Join("..", "scripts", name), args...)
		cmd.Env = append(os.Environ(), append([]string{"TOYSERVICE=" + bin, "FAILOVERD_EVENTS_LOG=" + events,
			"FAILOVERD_CLUSTER=toy", "TOY_URL="}, env...)...)
		out, err := cmd.CombinedOutput()
		t.Logf("%s %v: %s", name, args, out)
		return err
	}
	if err := script([]string{"FAILOVERD_NODE_ID=node-a", "FAILOVERD_EPOCH=5"}, "promote.sh", a.URL); err != nil {
		t.Fatalf("promote.sh: %v", err)
	}
	if err := script([]string{"FAILOVERD_NODE_ID=node-b", "FAILOVERD_EPOCH=9", "FAILOVERD_PREVIOUS_LEADER=node-a",
		"FAILOVERD_PREVIOUS_EPOCH=5", "TOY_URL=" + b.URL}, "promote.sh"); err != nil {
		t.Fatalf("promote.sh with $TOY_URL: %v", err)
	}
	fenceEnv := []string{"FAILOVERD_NODE_ID=node-b", "FAILOVERD_TARGET_ID=node-a", "FAILOVERD_TARGET_HOST=127.0.0.1",
		"FAILOVERD_TARGET_EPOCH=5", "FAILOVERD_FENCE_FAIL_FILE=" + filepath.Join(dir, "fail")}
	os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644)
	if err := script(fenceEnv, "fence.sh", "node-a="+a.URL); err == nil {
		t.Fatal("fence.sh succeeded while the fail file exists")
	}
	os.Remove(filepath.Join(dir, "fail"))
	if err := script(fenceEnv, "fence.sh", "-timeout", "1s", "node-a="+a.URL, "node-b="+b.URL); err != nil {
		t.Fatalf("fence.sh: %v", err)
	}
	if st := role(t, a.URL); st.Role != RoleStandby {
		t.Fatalf("node-a after fence.sh: %+v", st)
	}
	if err := script([]string{"FAILOVERD_NODE_ID=node-b", "FAILOVERD_REASON=shutdown"}, "demote.sh", b.URL, "-timeout", "500ms"); err != nil {
		t.Fatalf("demote.sh: %v", err)
	}
	if st := role(t, b.URL); st.Role != RoleStandby {
		t.Fatalf("node-b after demote.sh: %+v", st)
	}
	if err := script(nil, "health.sh", b.URL); err != nil {
		t.Fatalf("health.sh: %v", err)
	}
	if err := script(nil, "promote.sh"); err == nil {
		t.Fatal("promote.sh without a toy URL succeeded")
	}

	data, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\S+ (event=\w+) .*(result=\w+)`)
	var got []string
	for line := range strings.Lines(string(data)) {
		if m := re.FindStringSubmatch(line); m != nil {
			got = append(got, m[1]+" "+m[2])
		}
	}
	want := []string{"event=promote result=ok", "event=promote result=ok", "event=fence result=failed", "event=fence result=ok", "event=demote result=ok"}
	if !slices.Equal(got, want) {
		t.Errorf("events log:\n%s\nwant events %q", data, want)
	}
}
