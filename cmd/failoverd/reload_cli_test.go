package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/adminapi"
)

// failoverd reload against a scripted admin API: a refused token names
// the token file and --token-file; the daemon's warnings and notes are
// printed.
func TestReloadCLIAnswers(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "failoverd.yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  admin:\n    token_file: "+token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		status    int
		ans       adminapi.ReloadAnswer
		code      int
		stdout    []string
		stderr    []string
		notStderr string
	}{
		{"token refused", http.StatusUnauthorized, adminapi.ReloadAnswer{Error: "missing or wrong bearer token"}, exitRuntime, nil,
			[]string{"the daemon refused the token in " + token + "; if this reload changes node.admin.token_file, pass the token the daemon runs with: --token-file OLD"},
			"still running"},
		{"applied with a warning and a handover", http.StatusOK, adminapi.ReloadAnswer{Applied: true, NodeID: "node-a", ConfigHash: "abc", Changed: []string{"node.priority"},
			Warnings: []string{"health.rise is 1"}, Notes: []string{"node.priority is now 0: this node may not lead, so it hands its leadership over gracefully"}}, exitOK,
			[]string{"node-a reloaded its config (abc); applied:\n  node.priority\n", "node-a: node.priority is now 0: this node may not lead, so it hands its leadership over gracefully\n"},
			[]string{"warning: health.rise is 1\n"}, ""},
		{"refused with a warning", http.StatusOK, adminapi.ReloadAnswer{NodeID: "node-a", ConfigHash: "abc", Refused: []string{"node.id: needs a restart"}, Warnings: []string{"w1"}}, exitRuntime,
			nil, []string{"reload refused", "  node.id: needs a restart\n", "warning: w1\n"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != adminapi.ReloadPath || r.Header.Get("Authorization") != "Bearer secret" {
					t.Errorf("request %s %s %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				json.NewEncoder(w).Encode(tc.ans)
			}))
			defer srv.Close()
			var out, errb bytes.Buffer
			code := cmdReload([]string{"-c", cfg, "--url", srv.URL}, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out.String(), errb.String())
			}
			for _, s := range tc.stdout {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout does not say %q:\n%s", s, out.String())
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errb.String(), s) {
					t.Errorf("stderr does not say %q:\n%s", s, errb.String())
				}
			}
			if tc.notStderr != "" && strings.Contains(errb.String(), tc.notStderr) {
				t.Errorf("stderr says %q:\n%s", tc.notStderr, errb.String())
			}
		})
	}
}

// A file the CLI cannot read is a usage error: exit 2, the daemon is not
// asked.
func TestReloadCLIUnreadableFile(t *testing.T) {
	var out, errb bytes.Buffer
	if code := cmdReload([]string{"-c", filepath.Join(t.TempDir(), "missing.yaml"), "--url", "http://127.0.0.1:1"}, &out, &errb); code != exitUsage {
		t.Errorf("exit %d, want %d: %s", code, exitUsage, errb.String())
	}
}

// The daemon's reload answer carries the new file's validation warnings,
// also when it applies nothing (here a refused node.id).
func TestReloadAnswerCarriesWarnings(t *testing.T) {
	base := `cluster: orders
node: {id: node-a, host: 127.0.0.1}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
zookeeper: {servers: ["127.0.0.1:2181"]}
`
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	cur, _, err := readConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(base, "id: node-a", "id: node-b", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &reloader{log: slog.New(slog.DiscardHandler), start: cur, cur: cur, file: loadedConfig{path: path}}
	ans := r.reload(context.Background(), time.Now())
	if ans.Applied || len(ans.Refused) == 0 {
		t.Fatalf("answer %+v, want node.id refused", ans)
	}
	if len(ans.Warnings) == 0 || !strings.HasPrefix(ans.Warnings[0], "zookeeper.tick_time: ") {
		t.Errorf("warnings %q, want the tick_time warning", ans.Warnings)
	}
}
