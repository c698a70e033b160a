package zk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// rawConn is another ZooKeeper client, authenticated as user (none if
// empty), that creates znodes with whatever ACL a test needs.
func rawConn(t *testing.T, addr, user, pass string) *gozk.Conn {
	t.Helper()
	conn, _, err := gozk.Connect([]string{addr}, 4*time.Second, gozk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if user != "" {
		if err := conn.AddAuth("digest", []byte(user+":"+pass)); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

func mustCreate(t *testing.T, conn *gozk.Conn, path string, acl []gozk.ACL) {
	t.Helper()
	if _, err := conn.Create(path, nil, 0, acl); err != nil {
		t.Fatalf("creating %s: %v", path, err)
	}
}

func protectedClient(t *testing.T, servers []string, auth *zk.Auth, protect ...string) *zk.Client {
	t.Helper()
	c, err := zk.NewClient(zk.Config{Servers: servers, SessionTimeout: 4 * time.Second, Auth: auth, Protect: protect}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func aclString(acl []zk.ACL) string {
	s := make([]string, len(acl))
	for i, a := range acl {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// TestProtectedPathACLs: with zookeeper.auth, the znodes above and at the
// cluster path must not be changeable by others. One we own is fixed, one
// we do not own fails the session with an error naming it, and open-ACL
// mode is unchanged.
func TestProtectedPathACLs(t *testing.T) {
	zks := zktest.Start(t, 1)
	addr := zks.Servers[0].Addr()
	ctx := t.Context()
	us := gozk.DigestACL(gozk.PermAll, testAuth.User, testAuth.Password)
	ourID := "digest:" + us[0].ID
	world := gozk.WorldACL(gozk.PermAll)

	ours := rawConn(t, addr, testAuth.User, testAuth.Password)
	mallory := rawConn(t, addr, "mallory", "x")
	anon := rawConn(t, addr, "", "")
	// Ours but open to the world (say, from a manual setup): fixed.
	mustCreate(t, ours, "/owned", append(append([]gozk.ACL(nil), us...), world...))
	mustCreate(t, ours, "/owned/cluster", world) // world:anyone:cdrwa only: not ours
	mustCreate(t, ours, "/fine", append(us, gozk.WorldACL(gozk.PermRead)...))
	mustCreate(t, ours, "/fine/cluster", append(append([]gozk.ACL(nil), us...), world...))
	// Someone else's, open to the world: refused.
	mustCreate(t, mallory, "/foreign", append(gozk.DigestACL(gozk.PermAll, "mallory", "x"), world...))
	// Created without any identity (an earlier open-ACL setup): refused.
	mustCreate(t, anon, "/open", world)

	t.Run("owned parent is fixed", func(t *testing.T) {
		c := protectedClient(t, []string{addr}, testAuth, "/fine/cluster/election")
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		acl, _, err := s.ACL(ctx, "/fine/cluster")
		if err != nil {
			t.Fatal(err)
		}
		if want := ourID + ":cdrwa,world:anyone:r"; aclString(acl) != want {
			t.Errorf("ACL of /fine/cluster = %s, want %s", aclString(acl), want)
		}
	})

	t.Run("someone else's parent fails the session", func(t *testing.T) {
		for _, p := range []string{"/foreign", "/open", "/owned/cluster"} {
			c := protectedClient(t, []string{addr}, testAuth, p+"/c1")
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := c.Session(cctx)
			cancel()
			var ue *zk.UnsafeACLError
			if !errors.Is(err, zk.ErrUnsafeACL) || !errors.As(err, &ue) {
				t.Fatalf("Session with %s open to the world = %v, want an UnsafeACLError", p, err)
			}
			if ue.Path != p || !strings.Contains(err.Error(), p+" has ACL") || !strings.Contains(err.Error(), "world:anyone:cdrwa") {
				t.Errorf("error does not name the znode %s and its ACL: %v", p, err)
			}
			if c.Current() != nil {
				t.Error("Current() is not nil after the check failed")
			}
			t.Logf("%s: %v", p, err)
		}
		// /owned was fixed on the way down to /owned/cluster.
		acl, _, err := ours.GetACL("/owned")
		if err != nil || len(acl) != 2 || acl[1].Perms != gozk.PermRead {
			t.Errorf("ACL of /owned = %v, %v; want ours plus world read", acl, err)
		}
		acl, _, err = mallory.GetACL("/foreign")
		if err != nil || len(acl) != 2 || acl[1].Perms != gozk.PermAll {
			t.Errorf("ACL of /foreign changed: %v, %v", acl, err)
		}
	})

	t.Run("EnsurePath checks existing parents", func(t *testing.T) {
		c := protectedClient(t, []string{addr}, testAuth)
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.EnsurePath(ctx, "/open/x/y"); !errors.Is(err, zk.ErrUnsafeACL) || !strings.Contains(err.Error(), "/open ") {
			t.Errorf("EnsurePath under a world-writable parent = %v, want an error naming /open", err)
		}
		if ok, _, _ := s.Exists(ctx, "/open/x"); ok {
			t.Error("EnsurePath created a znode under an unsafe parent")
		}
		mustCreate(t, ours, "/mine", append(append([]gozk.ACL(nil), us...), world...))
		if err := s.EnsurePath(ctx, "/mine/x"); err != nil {
			t.Fatalf("EnsurePath under our own parent: %v", err)
		}
		acl, _, err := s.ACL(ctx, "/mine")
		if err != nil || aclString(acl) != ourID+":cdrwa,world:anyone:r" {
			t.Errorf("ACL of /mine = %s, %v; want it fixed", aclString(acl), err)
		}
	})

	t.Run("open ACL mode is unchanged", func(t *testing.T) {
		c := protectedClient(t, []string{addr}, nil, "/open/c1")
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.EnsurePath(ctx, "/open/c1/election"); err != nil {
			t.Fatal(err)
		}
		acl, _, err := s.ACL(ctx, "/open/c1/election")
		if err != nil || aclString(acl) != "world:anyone:cdrwa" {
			t.Errorf("ACL in open mode = %s, %v", aclString(acl), err)
		}
	})
}
