package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/freeport"
	"github.com/failoverd/failoverd/test/zktest"
)

// fakeClock is a settable now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The daemon's leader view answers what WatchLeader delivered last, an
// error before the first delivery, and an error while no ZooKeeper server
// has answered a sync for longer than the session timeout (the view may be
// stale then: no connection, or a server cut off from the quorum), the
// last value again once it is back; and an error once it stopped. The
// syncs are sent by the asks themselves.
func TestLeaderViewStaleness(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)}
	var up sync.Map // "up" -> bool
	up.Store("up", true)
	deliver, delivered := make(chan *cluster.Leader), make(chan struct{})
	give := func(l *cluster.Leader) { deliver <- l; <-delivered }
	v := &leaderView{
		watch: func(ctx context.Context, fn func(*cluster.Leader)) error {
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case l := <-deliver:
					fn(l)
					delivered <- struct{}{}
				}
			}
		},
		fresh: func(context.Context) error {
			if b, _ := up.Load("up"); !b.(bool) {
				return errors.New("no sync answered")
			}
			return nil
		},
		stale: 4 * time.Second, poll: time.Millisecond, now: clock.now,
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- v.run(ctx) }()

	if l, err := v.Leader(); err == nil {
		t.Fatalf("before the first read: %+v, want an error", l)
	}
	a := &cluster.Leader{NodeID: "a", Epoch: 3}
	give(a)
	if l, err := v.Leader(); err != nil || l != a {
		t.Fatalf("after a was delivered: %+v, %v", l, err)
	}
	give(nil)
	if l, err := v.Leader(); err != nil || l != nil {
		t.Fatalf("after none was delivered: %+v, %v; want none", l, err)
	}
	give(a)

	// The connection goes down: the view stands for one session timeout.
	up.Store("up", false)
	clock.add(4 * time.Second)
	if l, err := v.Leader(); err != nil || l != a {
		t.Fatalf("down for the session timeout: %+v, %v; want a still", l, err)
	}
	clock.add(10 * time.Millisecond)
	if l, err := v.Leader(); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("down for longer than the session timeout: %+v, %v; want an error", l, err)
	}
	up.Store("up", true)
	if l, err := v.Leader(); err != nil || l != a {
		t.Fatalf("connected again: %+v, %v; want a", l, err)
	}
	// A new disconnect counts from its own start.
	up.Store("up", false)
	clock.add(time.Second)
	if l, err := v.Leader(); err != nil || l != a {
		t.Fatalf("down for 1s: %+v, %v; want a", l, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run returned %v", err)
	}
	if _, err := v.Leader(); err == nil {
		t.Fatal("a stopped view answers")
	}
}

// writeLeaderConfig writes a config of cluster lc on servers.
func writeLeaderConfig(t *testing.T, servers string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.yaml")
	cfg := fmt.Sprintf(`cluster: lc
node: {id: cli, host: 127.0.0.1}
zookeeper: {servers: [%q], root: /failoverd, session_timeout: 4s, tick_time: %s}
health: {http: {url: "http://127.0.0.1:8080/health"}}
service:
  promote: {command: [/bin/true]}
  demote: {command: [/bin/true]}
fencing: {methods: [{shell: {command: [/bin/true]}}]}
`, servers, zktest.TickTime)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// failoverd leader against a real ZooKeeper: "no leader" and exit 3
// before anybody is promoted, the leader's line or JSON (the body of GET
// /v1/leader) and exit 0 after, and a clear error with exit 1 within a
// bounded time when ZooKeeper cannot be reached.
func TestLeaderCommand(t *testing.T) {
	zkc := zktest.Start(t, 1)
	conf := writeLeaderConfig(t, zkc.Addrs()[0])
	leader := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(append([]string{"leader", "-c", conf}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	if out, errs, code := leader(); code != exitNoLeader || out != "no leader\n" {
		t.Fatalf("leader without one: exit %d, %q, %q; want 3 and \"no leader\"", code, out, errs)
	}
	if out, _, code := leader("--json"); code != exitNoLeader || out != "{\"error\":\"no leader\"}\n" {
		t.Fatalf("leader --json without one: exit %d, %q", code, out)
	}

	// Node b is promoted at epoch 5: its breadcrumb, then its member record.
	client, err := zk.NewClient(zk.Config{Servers: zkc.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	layout := cluster.Layout{Root: "/failoverd", Cluster: "lc"}
	store, err := zkcluster.New(zkcluster.Config{Layout: layout, NodeID: "b", Instance: "i-b"}, zkcluster.Deps{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	sess, err := client.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 11, 23, 17, 30, 0, 0, time.UTC)
	bc, _ := breadcrumb.Encode(breadcrumb.Record{NodeID: "b", Host: "10.0.0.2", Epoch: 5, Since: since})
	if err := sess.EnsurePath(ctx, layout.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(ctx, layout.Breadcrumb(), bc, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	m := cluster.Member{Cluster: "lc", NodeID: "b", Host: "10.0.0.2", State: cluster.StateLeader, Role: "leader",
		Epoch: 5, Since: since, Instance: "i-b", ServiceAddress: "10.0.0.2:6379"}
	if err := store.PublishMember(ctx, m); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := leader(); code != exitOK || out != "leader b host=10.0.0.2 address=10.0.0.2:6379 epoch=5 since=2026-11-23T17:30:00Z\n" {
		t.Fatalf("leader: exit %d, %q, %q", code, out, errs)
	}
	out, _, code := leader("--json")
	var got adminapi.Leader
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil ||
		got != (adminapi.Leader{NodeID: "b", Host: "10.0.0.2", ServiceAddress: "10.0.0.2:6379", Epoch: 5, Since: since}) {
		t.Fatalf("leader --json: exit %d, %q", code, out)
	}

	// Nothing listens: a bounded wait, then exit 1 naming the servers.
	ports := freeport.Take(t, 1)
	conf = writeLeaderConfig(t, fmt.Sprintf("127.0.0.1:%d", ports[0]))
	start := time.Now()
	out, errs, code := leader()
	if code != exitRuntime || out != "" || !strings.Contains(errs, "cannot reach zookeeper") || time.Since(start) > 30*time.Second {
		t.Fatalf("leader without ZooKeeper: exit %d after %v, stdout %q, stderr %q", code, time.Since(start), out, errs)
	}
}
