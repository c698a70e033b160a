package admin_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/admin"
)

// runServer starts s.Run and returns a function that stops it and returns
// Run's error. stop may be called from any goroutine, more than once.
func runServer(t *testing.T, s *admin.Server) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(admin.ShutdownTimeout + 5*time.Second):
			return errors.New("Run did not return after its context ended")
		}
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stopping server: %v", err)
		}
	})
	return stop
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestServerServesAndStops(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	s := admin.NewServerFor("127.0.0.1:0", h)
	if s.Addr() != nil {
		t.Errorf("Addr before Listen = %v, want nil", s.Addr())
	}
	if err := s.Listen(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	if err := s.Listen(); err != nil {
		t.Fatalf("second Listen: %v", err)
	}
	addr := s.Addr().String()
	stop := runServer(t, s)

	if code, body := get(t, "http://"+addr+"/"); code != 200 || body != "ok" {
		t.Errorf("GET / = %d %q, want 200 \"ok\"", code, body)
	}
	if err := stop(); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	if _, err := http.Get("http://" + addr + "/"); err == nil {
		t.Errorf("server still answers after Run returned")
	}
}

// TestServerRunListens checks that Run binds by itself when Listen was not
// called.
func TestServerRunListens(t *testing.T) {
	s := admin.NewServerFor("127.0.0.1:0", http.NotFoundHandler())
	runServer(t, s)
	deadline := time.Now().Add(5 * time.Second)
	for s.Addr() == nil {
		if time.Now().After(deadline) {
			t.Fatal("Run did not bind within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	if code, _ := get(t, "http://"+s.Addr().String()+"/x"); code != 404 {
		t.Errorf("GET /x = %d, want 404", code)
	}
}

func TestServerAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := admin.NewServerFor(ln.Addr().String(), http.NotFoundHandler())
	err = s.Listen()
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("Listen on a busy address = %v, want an error naming %s", err, ln.Addr())
	}
	if err := s.Run(t.Context()); err == nil {
		t.Errorf("Run on a busy address = nil, want an error")
	}
}

// TestServerGracefulShutdown checks that a request in flight when the
// context ends is still answered.
func TestServerGracefulShutdown(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "finished")
	})
	s := admin.NewServerFor("127.0.0.1:0", h)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	stop := runServer(t, s)

	type result struct {
		code int
		body string
	}
	answered := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/")
		if err != nil {
			answered <- result{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- result{resp.StatusCode, string(b)}
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// Shutdown closes the listener first; only then release the handler.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still open 5s after cancel")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)

	if r := <-answered; r.code != 200 || r.body != "finished" {
		t.Errorf("in-flight request = %d %q, want 200 \"finished\"", r.code, r.body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestServerCanceledBeforeRun(t *testing.T) {
	s := admin.NewServerFor("127.0.0.1:0", http.NotFoundHandler())
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Errorf("Run with a done context = %v, want nil", err)
	}
	if c, err := net.Dial("tcp", s.Addr().String()); err == nil {
		c.Close()
		t.Errorf("listener still open after Run returned")
	}
}

func TestNewValidates(t *testing.T) {
	n := &fakeNode{status: leaderStatus()}
	for _, tc := range []struct {
		name string
		cfg  admin.Config
		deps admin.Deps
	}{
		{"no listen address", admin.Config{}, admin.Deps{Node: n}},
		{"no node", admin.Config{Listen: "127.0.0.1:0"}, admin.Deps{}},
	} {
		if _, err := admin.New(tc.cfg, tc.deps); err == nil {
			t.Errorf("%s: New = nil error, want one", tc.name)
		}
	}
	// A nil Gatherer serves an empty registry rather than failing.
	s, err := admin.New(admin.Config{Listen: "127.0.0.1:0"}, admin.Deps{Node: n})
	if err != nil {
		t.Fatal(err)
	}
	if rec := do(t, s.Handler(), "GET", admin.MetricsPath, ""); rec.Code != 200 {
		t.Errorf("GET /metrics without a Gatherer = %d, want 200", rec.Code)
	}
}
