package breadcrumb_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/zktest"
	"github.com/failoverd/failoverd/zk"
)

const dir = "/failoverd/orders"

var path = cluster.Layout{Root: "/failoverd", Cluster: "orders"}.Breadcrumb()

func session(t *testing.T, zks *zktest.Cluster) *zk.Session {
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
	if err := s.EnsurePath(t.Context(), dir+"/election"); err != nil {
		t.Fatal(err)
	}
	return s
}

// guard makes an election znode owned by s, standing in for a won election.
func guard(t *testing.T, s *zk.Session) breadcrumb.Guard {
	t.Helper()
	p, _, err := s.Create(t.Context(), dir+"/election/c_test-n_", nil, zk.EphemeralSequential)
	if err != nil {
		t.Fatal(err)
	}
	return breadcrumb.Guard{Session: s, Election: p}
}

func rec(id string, epoch int64) breadcrumb.Record {
	return breadcrumb.Record{NodeID: id, Host: "127.0.0.1", AdminURL: "http://127.0.0.1:9101", Epoch: epoch, Since: time.Now().UTC().Truncate(time.Second)}
}

func TestWriteReadAssess(t *testing.T) {
	zks := zktest.Start(t, 1)
	s := session(t, zks)
	ctx := t.Context()

	r, v, err := breadcrumb.Read(ctx, s, path)
	if !errors.Is(err, breadcrumb.ErrAbsent) || breadcrumb.Assess(r, err, "a", 5) != breadcrumb.NothingToFence {
		t.Fatalf("absent: Read = %v, %v", r, err)
	}
	g := guard(t, s)
	if _, err := breadcrumb.Write(ctx, g, path, rec("a", 5), v); err != nil {
		t.Fatal(err)
	}
	got, v, err := breadcrumb.Read(ctx, s, path)
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
	if err := breadcrumb.Delete(ctx, g, path, v); err != nil {
		t.Fatal(err)
	}
	if _, _, err := breadcrumb.Read(ctx, s, path); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after Delete: %v", err)
	}
}

func TestCorruptBreadcrumbIsRefused(t *testing.T) {
	zks := zktest.Start(t, 1)
	s := session(t, zks)
	ctx := t.Context()
	for _, data := range []string{"", "garbage", `{"version":2,"node_id":"a","epoch":1}`, `{"version":1,"node_id":"","epoch":1}`,
		// A node id no hook or fencer can be started with (issue 10, item 12).
		`{"version":1,"node_id":"a\u0000b","host":"127.0.0.1","epoch":1}`} {
		s.Delete(ctx, path, -1)
		if _, _, err := s.Create(ctx, path, []byte(data), zk.Persistent); err != nil {
			t.Fatal(err)
		}
		r, _, err := breadcrumb.Read(ctx, s, path)
		var ce *breadcrumb.CorruptError
		if !errors.As(err, &ce) {
			t.Errorf("Read(%q) error = %v, want *CorruptError", data, err)
		}
		if v := breadcrumb.Assess(r, err, "b", 7); v != breadcrumb.Refuse {
			t.Errorf("Assess after %q = %v, want refuse", data, v)
		}
	}
	if err := breadcrumb.Clear(ctx, s, path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := breadcrumb.Read(ctx, s, path); !errors.Is(err, breadcrumb.ErrAbsent) {
		t.Fatalf("after Clear: %v", err)
	}
}

func TestExpiredLeaderCannotWriteOrDelete(t *testing.T) {
	zks := zktest.Start(t, 1)
	old := session(t, zks)
	g := guard(t, old)
	ctx := t.Context()
	if _, err := breadcrumb.Write(ctx, g, path, rec("a", 5), -1); err != nil {
		t.Fatal(err)
	}
	_, v, err := breadcrumb.Read(ctx, old, path)
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
	if _, err := breadcrumb.Write(ctx, g, path, rec("a", 5), v); err == nil {
		t.Error("expired leader overwrote the breadcrumb")
	}
	if err := breadcrumb.Delete(ctx, g, path, v); err == nil {
		t.Error("expired leader deleted the breadcrumb")
	}
	// Even through a brand-new session, the old election znode is gone, so
	// a guard naming it fails.
	fresh := session(t, zks)
	stale := breadcrumb.Guard{Session: fresh, Election: g.Election}
	if _, err := breadcrumb.Write(ctx, stale, path, rec("a", 5), v); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("write guarded by a vanished znode = %v, want ErrNoNode", err)
	}
	r, _, err := breadcrumb.Read(ctx, fresh, path)
	if err != nil || r.NodeID != "a" {
		t.Errorf("breadcrumb changed: %+v %v", r, err)
	}
}

