package zk_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// fakeDNS resolves names to loopback addresses; names it does not know fail
// as NXDOMAIN would. Tests never ask a real resolver (no traffic leaves
// loopback).
type fakeDNS struct {
	mu      sync.Mutex
	hosts   map[string]string
	lookups atomic.Int64
	hang    atomic.Bool   // when set, every lookup waits for ctx or unhang
	unhang  chan struct{} // closed to release hanging lookups
	hanging chan struct{} // receives when a lookup starts hanging
}

func newFakeDNS(hosts map[string]string) *fakeDNS {
	return &fakeDNS{hosts: hosts, unhang: make(chan struct{}), hanging: make(chan struct{}, 100)}
}

func (d *fakeDNS) set(name, addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if addr == "" {
		delete(d.hosts, name)
	} else {
		d.hosts[name] = addr
	}
}

func (d *fakeDNS) resolve(ctx context.Context, host string) ([]string, error) {
	d.lookups.Add(1)
	if d.hang.Load() {
		select {
		case d.hanging <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-d.unhang:
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.hosts[host]; ok {
		return []string{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// logBuffer collects a logger's output for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestUnresolvableServerNameDoesNotBlockSessions configures a server whose
// name does not resolve next to a healthy one. go-zookeeper's DNS host
// provider failed the whole Connect on the bad name, so no session could
// ever be opened; now the node connects to the servers that resolve, logs
// the bad name once (not once per attempt), and uses a name as soon as it
// starts resolving.
func TestUnresolvableServerNameDoesNotBlockSessions(t *testing.T) {
	zks := zktest.Start(t, 1)
	port := portOf(t, zks.Servers[0].Addr())
	dns := newFakeDNS(map[string]string{"zk-a.test": "127.0.0.1"})
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// go-zookeeper shuffles the list: several clients make sure the bad
	// name is tried first at least sometimes.
	for i := range 4 {
		c, err := zk.NewClient(zk.Config{
			Servers:        []string{"nonexistent.invalid:2181", "zk-a.test:" + port},
			SessionTimeout: 4 * time.Second,
		}, zk.Deps{Resolve: dns.resolve, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		s, err := c.Session(ctx)
		cancel()
		if err != nil {
			t.Fatalf("client %d: no session with one name unresolvable: %v", i, err)
		}
		if _, _, err := s.Exists(t.Context(), "/"); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}

	// Flapping: the only name stops resolving, the client keeps trying and
	// logs it once; when the name resolves again, the session comes.
	dns.set("zk-b.test", "")
	before := logs.count(`msg="zookeeper server name does not resolve`)
	c, err := zk.NewClient(zk.Config{Servers: []string{"zk-b.test:" + port}, SessionTimeout: 4 * time.Second},
		zk.Deps{Resolve: dns.resolve, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, err := c.Session(ctx)
		got <- err
	}()
	start := dns.lookups.Load()
	for deadline := time.Now().Add(20 * time.Second); dns.lookups.Load() < start+3; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d lookups of the failing name in 20s", dns.lookups.Load()-start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := logs.count(`msg="zookeeper server name does not resolve`) - before; n != 1 {
		t.Errorf("a name that failed %d times was logged %d times, want once", dns.lookups.Load()-start, n)
	}
	dns.set("zk-b.test", "127.0.0.1")
	if err := <-got; err != nil {
		t.Fatalf("no session after the name resolved again: %v", err)
	}
	if n := logs.count(`msg="zookeeper server name resolves again"`); n != 1 {
		t.Errorf("recovery logged %d times, want once", n)
	}
}

// TestCurrentDoesNotWaitForNetwork opens a session while the resolver
// hangs: Current (behind /v1/status, /leader and /metrics) must answer at
// once all the while. Before, the session was opened under the client's
// lock, with the DNS lookups of go-zookeeper's Connect, and Current took
// the same lock.
func TestCurrentDoesNotWaitForNetwork(t *testing.T) {
	zks := zktest.Start(t, 1)
	port := portOf(t, zks.Servers[0].Addr())
	dns := newFakeDNS(map[string]string{"zk-a.test": "127.0.0.1"})
	c, err := zk.NewClient(zk.Config{Servers: []string{"zk-a.test:" + port}, SessionTimeout: 2 * time.Second},
		zk.Deps{Resolve: dns.resolve})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s1, err := c.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if c.Current() != s1 {
		t.Fatal("Current is not the session handed out")
	}

	// The session expires, so the next Session call has to open a new one,
	// and from then on the resolver hangs.
	if err := zktest.Expire(zks.Servers[0].Addr(), s1.ID(), s1.Password()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s1.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("session not reported dead after expiry")
	}
	dns.hang.Store(true)
	opened := make(chan *zk.Session, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		s, err := c.Session(ctx)
		if err != nil {
			t.Errorf("Session after the resolver recovered: %v", err)
		}
		opened <- s
	}()
	select {
	case <-dns.hanging:
	case <-time.After(15 * time.Second):
		t.Fatal("the new session never looked a name up")
	}
	var worst time.Duration
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		start := time.Now()
		cur := c.Current()
		worst = max(worst, time.Since(start))
		if cur != nil {
			t.Fatalf("Current() = %p while no session is ready, want nil", cur)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Generous: the call takes no lock and does no I/O.
	if worst > 200*time.Millisecond {
		t.Errorf("Current() took up to %v while a session was being opened", worst)
	}
	t.Logf("slowest Current() while the resolver hung: %v", worst)

	dns.hang.Store(false)
	close(dns.unhang)
	s2 := <-opened
	if s2 == nil || s2 == s1 || c.Current() != s2 {
		t.Fatalf("after recovery: session %p (old %p), Current %p", s2, s1, c.Current())
	}
}
