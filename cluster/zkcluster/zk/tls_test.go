package zk_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/internal/tlstest"
	"github.com/failoverd/failoverd/test/zktest"
)

// syncBuffer is a log sink that the client's goroutines may write to while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tlsClient(t *testing.T, servers []string, tc *tls.Config) (*zk.Client, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	c, err := zk.NewClient(zk.Config{Servers: servers, SessionTimeout: 4 * time.Second, TLS: tc},
		zk.Deps{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, logs
}

// TestTLS runs sessions over ZooKeeper's secureClientPort (Netty, a client
// certificate required): with the right CA and a client certificate the
// session works; a server certificate from another CA is refused with an
// error log that names the cause; without a client certificate the server
// refuses the session.
func TestTLS(t *testing.T) {
	pki := tlstest.New(t, "zookeeper")
	zks := zktest.StartOpts(t, zktest.Options{Servers: 1, TLS: pki})
	certFile, keyFile := pki.Client(t, "failoverd")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("verified", func(t *testing.T) {
		c, _ := tlsClient(t, zks.SecureAddrs(), &tls.Config{RootCAs: pki.CAPool, Certificates: []tls.Certificate{cert}})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatalf("session over TLS: %v", err)
		}
		if _, _, err := s.Create(ctx, "/tls", []byte("over tls"), 0); err != nil {
			t.Fatalf("create over TLS: %v", err)
		}
		got, _, err := s.Get(ctx, "/tls")
		if err != nil || string(got) != "over tls" {
			t.Fatalf("get over TLS = %q, %v", got, err)
		}
	})

	t.Run("wrong CA", func(t *testing.T) {
		other := tlstest.New(t, "other")
		c, logs := tlsClient(t, zks.SecureAddrs(), &tls.Config{RootCAs: other.CAPool, Certificates: []tls.Certificate{cert}})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if s, err := c.Session(ctx); err == nil {
			t.Fatalf("session 0x%x established with a server certificate from another CA", s.ID())
		}
		out := logs.String()
		for _, want := range []string{"level=ERROR", "TLS handshake with a ZooKeeper server failed", "zookeeper.tls", zks.Servers[0].SecureAddr(), "x509"} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %q:\n%s", want, out)
			}
		}
		if n := strings.Count(out, "TLS handshake with a ZooKeeper server failed"); n > 2 {
			t.Errorf("the same TLS failure was logged %d times within 5s, want it once", n)
		}
	})

	t.Run("no client certificate", func(t *testing.T) {
		c, _ := tlsClient(t, zks.SecureAddrs(), &tls.Config{RootCAs: pki.CAPool})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if s, err := c.Session(ctx); err == nil {
			t.Fatalf("session 0x%x established without the client certificate the server requires", s.ID())
		}
	})
}
