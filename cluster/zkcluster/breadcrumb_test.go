package zkcluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

const bcDir = "/failoverd/orders"

var bcPath = cluster.Layout{Root: "/failoverd", Cluster: "orders"}.Breadcrumb()

func bcSession(t *testing.T, zks *zktest.Cluster) *zk.Session {
	t.Helper()
	c, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := c.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsurePath(t.Context(), bcDir+"/election"); err != nil {
		t.Fatal(err)
	}
	return s
}

// guard makes an election znode owned by s, standing in for a won election.
func bcGuard(t *testing.T, s *zk.Session) Guard {
	t.Helper()
	p, _, err := s.Create(t.Context(), bcDir+"/election/c_test-n_", nil, zk.EphemeralSequential)
	if err != nil {
		t.Fatal(err)
	}
	return Guard{Session: s, Election: p}
}

func bcRec(id string, epoch int64) breadcrumb.Record {
	return breadcrumb.Record{NodeID: id, Host: "127.0.0.1", AdminURL: "http://127.0.0.1:9101", Epoch: epoch, Since: time.Now().UTC().Truncate(time.Second)}
}

func TestWriteReadAssess(t *testing.T) {
	zks := zktest.Start(t, 1)
	s := bcSession(t, zks)
	ctx := t.Context()

	r, v, err := ReadBreadcrumbAt(ctx, s, bcPath)
	if !errors.Is(err, breadcrumb.ErrAbsent) || breadcrumb.Assess(r, err, "a", 5) != breadcrumb.NothingToFence {
		t.Fatalf("absent: Read = %v, %v", r, err)
	}
	g := bcGuard(t, s)
	if _, err := WriteBreadcrumbAt(ctx, g, bcPath, bcRec("a", 5), v); err != nil {
		t.Fatal(err)
	}
	got, v, err := ReadBreadcrumbAt(ctx, s, bcPath)
	if err != nil || got.NodeID != "a" || got.Epoch != 5 || got.Version != breadcrumb.Version {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	for _, tc := range []struct {
		self  string
		epoch int64
		want  breadcrumb.Verdict
	}{
		{"a", 5, breadcrumb.NothingToFence},
		{"a", 9, breadcrumb.MustFence}, // an older incarnation of us
		{"b", 9, breadcrumb.MustFence},
	} {
		if got := breadcrumb.Assess(got, nil, tc.self, tc.epoch); got != tc.want {
			t.Errorf("Assess(self=%s, epoch=%d) = %v, want %v", tc.self, tc.epoch, got, tc.want)
		}
	}
	if err := DeleteBreadcrumbAt(ctx, g, bcPath, v); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadBreadcrumbAt(ctx, s, bcPath); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after Delete: %v", err)
	}
}

func TestCorruptBreadcrumbIsRefused(t *testing.T) {
	zks := zktest.Start(t, 1)
	s := bcSession(t, zks)
	ctx := t.Context()
	for _, data := range []string{"", "garbage", `{"version":2,"node_id":"a","epoch":1}`, `{"version":1,"node_id":"","epoch":1}`,
		// A node id no hook or fencer can be started with.
		`{"version":1,"node_id":"a\u0000b","host":"127.0.0.1","epoch":1}`} {
		s.Delete(ctx, bcPath, -1)
		if _, _, err := s.Create(ctx, bcPath, []byte(data), zk.Persistent); err != nil {
			t.Fatal(err)
		}
		r, _, err := ReadBreadcrumbAt(ctx, s, bcPath)
		var ce *breadcrumb.CorruptError
		if !errors.As(err, &ce) {
			t.Errorf("Read(%q) error = %v, want *CorruptError", data, err)
		}
		if v := breadcrumb.Assess(r, err, "b", 7); v != breadcrumb.Refuse {
			t.Errorf("Assess after %q = %v, want refuse", data, v)
		}
	}
	_, version, _ := ReadBreadcrumbAt(ctx, s, bcPath)
	if err := ClearBreadcrumbAt(ctx, s, bcPath, version); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadBreadcrumbAt(ctx, s, bcPath); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after Clear: %v", err)
	}
}

func TestExpiredLeaderCannotWriteOrDelete(t *testing.T) {
	zks := zktest.Start(t, 1)
	old := bcSession(t, zks)
	g := bcGuard(t, old)
	ctx := t.Context()
	if _, err := WriteBreadcrumbAt(ctx, g, bcPath, bcRec("a", 5), -1); err != nil {
		t.Fatal(err)
	}
	_, v, err := ReadBreadcrumbAt(ctx, old, bcPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := zktest.Expire(zks.Servers[0].Addr(), old.ID(), old.Password()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session not expired")
	}
	if _, err := WriteBreadcrumbAt(ctx, g, bcPath, bcRec("a", 5), v); err == nil {
		t.Error("expired leader overwrote the breadcrumb")
	}
	if err := DeleteBreadcrumbAt(ctx, g, bcPath, v); err == nil {
		t.Error("expired leader deleted the breadcrumb")
	}
	// Even through a brand-new session, the old election znode is gone, so
	// a guard naming it fails.
	fresh := bcSession(t, zks)
	stale := Guard{Session: fresh, Election: g.Election}
	if _, err := WriteBreadcrumbAt(ctx, stale, bcPath, bcRec("a", 5), v); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("write guarded by a vanished znode = %v, want ErrNoNode", err)
	}
	r, _, err := ReadBreadcrumbAt(ctx, fresh, bcPath)
	if err != nil || r.NodeID != "a" {
		t.Errorf("breadcrumb changed: %+v %v", r, err)
	}
}

func TestConcurrentWritersResolveByCAS(t *testing.T) {
	zks := zktest.Start(t, 1)
	for round := 0; round < 5; round++ {
		var gs []Guard
		for range 4 {
			gs = append(gs, bcGuard(t, bcSession(t, zks)))
		}
		_, v, err := ReadBreadcrumbAt(t.Context(), gs[0].Session, bcPath)
		if err != nil && !errors.Is(err, breadcrumb.ErrAbsent) {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i, g := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := WriteBreadcrumbAt(context.Background(), g, bcPath, bcRec(string(rune('a'+i)), int64(round*10+i+1)), v)
				switch {
				case err == nil:
					mu.Lock()
					wins++
					mu.Unlock()
				case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists):
				default:
					t.Errorf("writer %d: unexpected error %v", i, err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("round %d: %d writers succeeded from the same version, want exactly 1", round, wins)
		}
	}
}
