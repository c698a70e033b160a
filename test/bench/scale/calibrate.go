//go:build scale

package scale

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// calibration is one cluster of three real failoverd daemons, idle on
// the same servers as the driver's members, counted the same way: what
// the driver's per-cluster load is compared with.
type calibration struct {
	Seconds        float64 `json:"seconds"`
	RequestsPerSec float64 `json:"requests_per_second"` // net of the window without daemons
	WritesPerSec   float64 `json:"writes_per_second"`
	CPUMilliPerSec float64 `json:"server_cpu_ms_per_second"`
	Baseline       rates   `json:"baseline"`
	Daemons        rates   `json:"daemons"`
	Config         string  `json:"config"`
	// Driver: the driver's per-cluster figures at N = 1 in the same run,
	// and their ratios to the daemons' (want within 10%).
	DriverRequests float64 `json:"driver_requests_per_second,omitempty"`
	DriverWrites   float64 `json:"driver_writes_per_second,omitempty"`
	RequestsRatio  float64 `json:"requests_ratio,omitempty"`
	WritesRatio    float64 `json:"writes_ratio,omitempty"`
}

// calibrate builds failoverd, runs one cluster of three daemons on e with
// the documented defaults (health every 1 s, a tcp check of a listener
// the driver holds, no-op hooks, the rpc fence; info log to files), waits
// for a leader, lets it settle, counts the servers for idle, then stops
// the daemons and counts base more without them.
func calibrate(t *testing.T, e *ensemble, base, settle, idle time.Duration) *calibration {
	dir := t.TempDir()
	bin := filepath.Join(dir, "failoverd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/failoverd/failoverd/cmd/failoverd").CombinedOutput(); err != nil {
		t.Fatalf("building failoverd: %v: %s", err, out)
	}
	health, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer health.Close()
	go func() {
		for {
			c, err := health.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tok := make([]byte, 32)
	rand.Read(tok)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(base64.StdEncoding.EncodeToString(tok)), 0o600); err != nil {
		t.Fatal(err)
	}
	coord := fmt.Sprintf("zookeeper:\n  servers: [%s]\n", strings.Join(e.servers(), ", "))
	if e.etcd != nil {
		coord = fmt.Sprintf("coordination:\n  backend: etcd\netcd:\n  endpoints: [%s]\n", strings.Join(e.servers(), ", "))
	} else {
		if d := envDuration("SCALE_ZK_SESSION", 0); d > 0 {
			coord += fmt.Sprintf("  session_timeout: %s\n", d)
		}
		if d := envDuration("SCALE_ZK_TICK", 0); d > 0 {
			coord += fmt.Sprintf("  tick_time: %s\n", d)
		}
	}
	if os.Getenv("SCALE_WARM_STANDBY") == "0" {
		coord += "election:\n  warm_standby: false\n"
	}
	name := fmt.Sprintf("calib-%d", time.Now().Unix()%100000)
	type daemon struct {
		admin string
		cmd   *exec.Cmd
	}
	var ds []*daemon
	var cfgShown string
	for i := 1; i <= 3; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		admin := l.Addr().String()
		l.Close()
		nd := filepath.Join(dir, fmt.Sprintf("n%d", i))
		if err := os.MkdirAll(nd, 0o700); err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprintf(`cluster: %s
node:
  id: n%d
  host: 127.0.0.1
  state_dir: %s
  admin:
    listen: %s
    token_file: %s
%shealth:
  tcp:
    address: %s
service:
  promote:
    command: [/bin/true]
  demote:
    command: [/bin/true]
fencing:
  methods:
    - rpc:
        timeout: 1s
log:
  level: info
`, name, i, nd, admin, token, coord, health.Addr())
		if i == 1 {
			cfgShown = cfg
		}
		path := filepath.Join(nd, "failoverd.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		logf, err := os.Create(filepath.Join(nd, "log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "run", "-c", path)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		d := &daemon{admin: admin, cmd: cmd}
		ds = append(ds, d)
		t.Cleanup(func() { d.cmd.Process.Kill(); d.cmd.Wait(); logf.Close() })
	}
	// One leader, the others standing by.
	deadline := time.Now().Add(60 * time.Second)
	for {
		leaders, standbys := 0, 0
		for _, d := range ds {
			switch statusState(d.admin) {
			case "leader":
				leaders++
			case "standby":
				standbys++
			}
		}
		if leaders == 1 && standbys == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calibration daemons: %d leaders and %d standbys after 60s (logs in %s)", leaders, standbys, dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(settle)
	read := func() counters {
		c, err := e.read()
		if err != nil {
			t.Fatalf("reading the servers: %v", err)
		}
		return c
	}
	c0 := read()
	time.Sleep(idle)
	c1 := read()
	for _, d := range ds {
		if d.cmd.ProcessState != nil || d.cmd.Process.Signal(syscall.Signal(0)) != nil {
			t.Fatalf("a calibration daemon exited during the window (logs in %s)", dir)
		}
	}
	for _, d := range ds {
		d.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, d := range ds {
		d.cmd.Wait()
	}
	time.Sleep(3 * time.Second) // sessions closed, leases revoked
	b0 := read()
	time.Sleep(base)
	cal := &calibration{Daemons: between(c0, c1), Baseline: between(b0, read()), Config: cfgShown}
	cal.Seconds = cal.Daemons.Seconds
	cal.RequestsPerSec = round(cal.Daemons.RequestsPerSec-cal.Baseline.RequestsPerSec, 2)
	cal.WritesPerSec = round(cal.Daemons.WritesPerSec-cal.Baseline.WritesPerSec, 3)
	cal.CPUMilliPerSec = round(1000*(cal.Daemons.CPUPerSec-cal.Baseline.CPUPerSec), 2)
	return cal
}

// statusState is a daemon's state from GET /v1/status ("" when it does
// not answer).
func statusState(addr string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var s struct {
		State string `json:"state"`
	}
	if json.NewDecoder(resp.Body).Decode(&s) != nil {
		return ""
	}
	return s.State
}
