package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/etcdcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/etcdtest"
	"github.com/failoverd/failoverd/test/zktest"
)

// clearStore is an operatorStore holding member records.
type clearStore struct {
	operatorStore // the methods clearBreadcrumb does not use: nil, never called
	members       []cluster.Member
	cleared       bool
}

func (s *clearStore) Members(context.Context) ([]cluster.Member, error) { return s.members, nil }

func (s *clearStore) ClearBreadcrumb(_ context.Context, rev cluster.Revision) error {
	if rev != cluster.RevisionOf(7) {
		return fmt.Errorf("cleared at %v, want the revision read (7)", rev)
	}
	s.cleared = true
	return nil
}

// The breadcrumb tells the next leader whom to fence: clear refuses while
// the node it names runs, needs --force for a readable one whose node is
// gone, and clears an unreadable one as it is.
func TestBreadcrumbClearGuards(t *testing.T) {
	rec, err := breadcrumb.Encode(breadcrumb.Record{NodeID: "node-c", Host: "10.0.0.13", Epoch: 42, Since: time.Unix(1, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		members []string
		force   bool
		code    int
		cleared bool
		out     string
	}{
		{"its node runs", rec, []string{"node-a", "node-c"}, false, exitRuntime, false, "refused: the breadcrumb names node-c (epoch 42), whose failoverd is running"},
		{"its node runs, forced", rec, []string{"node-c"}, true, exitRuntime, false, "refused"},
		{"its node gone, not forced", rec, []string{"node-a"}, false, exitRuntime, false, "with --force"},
		{"its node gone, forced", rec, []string{"node-a"}, true, exitOK, true, "of node-c (epoch 42) cleared: the next leader will not fence node-c"},
		{"unreadable", []byte("garbage"), []string{"node-a"}, false, exitOK, true, "unreadable breadcrumb /b cleared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &clearStore{}
			for _, id := range tc.members {
				s.members = append(s.members, cluster.Member{NodeID: id, State: "standby"})
			}
			var out, errs bytes.Buffer
			code := clearBreadcrumb(context.Background(), s, "/b", tc.data, cluster.RevisionOf(7), tc.force, &out, &errs)
			if code != tc.code || s.cleared != tc.cleared || !strings.Contains(out.String()+errs.String(), tc.out) {
				t.Errorf("exit %d (want %d), cleared %v (want %v), output %q%q, want %q", code, tc.code, s.cleared, tc.cleared, out.String(), errs.String(), tc.out)
			}
		})
	}
}

// racingStore is a real store whose member read, clear's check that the
// node the breadcrumb names is down (between its read and its delete),
// first runs rewrite once: a new leader writing its breadcrumb just then.
type racingStore struct {
	operatorStore
	rewrite func()
}

func (s *racingStore) Members(ctx context.Context) ([]cluster.Member, error) {
	if s.rewrite != nil {
		s.rewrite()
		s.rewrite = nil
	}
	return s.operatorStore.Members(ctx)
}

// A clear racing a new leader's breadcrumb write, on a real ZooKeeper and
// a real etcd: the operator checked node-c's breadcrumb, node-a's replaced
// it before the delete, and clear refuses, saying what changed, and leaves
// node-a's in place; run again, it clears node-a's (node-a has no running
// daemon here).
func TestBreadcrumbClearKeepsARewrite(t *testing.T) {
	for _, be := range []struct {
		name  string
		start func(t *testing.T) (conf string, put func(path string, data []byte))
	}{
		{"zookeeper", func(t *testing.T) (string, func(string, []byte)) {
			zkc := zktest.Start(t, 1)
			client, err := zk.NewClient(zk.Config{Servers: zkc.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			sess, err := client.Session(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return writeLeaderConfig(t, zkc.Addrs()[0]), func(p string, data []byte) {
				if err := sess.EnsurePath(t.Context(), path.Dir(p)); err != nil {
					t.Fatal(err)
				}
				_, err := sess.Set(t.Context(), p, data, -1)
				if errors.Is(err, zk.ErrNoNode) {
					_, _, err = sess.Create(t.Context(), p, data, zk.Persistent)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"etcd", func(t *testing.T) (string, func(string, []byte)) {
			c := etcdtest.Start(t, etcdtest.Options{Members: 1})
			cli, err := etcdcluster.Dial(etcdcluster.DialConfig{Endpoints: c.Endpoints()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() })
			return writeEtcdConfig(t, c.Endpoints()), func(p string, data []byte) {
				if _, err := cli.Put(t.Context(), p, string(data)); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(be.name, func(t *testing.T) {
			conf, put := be.start(t)
			var errb bytes.Buffer
			cfg, store, closeStore, code := connect(conf, &errb)
			if code >= 0 {
				t.Fatalf("connect: exit %d, %s", code, errb.String())
			}
			defer closeStore()
			p := layoutOf(cfg).Breadcrumb()
			crumb := func(id string, epoch int64) []byte {
				b, err := breadcrumb.Encode(breadcrumb.Record{NodeID: id, Host: "10.0.0.1", Epoch: epoch, Since: time.Unix(1, 0).UTC()})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			put(p, crumb("node-c", 42))

			ctx := t.Context()
			rs := &racingStore{operatorStore: store, rewrite: func() { put(p, crumb("node-a", 43)) }}
			var out, errs bytes.Buffer
			code = breadcrumbAction(ctx, rs, p, "clear", true, &out, &errs)
			if code != exitRuntime || !strings.Contains(errs.String(), "changed since it was read (it held node-c, epoch 42); it now holds node-a, epoch 43") ||
				!strings.Contains(errs.String(), "run clear again") {
				t.Fatalf("clear racing a rewrite: exit %d, %q, %q; want a refusal naming both records", code, out.String(), errs.String())
			}
			data, _, err := store.ReadBreadcrumbData(ctx)
			if r, derr := breadcrumb.Decode(data); err != nil || derr != nil || r.NodeID != "node-a" || r.Epoch != 43 {
				t.Fatalf("the breadcrumb after a clear that raced a rewrite: %q, %v; want node-a's at epoch 43", data, err)
			}

			cli := func(args ...string) (string, string, int) {
				var out, errb bytes.Buffer
				code := run(append(args[:1:1], append([]string{"-c", conf}, args[1:]...)...), &out, &errb)
				return out.String(), errb.String(), code
			}
			if out, errs, code := cli("breadcrumb", "clear", "--force"); code != exitOK || !strings.Contains(out, "of node-a (epoch 43) cleared") {
				t.Fatalf("clear again: exit %d, %q, %q", code, out, errs)
			}
			if out, errs, code := cli("breadcrumb", "show"); code != exitOK || out != "no breadcrumb\n" {
				t.Fatalf("show after clear: exit %d, %q, %q", code, out, errs)
			}
		})
	}
}

// goneStore's breadcrumb went between clear's read and its delete.
type goneStore struct{ clearStore }

func (s *goneStore) ClearBreadcrumb(context.Context, cluster.Revision) error {
	return fmt.Errorf("clearing breadcrumb /b: %w", breadcrumb.ErrAbsent)
}

// A breadcrumb deleted by someone else between clear's read and its
// delete: nothing is left to clear, and clear says so and succeeds.
func TestBreadcrumbClearFindsItGone(t *testing.T) {
	var out, errs bytes.Buffer
	code := clearBreadcrumb(context.Background(), &goneStore{}, "/b", []byte("garbage"), cluster.RevisionOf(7), false, &out, &errs)
	if code != exitOK || !strings.Contains(out.String(), "breadcrumb /b is already gone") {
		t.Errorf("exit %d, %q, %q; want exit 0 saying it is gone", code, out.String(), errs.String())
	}
}
