package etcdcluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// testTTL is the lease the tests ask for: etcdtest's election timeout of
// 1s makes etcd's smallest 2s; 3s leaves a loaded machine room.
const testTTL = 3 * time.Second

var layoutN atomic.Int64

// newLayout is a layout no other test uses.
func newLayout() cluster.Layout {
	return cluster.Layout{Root: "/failoverd", Cluster: fmt.Sprintf("t%d", layoutN.Add(1))}
}

// node is one daemon's view of a cluster: its own client, Conn and Store.
type node struct {
	id   string
	cli  *clientv3.Client
	conn *Conn
	s    *Store
}

// newNode connects node id to endpoints with a client, a Conn and a Store
// of its own, closed when the test ends.
func newNode(t *testing.T, endpoints []string, l cluster.Layout, id string) *node {
	t.Helper()
	cli, err := Dial(DialConfig{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := NewConn(cli, ConnConfig{LeaseTTL: testTTL, Logger: testLogger(id)})
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

// testLogger logs to stderr when ETCDCLUSTER_DEBUG is set (nil: discard).
func testLogger(id string) *slog.Logger {
	if os.Getenv("ETCDCLUSTER_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
}

// session waits for n's live session.
func (n *node) session(t *testing.T) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := n.conn.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// won is a term handed to a campaign's callback.
type won struct {
	t     *wonTerm
	ctx   context.Context
	at    time.Time
	node  string
	leave chan struct{} // closing it returns the callback
}

// release returns the term's callback (once).
func (w *won) release() {
	select {
	case <-w.leave:
	default:
		close(w.leave)
	}
}

// campaign starts n's elector in mode and returns its terms as they are
// won; each is held until released, its context ends, or the test ends.
// stop ends the candidacy and waits for Campaign to return.
func (n *node) campaign(t *testing.T, mode Mode) (terms <-chan *won, stop func()) {
	t.Helper()
	return n.campaignWith(t, ElectorConfig{NodeID: n.id, Mode: mode, DemoteBudget: 500 * time.Millisecond})
}

// campaignWith is campaign with an elector of configuration cfg.
func (n *node) campaignWith(t *testing.T, cfg ElectorConfig) (terms <-chan *won, stop func()) {
	t.Helper()
	el, err := n.s.Elector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan *won, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		el.Campaign(ctx, func(ctx context.Context, tm cluster.Term) {
			w := &won{t: asWon(tm), ctx: ctx, at: time.Now(), node: n.id, leave: make(chan struct{})}
			ch <- w
			select {
			case <-ctx.Done():
			case <-w.leave:
			}
		})
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return ch, stop
}

// next returns the next term won on ch.
func next(t *testing.T, ch <-chan *won) *won {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(30 * time.Second):
		t.Fatal("not elected within 30s")
	}
	return nil
}

// none checks that nothing is won on ch for d.
func none(t *testing.T, ch <-chan *won, d time.Duration, what string) {
	t.Helper()
	select {
	case w := <-ch:
		t.Fatalf("%s: %s won (epoch %d)", what, w.node, w.t.epoch)
	case <-time.After(d):
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ctxT is a context for one call of a test.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// admin is an operator's client of the whole cluster.
func admin(t *testing.T, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := Dial(DialConfig{Endpoints: c.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func member(id, state string, epoch int64) cluster.Member {
	return cluster.Member{Cluster: "t", NodeID: id, Host: "host-" + id, State: state, Role: "standby",
		Health: "healthy", Epoch: epoch, Since: time.Now().UTC().Truncate(time.Millisecond), Version: "test", Instance: "inst-" + id}
}

// proxiedClient is a client of c's first member through a DelayProxy, so
// that a test can hold or cut its traffic.
func proxiedClient(t *testing.T, c *etcdtest.Cluster) (*etcdtest.DelayProxy, *clientv3.Client) {
	t.Helper()
	proxy := etcdtest.NewDelayProxy(t, c.Members[0].ClientAddr())
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + proxy.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return proxy, cli
}

// wonTerm is a won term as the tests use it: the controller's Term, with
// the fields of the backend's term under it.
type wonTerm struct {
	cluster.Term
	s     *Store
	sess  *Session
	key   string
	epoch int64
}

// asWon is tm as a wonTerm.
func asWon(tm cluster.Term) *wonTerm {
	p := cluster.Primitive(tm).(*term)
	return &wonTerm{Term: tm, s: p.s, sess: p.sess, key: p.key, epoch: p.epoch}
}
