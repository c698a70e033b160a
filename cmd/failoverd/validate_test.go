package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validate accepts a config that only warrants a warning (exit 0, "ok"),
// and says on stderr what to change.
func TestValidateWarnsWhenAReconnectCanEndLeadership(t *testing.T) {
	base := `cluster: orders
node: {id: node-a, host: 127.0.0.1}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`
	for _, tc := range []struct {
		zk, warn string
	}{
		{`zookeeper: {servers: ["127.0.0.1:2181"]}`, "warning: zookeeper.tick_time: "},
		{`zookeeper: {servers: ["127.0.0.1:2181"], tick_time: 2s}`, ""},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(base+tc.zk+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if code := cmdValidate([]string{"-c", path}, &out, &errb); code != exitOK || out.String() != "ok\n" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", tc.zk, code, out.String(), errb.String())
		}
		if got := errb.String(); tc.warn == "" && got != "" || tc.warn != "" && !strings.HasPrefix(got, tc.warn) {
			t.Errorf("%s: stderr %q, want prefix %q", tc.zk, got, tc.warn)
		}
	}
}
