package zk_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

var testAuth = &zk.Auth{User: "failoverd", Password: "s3cret"}

func newAuthClient(t *testing.T, servers []string) *zk.Client {
	t.Helper()
	c, err := zk.NewClient(zk.Config{Servers: servers, SessionTimeout: 4 * time.Second, Auth: testAuth}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// retrySession calls Session until it succeeds, as the daemon's loops do.
func retrySession(t *testing.T, c *zk.Client, within time.Duration) *zk.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	for {
		s, err := c.Session(ctx)
		if err == nil {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("no usable session within %v; last error: %v", within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAuthSurvivesConnectionLoss drops the client's connection while its
// AddAuth is in flight (the request lost, or the reply lost) right after the
// session handshake. The node must still get an authenticated session:
// before the fix the lost AddAuth was stored as the session's error and
// every later Session call returned it, for good, while status said
// connected.
func TestAuthSurvivesConnectionLoss(t *testing.T) {
	zks := zktest.Start(t, 1)
	cases := []struct {
		name string
		drop func(f *zktest.Frame) bool
	}{
		{"request lost", func(f *zktest.Frame) bool { return f.Conn == 0 && f.Op() == zktest.OpSetAuth }},
		// The first frame to the client after the connect response is the
		// reply to AddAuth (pings come only after a third of the timeout).
		{"reply lost", func(f *zktest.Frame) bool { return f.Conn == 0 && f.Dir == zktest.ToClient && f.Seq == 1 }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var dropped atomic.Bool
			p := zktest.NewFrameProxy(t, zks.Servers[0].Addr(), func(f *zktest.Frame) zktest.Action {
				if tc.drop(f) {
					dropped.Store(true)
					return zktest.Drop
				}
				return zktest.Forward
			})
			c := newAuthClient(t, []string{p.Addr()})
			s := retrySession(t, c, 20*time.Second)
			if !dropped.Load() {
				t.Fatal("the proxy never dropped the connection")
			}
			if c.Current() != s {
				t.Errorf("Current() = %p, want the session handed out (%p)", c.Current(), s)
			}
			ctx := t.Context()
			path := fmt.Sprintf("/authed%d", i)
			if _, _, err := s.Create(ctx, path, []byte("a"), zk.Persistent); err != nil {
				t.Fatal(err)
			}
			// Only our digest identity may write the znode: the write
			// succeeding proves the session is authenticated...
			if _, err := s.Set(ctx, path, []byte("b"), -1); err != nil {
				t.Fatalf("authenticated write: %v", err)
			}
			if got, _, err := s.Get(ctx, path); err != nil || string(got) != "b" {
				t.Fatalf("read back %q, %v", got, err)
			}
			// ...and an anonymous session may read but not write.
			anon := newClient(t, zks.Addrs(), 4*time.Second)
			as, err := anon.Session(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := as.Set(ctx, path, []byte("c"), -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("anonymous write = %v, want ErrNoAuth", err)
			}
		})
	}
}

// TestAuthRefusedClosesSession makes the server refuse the credentials (the
// proxy corrupts the auth scheme): Session must fail with a clear error,
// status must not show a session, the refused session must be closed, and
// once the server accepts the credentials again a new session is handed out.
func TestAuthRefusedClosesSession(t *testing.T) {
	zks := zktest.Start(t, 1)
	var corrupt atomic.Bool
	corrupt.Store(true)
	p := zktest.NewFrameProxy(t, zks.Servers[0].Addr(), func(f *zktest.Frame) zktest.Action {
		// setAuth: xid, opcode, type, then the scheme as length + bytes.
		if corrupt.Load() && f.Op() == zktest.OpSetAuth && len(f.Body) >= 22 && string(f.Body[16:22]) == "digest" {
			f.Body[21] = 'x' // "digesx": no such scheme, the server answers AUTHFAILED
		}
		return zktest.Forward
	})
	c := newAuthClient(t, []string{p.Addr()})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := c.Session(ctx)
	if err == nil || ctx.Err() != nil || !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("Session with refused credentials = %v, want an ErrNoAuth error", err)
	}
	t.Logf("refused: %v", err)
	if s := c.Current(); s != nil {
		t.Errorf("Current() = %p after a refused authentication, want nil", s)
	}
	corrupt.Store(false)
	s := retrySession(t, c, 20*time.Second)
	if _, _, err := s.Create(ctx, "/after-refusal", nil, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, "/after-refusal", []byte("x"), -1); err != nil {
		t.Fatalf("authenticated write: %v", err)
	}
}
