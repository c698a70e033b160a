package healthcheck_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/healthcheck"
	"github.com/failoverd/failoverd/internal/proc/proctest"
)

// verdict names what a check error means, for table comparisons.
func verdict(err error) string {
	switch {
	case err == nil:
		return "healthy"
	case errors.Is(err, healthcheck.ErrNotResponding):
		return "not_responding"
	default:
		return "unhealthy"
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// slowHandler answers only when the client has given up or the test ends.
func slowHandler(t *testing.T) http.HandlerFunc {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

func TestHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "status: ok\n") })
	mux.HandleFunc("/starting", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "status: starting\n") })
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "database down", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.Handle("/slow", slowHandler(t))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		name    string
		check   healthcheck.HTTP
		want    string
		wantErr string
	}{
		{"2xx", healthcheck.HTTP{URL: srv.URL + "/ok"}, "healthy", ""},
		{"2xx with expected body", healthcheck.HTTP{URL: srv.URL + "/ok", ExpectBody: "status: ok"}, "healthy", ""},
		{"2xx with other body", healthcheck.HTTP{URL: srv.URL + "/starting", ExpectBody: "status: ok"}, "unhealthy", "status: starting"},
		{"5xx", healthcheck.HTTP{URL: srv.URL + "/broken"}, "unhealthy", "database down"},
		{"redirect not followed", healthcheck.HTTP{URL: srv.URL + "/moved"}, "unhealthy", "302"},
		{"connection refused", healthcheck.HTTP{URL: "http://" + freeAddr(t) + "/ok"}, "not_responding", "refused"},
		{"no answer in time", healthcheck.HTTP{URL: srv.URL + "/slow", Timeout: 100 * time.Millisecond}, "not_responding", "deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check.Check(t.Context())
			if got := verdict(err); got != tc.want {
				t.Fatalf("Check(%s) = %v (%s), want %s", tc.check.URL, err, got, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Check(%s) = %q, want it to contain %q", tc.check.URL, err, tc.wantErr)
			}
		})
	}
}

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go acceptAndClose(l)

	if err := (healthcheck.TCP{Address: l.Addr().String(), Timeout: 5 * time.Second}).Check(t.Context()); err != nil {
		t.Errorf("Check(listening) = %v, want nil", err)
	}
	err = healthcheck.TCP{Address: freeAddr(t), Timeout: 5 * time.Second}.Check(t.Context())
	if verdict(err) != "not_responding" {
		t.Errorf("Check(closed port) = %v, want not responding", err)
	}
}

func acceptAndClose(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func TestExec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		want    string
		wantErr string
	}{
		{"exit 0", "echo fine", "healthy", ""},
		{"exit 1 with output", "echo 'disk full' >&2; exit 1", "unhealthy", "disk full"},
		{"killed by a signal", "kill -9 $$", "unhealthy", "signal: killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := healthcheck.Exec{Argv: []string{proctest.Script(t, tc.body)}, Timeout: 30 * time.Second}.Check(t.Context())
			if got := verdict(err); got != tc.want {
				t.Fatalf("Check() = %v (%s), want %s", err, got, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Check() = %q, want it to contain %q", err, tc.wantErr)
			}
		})
	}

	t.Run("cannot start", func(t *testing.T) {
		err := healthcheck.Exec{Argv: []string{filepath.Join(t.TempDir(), "missing")}}.Check(t.Context())
		if verdict(err) != "not_responding" {
			t.Errorf("Check() = %v, want not responding", err)
		}
	})

	t.Run("hung command is killed with its children", func(t *testing.T) {
		argv, pidFile := proctest.HangingScript(t, true)
		err := healthcheck.Exec{Argv: argv, Timeout: proctest.HangTimeout, KillGrace: 200 * time.Millisecond}.Check(t.Context())
		if verdict(err) != "not_responding" || !strings.Contains(err.Error(), "timed out after "+proctest.HangTimeout.String()) {
			t.Fatalf("Check() = %v, want a not-responding timeout", err)
		}
		proctest.RequireGone(t, proctest.ReadPID(t, pidFile))
	})
}

