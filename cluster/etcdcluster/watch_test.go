package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// recorder keeps what a watch delivered, as strings.
type recorder struct {
	name string
	mu   sync.Mutex
	got  []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// became waits until the newest delivery is want.
func (r *recorder) became(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := r.all()
		if len(got) > 0 && got[len(got)-1] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s delivered %q; want %q last", r.name, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watch runs a Watch* method in the background until the test ends.
func watch[T any](t *testing.T, name string, w func(context.Context, func(T)) error, show func(T) string) *recorder {
	r := &recorder{name: name}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w(ctx, func(v T) { r.add(show(v)) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func showPause(p *cluster.Pause) string {
	if p == nil {
		return "none"
	}
	return p.Reason
}

func showFailover(r *cluster.FailoverRequest) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%s->%s done=%t", r.ID, r.To, r.Done)
}

func showMembers(ms []cluster.Member) string {
	var s []string
	for _, m := range ms {
		s = append(s, fmt.Sprintf("%s:%s:%d", m.NodeID, m.State, m.Epoch))
	}
	return "[" + strings.Join(s, " ") + "]"
}

func showLeader(l *cluster.Leader) string {
	if l == nil {
		return "none"
	}
	return fmt.Sprintf("%s@%d", l.NodeID, l.Epoch)
}

// Watches deliver the current value first, then every change, each once,
// in order; the leader view names a node only once its member record and
// the breadcrumb agree.
func testWatches(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	a := newNode(t, c.Endpoints(), l, "a")
	w := newNode(t, c.Endpoints(), l, "w")
	ctx := ctxT(t)
	if _, _, err := a.s.SetPause(ctx, cluster.Pause{By: "op", Reason: "first"}); err != nil {
		t.Fatal(err)
	}
	pause := watch(t, "WatchPause", w.s.WatchPause, showPause)
	fo := watch(t, "WatchFailover", w.s.WatchFailover, showFailover)
	mem := watch(t, "WatchMembers", w.s.WatchMembers, showMembers)
	ld := watch(t, "WatchLeader", w.s.WatchLeader, showLeader)
	pause.became(t, "first")
	fo.became(t, "none")
	mem.became(t, "[]")
	ld.became(t, "none")

	if _, err := a.s.ClearPause(ctx); err != nil {
		t.Fatal(err)
	}
	pause.became(t, "none")
	if err := a.s.ProposeFailover(ctx, cluster.FailoverRequest{To: "a", ID: "r1"}); err != nil {
		t.Fatal(err)
	}
	fo.became(t, "r1->a done=false")
	ch, _ := a.campaign(t, Fair)
	tm := next(t, ch).t
	e := tm.Epoch()
	if err := a.s.PublishMember(ctx, member("a", "promoting", e)); err != nil {
		t.Fatal(err)
	}
	mem.became(t, fmt.Sprintf("[a:promoting:%d]", e))
	if _, err := tm.WriteBreadcrumb(ctx, crumb("a", e), cluster.Revision{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := a.s.PublishMember(ctx, member("a", cluster.StateLeader, e)); err != nil {
		t.Fatal(err)
	}
	ld.became(t, fmt.Sprintf("a@%d", e))
	if err := tm.CompleteFailover(ctx, tm.Epoch()); err != nil {
		t.Fatal(err)
	}
	fo.became(t, "r1->a done=true")

	for _, r := range []*recorder{pause, fo, mem, ld} {
		got := r.all()
		for i := 1; i < len(got); i++ {
			if got[i] == got[i-1] {
				t.Errorf("%s delivered %q twice in a row: %q", r.name, got[i], got)
			}
		}
	}
	if got := ld.all(); len(got) != 2 {
		t.Errorf("WatchLeader delivered %q; want none, then a@%d (never a before its record and the breadcrumb agreed)", got, e)
	}
	if got := pause.all(); strings.Join(got, ",") != "first,none" {
		t.Errorf("WatchPause delivered %q", got)
	}
}

// A watch whose revision was compacted meanwhile fails with ErrCompacted;
// the loop reads again and delivers the change anyway. The compaction
// lands between the watch loop's read and its watch.
func testWatchCompacted(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	l := newLayout()
	w := newNode(t, c.Endpoints(), l, "w")
	var once sync.Once
	var mu sync.Mutex
	var errs []error
	w.s.afterWatchRead = func() {
		once.Do(func() {
			ctx := ctxT(t)
			// Two writes: a compaction at revision r keeps r itself.
			_, err := adm.Put(ctx, l.Pause(), `{"by":"op","reason":"before compacted"}`)
			var r *clientv3.PutResponse
			if err == nil {
				r, err = adm.Put(ctx, l.Pause(), `{"by":"op","reason":"while compacted"}`)
			}
			if err == nil {
				_, err = adm.Compact(ctx, r.Header.Revision)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	w.s.watchInterrupted = func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	pause := watch(t, "WatchPause", w.s.WatchPause, showPause)
	pause.became(t, "while compacted")
	if got := pause.all(); len(got) != 2 || got[0] != "none" {
		t.Errorf("WatchPause delivered %q; want none, then the pause", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) == 0 || !errors.Is(errs[0], rpctypes.ErrCompacted) {
		t.Errorf("the watch was interrupted by %v; want ErrCompacted first", errs)
	}
}