func TestConcurrentWritersResolveByCAS(t *testing.T) {
	zks := zktest.Start(t, 1)
	for round := 0; round < 5; round++ {
		var gs []breadcrumb.Guard
		for range 4 {
			gs = append(gs, guard(t, session(t, zks)))
		}
		_, v, err := breadcrumb.Read(t.Context(), gs[0].Session, path)
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
				_, err := breadcrumb.Write(context.Background(), g, path, rec(string(rune('a'+i)), int64(round*10+i+1)), v)
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

// TestDecodeValidatesFields checks that every field of a record follows
// the config's rule for it, so that a reader never hands a hook or fencer a
// value it cannot start with.
func TestDecodeValidatesFields(t *testing.T) {
	const since = `"since":"2026-01-02T03:04:05Z"`
	good := `{"version":1,"node_id":"node-a","host":"db1.example.com","admin_url":"http://10.0.0.1:9101",` + since + `,"epoch":7}`
	if r, err := breadcrumb.Decode([]byte(good)); err != nil || r.NodeID != "node-a" || r.Epoch != 7 || r.Instance != "" {
		t.Fatalf("Decode(good) = %+v, %v", r, err)
	}
	withInstance := strings.Replace(good, `"epoch":7`, `"epoch":7,"instance":"9f3a0c1d2e4b5a67"`, 1)
	if r, err := breadcrumb.Decode([]byte(withInstance)); err != nil || r.Instance != "9f3a0c1d2e4b5a67" {
		t.Fatalf("Decode(with instance) = %+v, %v", r, err)
	}
	withAddress := strings.Replace(good, `"epoch":7`, `"epoch":7,"service_address":"db1.example.com:6379"`, 1)
	if r, err := breadcrumb.Decode([]byte(withAddress)); err != nil || r.ServiceAddress != "db1.example.com:6379" {
		t.Fatalf("Decode(with service address) = %+v, %v", r, err)
	}
	// Written only when configured: a record without one reads the same in
	// earlier versions, which decode strictly.
	if b, _ := breadcrumb.Encode(rec("a", 1)); strings.Contains(string(b), "service_address") {
		t.Errorf("Encode wrote an empty service_address: %s", b)
	}
	for _, tc := range []struct{ name, data, reason string }{
		{"NUL in node_id", `{"version":1,"node_id":"a\u0000","host":"h","epoch":1}`, `node_id "a\x00" is not a valid node id`},
		{"newline in node_id", `{"version":1,"node_id":"a\nb","host":"h","epoch":1}`, "is not a valid node id"},
		{"slash in node_id", `{"version":1,"node_id":"../x","host":"h","epoch":1}`, "is not a valid node id"},
		{"space in node_id", `{"version":1,"node_id":"a b","host":"h","epoch":1}`, "is not a valid node id"},
		{"dot-dot node_id", `{"version":1,"node_id":"..","host":"h","epoch":1}`, "is not a valid node id"},
		{"no host", `{"version":1,"node_id":"a","epoch":1}`, "host is empty"},
		{"NUL in host", `{"version":1,"node_id":"a","host":"h\u0000","epoch":1}`, "is not a host name or IP address"},
		{"shell in host", `{"version":1,"node_id":"a","host":"db1; touch /tmp/x","epoch":1}`, "is not a host name or IP address"},
		{"CR in host", `{"version":1,"node_id":"a","host":"h\r","epoch":1}`, "is not a host name or IP address"},
		{"admin_url not http", `{"version":1,"node_id":"a","host":"h","admin_url":"file:///etc/passwd","epoch":1}`, "not an http or https URL"},
		{"admin_url without host", `{"version":1,"node_id":"a","host":"h","admin_url":"http:///x","epoch":1}`, "not an http or https URL"},
		{"NUL in admin_url", `{"version":1,"node_id":"a","host":"h","admin_url":"http://h/\u0000","epoch":1}`, "control characters"},
		{"C1 control in admin_url", `{"version":1,"node_id":"a","host":"h","admin_url":"http://h/\u0085","epoch":1}`, "control characters"},
		{"epoch 0", `{"version":1,"node_id":"a","host":"h","epoch":0}`, "epoch 0 is not positive"},
		{"negative epoch", `{"version":1,"node_id":"a","host":"h","epoch":-3}`, "epoch -3 is not positive"},
		{"NUL in instance", `{"version":1,"node_id":"a","host":"h","epoch":1,"instance":"ab\u0000"}`, "is not a valid instance id"},
		{"service_address without port", `{"version":1,"node_id":"a","host":"h","epoch":1,"service_address":"h"}`, "service_address \"h\": not host:port"},
		{"service_address port 0", `{"version":1,"node_id":"a","host":"h","epoch":1,"service_address":"h:0"}`, "port must be a number"},
		{"newline in service_address", `{"version":1,"node_id":"a","host":"h","epoch":1,"service_address":"h:1\n"}`, "control characters"},
		{"space in instance", `{"version":1,"node_id":"a","host":"h","epoch":1,"instance":"a b"}`, "is not a valid instance id"},
	} {
		_, err := breadcrumb.Decode([]byte(tc.data))
		var ce *breadcrumb.CorruptError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, tc.reason) {
			t.Errorf("%s: Decode = %v, want a *CorruptError with reason containing %q", tc.name, err, tc.reason)
			continue
		}
		if !strings.Contains(err.Error(), "failoverd breadcrumb clear") {
			t.Errorf("%s: error %q does not say how to recover", tc.name, err)
		}
		if strings.ContainsRune(err.Error(), 0) {
			t.Errorf("%s: error message carries a raw NUL: %q", tc.name, err)
		}
		if v := breadcrumb.Assess(breadcrumb.Record{}, err, "b", 9); v != breadcrumb.Refuse {
			t.Errorf("%s: Assess = %v, want refuse", tc.name, v)
		}
	}
	// A leader cannot write what its successors would refuse.
	if _, err := breadcrumb.Encode(rec("a\x00", 1)); err == nil {
		t.Error("Encode accepted a node id with a NUL")
	}
}

// envSafe reports why s cannot go into an environment variable or argv
// element of a program, or "" if it can.
func envSafe(s string) string {
	if _, err := syscall.ByteSliceFromString("FAILOVERD_PREVIOUS_LEADER=" + s); err != nil {
		return err.Error()
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) || r == utf8.RuneError }) {
		return "control character, white space or invalid UTF-8"
	}
	return ""
}