// watch runs a real-time monitor for check and returns a channel of states
// it changes to. The monitor stops when the test ends.
func watch(t *testing.T, check healthcheck.Checker, cfg healthcheck.Config) (*healthcheck.Monitor, <-chan healthcheck.State) {
	t.Helper()
	changes := make(chan healthcheck.State, 100)
	m, err := healthcheck.New(cfg, healthcheck.Deps{Checker: check, OnChange: func(_, to healthcheck.State, _ error) { changes <- to }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(ctx); err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return m, changes
}

// next fails t unless the next state change is to want.
func next(t *testing.T, m *healthcheck.Monitor, changes <-chan healthcheck.State, want healthcheck.State) {
	t.Helper()
	select {
	case got := <-changes:
		if got != want {
			t.Fatalf("state changed to %s, want %s", got, want)
		}
		if s := m.State(); s != want {
			t.Fatalf("State() = %s after a change to %s", s, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("state did not change to %s (still %s)", want, m.State())
	}
}

func TestMonitorHTTPServer(t *testing.T) {
	var status atomic.Int32
	var body atomic.Value
	var slow atomic.Bool
	status.Store(http.StatusOK)
	body.Store("ok")
	hang := slowHandler(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			hang(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
		fmt.Fprint(w, body.Load())
	}))
	defer srv.Close()

	m, changes := watch(t, healthcheck.HTTP{URL: srv.URL, ExpectBody: "ok"},
		healthcheck.Config{Interval: 20 * time.Millisecond, Timeout: 2 * time.Second, Rise: 2, Fall: 2})
	next(t, m, changes, healthcheck.Healthy)

	status.Store(http.StatusInternalServerError)
	next(t, m, changes, healthcheck.Unhealthy)

	slow.Store(true)
	next(t, m, changes, healthcheck.NotResponding)

	slow.Store(false)
	status.Store(http.StatusOK)
	next(t, m, changes, healthcheck.Healthy)

	body.Store("starting")
	next(t, m, changes, healthcheck.Unhealthy)

	srv.Close()
	next(t, m, changes, healthcheck.NotResponding)
}

func TestMonitorTCPListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	go acceptAndClose(l)

	m, changes := watch(t, healthcheck.TCP{Address: addr},
		healthcheck.Config{Interval: 20 * time.Millisecond, Timeout: 2 * time.Second})
	next(t, m, changes, healthcheck.Healthy)

	l.Close()
	next(t, m, changes, healthcheck.NotResponding)

	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go acceptAndClose(l)
	next(t, m, changes, healthcheck.Healthy)
}

func TestMonitorExec(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "ready")
	script := proctest.Script(t, `test -e "$1" || { echo "no $1"; exit 1; }`)
	m, changes := watch(t, healthcheck.Exec{Argv: []string{script, flag}},
		healthcheck.Config{Interval: 20 * time.Millisecond, Timeout: 5 * time.Second})
	next(t, m, changes, healthcheck.Unhealthy)

	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next(t, m, changes, healthcheck.Healthy)

	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	next(t, m, changes, healthcheck.Unhealthy)
}

func TestMonitorHungExecIsKilled(t *testing.T) {
	argv, pidFile := proctest.HangingScript(t, true)
	type report struct {
		to  healthcheck.State
		err error
		pid int
	}
	reports := make(chan report, 10)
	m, err := healthcheck.New(healthcheck.Config{Interval: 50 * time.Millisecond, Timeout: proctest.HangTimeout, Fall: 1}, healthcheck.Deps{
		Checker: healthcheck.Exec{Argv: argv, KillGrace: 200 * time.Millisecond},
		OnChange: func(_, to healthcheck.State, err error) {
			// Read the pid now: the next check would overwrite the file.
			reports <- report{to, err, proctest.ReadPID(t, pidFile)}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var r report
	select {
	case r = <-reports:
	case <-time.After(20 * time.Second):
		t.Fatal("hung exec check never reported")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	if r.to != healthcheck.NotResponding || !strings.Contains(r.err.Error(), "timed out after") {
		t.Fatalf("state changed to %s with %v, want not_responding after a timeout", r.to, r.err)
	}
	// That check is over, so its whole process group must be gone.
	proctest.RequireGone(t, r.pid)
}
