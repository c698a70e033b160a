package etcdcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// secureTTL is the secure tests' lease: authenticating costs etcd a
// bcrypt round, and a loaded machine must not lose a lease over it.
const secureTTL = 10 * time.Second

// secureNode connects to a secure cluster with dc, as a daemon would.
func secureNode(t *testing.T, dc DialConfig, l cluster.Layout, id string) *node {
	t.Helper()
	cli, err := Dial(dc)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	conn, err := NewConn(cli, ConnConfig{LeaseTTL: secureTTL, Logger: testLogger(id)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cli.Close() })
	s, err := New(Config{Layout: l, NodeID: id, Instance: "inst-" + id}, Deps{Conn: conn, Logger: testLogger(id)})
	if err != nil {
		t.Fatal(err)
	}
	return &node{id: id, cli: cli, conn: conn, s: s}
}

// checkFinds polls Check (each probe is bounded: a loaded etcd may not
// answer one in time) until it returns an error wrapping want, or 30s.
func checkFinds(t *testing.T, cli *clientv3.Client, dc DialConfig, want error) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := Check(t.Context(), cli, dc)
		if errors.Is(err, want) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// withCA is tc trusting only the CA in file instead.
func withCA(t *testing.T, tc *tls.Config, file string) *tls.Config {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	tc = tc.Clone()
	tc.RootCAs = pool
	return tc
}

// Against etcd serving clients over TLS with client certificates required
// and auth on (a failoverd user whose role is limited to the prefix), on
// every server line: the CA, the client certificate and the user's
// password make a session, an election and guarded writes; a key outside
// the prefix is refused; a token etcd invalidated (the user's password
// was set again) costs the client a new token, not a failed write; a
// wrong password and a CA that did not sign the
// servers' certificate are each reported by Check, naming the problem,
// while an etcd that is merely out of reach is not a setup error and does
// not keep Dial from returning.
func TestSecureEtcd(t *testing.T) {
	for _, srv := range etcdtest.Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			sec := etcdtest.NewSecurity(t, "/failoverd/")
			c := etcdtest.Start(t, etcdtest.Options{Server: srv, Security: sec})
			good := DialConfig{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, TLS: sec.ClientTLS(t),
				Username: sec.User, Password: sec.Password}
			l := cluster.Layout{Root: "/failoverd", Cluster: "secure"}

			t.Run("Connects", func(t *testing.T) {
				a := secureNode(t, good, l, "a")
				ch, _ := a.campaign(t, Fair)
				w := next(t, ch)
				ctx := ctxT(t)
				rev, err := w.t.WriteBreadcrumb(ctx, crumb("a", w.t.Epoch()), cluster.Revision{})
				if err != nil {
					t.Fatalf("WriteBreadcrumb as the failoverd user: %v", err)
				}
				// An operator sets the user's password (to the same one):
				// etcd invalidates the user's tokens, and the next write
				// needs a new one.
				if _, err := c.Client(0).Auth.UserChangePassword(ctx, sec.User, sec.Password); err != nil {
					t.Fatal(err)
				}
				// (On a loaded machine the term may end meanwhile: its
				// lease lapsed. Any write then proves the new token.)
				if _, err := w.t.WriteBreadcrumb(ctx, crumb("a", w.t.Epoch()), rev); err != nil {
					t.Logf("WriteBreadcrumb after the tokens were invalidated: %v", err)
					deadline := time.Now().Add(60 * time.Second)
					for err != nil && time.Now().Before(deadline) {
						err = a.s.PublishMember(ctx, member("a", cluster.StateLeader, w.t.Epoch()))
						time.Sleep(500 * time.Millisecond)
					}
					if err != nil {
						t.Fatalf("no write after the tokens were invalidated: %v", err)
					}
				}
				if err := a.s.PublishMember(ctx, member("a", cluster.StateLeader, w.t.Epoch())); err != nil {
					t.Fatalf("PublishMember: %v", err)
				}
				if err := Check(ctx, a.cli, good); err != nil {
					t.Errorf("Check with good credentials: %v", err)
				}
				_, err = a.cli.Put(ctx, "/elsewhere", "x")
				if !errors.Is(err, rpctypes.ErrPermissionDenied) {
					t.Errorf("a put outside the prefix: %v; want permission denied", err)
				}
			})

			t.Run("WrongPassword", func(t *testing.T) {
				dc := good
				dc.Password = "not-" + sec.Password
				n := secureNode(t, dc, l, "w")
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				if s, err := n.conn.Session(ctx); err == nil {
					t.Fatalf("a session (lease %x) with a wrong password", int64(s.ID))
				}
				err := checkFinds(t, n.cli, dc, ErrAuthFailed)
				if !errors.Is(err, ErrAuthFailed) || !strings.Contains(err.Error(), `user "failoverd"`) {
					t.Fatalf("Check with a wrong password: %v; want ErrAuthFailed naming the user", err)
				}
				t.Logf("wrong password: %v", err)
			})

			t.Run("WrongCA", func(t *testing.T) {
				dc := good
				dc.TLS = withCA(t, good.TLS, sec.OtherCAFile)
				n := secureNode(t, dc, l, "x")
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				if s, err := n.conn.Session(ctx); err == nil {
					t.Fatalf("a session (lease %x) with a CA that signed nothing etcd serves", int64(s.ID))
				}
				err := checkFinds(t, n.cli, dc, ErrUntrustedServer)
				if !errors.Is(err, ErrUntrustedServer) || !strings.Contains(err.Error(), "x509") {
					t.Fatalf("Check with the wrong CA: %v; want ErrUntrustedServer with the x509 reason", err)
				}
				t.Logf("wrong CA: %v", err)
			})

			t.Run("Unreachable", func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := ln.Addr().String()
				ln.Close() // nothing listens there now
				dc := good
				dc.Endpoints = []string{"https://" + addr}
				start := time.Now()
				cli, err := Dial(dc)
				if err != nil {
					t.Fatalf("Dial with a user while etcd is out of reach: %v; want a client that keeps trying", err)
				}
				defer cli.Close()
				if took := time.Since(start); took > dc.DialTimeout {
					t.Errorf("Dial waited %v for an unreachable etcd", took)
				}
				if err := Check(ctxT(t), cli, dc); err != nil {
					t.Errorf("Check while etcd is out of reach: %v; want nil (not a setup error)", err)
				}
			})
		})
	}
}