func FuzzBreadcrumb(f *testing.F) {
	good, _ := breadcrumb.Encode(rec("a", 5))
	for _, s := range []string{string(good), "", "{}", "null",
		`{"version":1,"node_id":"a\u0000","host":"h","epoch":1}`, `{"version":1,"node_id":"a","host":"h","admin_url":"http://h:1/\u0085","epoch":1}`, `{"version":1}`, `{"version":1,"node_id":"a","epoch":1,"x":1}`, `{"version":99}`, "[1,2]", `{"version":1,"node_id":"a","epoch":1}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := breadcrumb.Decode(b)
		if err != nil {
			var ce *breadcrumb.CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Decode error %T is not *CorruptError", err)
			}
			return
		}
		// Whatever decodes is safe to hand to hooks and fencers.
		for name, v := range map[string]string{"node_id": r.NodeID, "host": r.Host, "admin_url": r.AdminURL, "instance": r.Instance, "service_address": r.ServiceAddress} {
			if why := envSafe(v); why != "" {
				t.Fatalf("Decode accepted %s %q, which cannot go into an environment variable or argv: %s", name, v, why)
			}
		}
		if r.NodeID == "" || r.Host == "" || r.Epoch <= 0 {
			t.Fatalf("Decode accepted an incomplete record %+v", r)
		}
		// Whatever decodes must round-trip.
		enc, err := breadcrumb.Encode(r)
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		r2, err := breadcrumb.Decode(enc)
		if err != nil || r2.NodeID != r.NodeID || r2.Epoch != r.Epoch || !r2.Since.Equal(r.Since) {
			t.Fatalf("round trip: %+v -> %+v, %v", r, r2, err)
		}
	})
}
