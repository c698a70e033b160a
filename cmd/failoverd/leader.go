package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/failoverd/failoverd/admin"
	"github.com/failoverd/failoverd/adminapi"
	"github.com/failoverd/failoverd/cluster"
)

// cmdLeader prints the promoted leader (see cluster.LeaderOf) once, or with
// --watch once and then at every change until SIGINT or SIGTERM. Without
// --watch, no leader exits with exitNoLeader, so that a script can tell it
// from a failure to ask (exitRuntime: ZooKeeper unreachable within 10s).
func cmdLeader(args []string, stdout, stderr io.Writer) int {
	f := newFlags("leader", "leader -c FILE [--json] [--watch]", stderr)
	asJSON := f.fs.Bool("json", false, `print JSON: the leader as GET /v1/leader answers it, or {"error":"no leader"}`)
	watch := f.fs.Bool("watch", false, "print the leader, then one line per change, until interrupted")
	if code := f.parse(args); code >= 0 {
		return code
	}
	_, store, closeStore, code := connect(f.config, stderr)
	if code >= 0 {
		return code
	}
	defer closeStore()
	if *watch {
		return watchLeader(store, stdout, *asJSON)
	}
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	l, err := store.Leader(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "failoverd: reading the leader:", err)
		return exitRuntime
	}
	if l == nil {
		if mv := movedOf(ctx, store); mv != nil {
			fmt.Fprintf(stderr, "failoverd: this cluster moved to %s (failoverd migrate); this configuration names the old place\n", mv)
			return exitRuntime
		}
	}
	printLeader(stdout, l, *asJSON)
	if l == nil {
		return exitNoLeader
	}
	return exitOK
}

// watchLeader prints every change of the leader until SIGINT or SIGTERM.
// While ZooKeeper is unreachable nothing is printed: the last line stands
// until the leader is read again (and a line follows only if it changed).
func watchLeader(store operatorStore, stdout io.Writer, asJSON bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The watch also reports the leader's position moving (standbys
	// follow it); a line is printed only when what it shows changed.
	var last *adminapi.Leader
	first := true
	_ = store.WatchLeader(ctx, func(l *cluster.Leader) {
		var cur *adminapi.Leader
		if l != nil {
			a := admin.LeaderAnswer(l)
			cur = &a
		}
		if !first && (cur == nil && last == nil || cur != nil && last != nil && sameAnswer(*cur, *last)) {
			return
		}
		first, last = false, cur
		printLeader(stdout, l, asJSON)
	})
	return exitOK
}

// sameAnswer compares two printed leaders field by field (times by
// instant).
func sameAnswer(a, b adminapi.Leader) bool {
	return a.NodeID == b.NodeID && a.Host == b.Host && a.ServiceAddress == b.ServiceAddress &&
		a.AdminURL == b.AdminURL && a.Epoch == b.Epoch && a.Since.Equal(b.Since)
}

// printLeader writes one line: "leader ID host=H address=A epoch=E
// since=T" or "no leader", or with asJSON the leader's JSON object (the
// body of GET /v1/leader) or {"error":"no leader"} (the body of its 503).
func printLeader(w io.Writer, l *cluster.Leader, asJSON bool) {
	switch {
	case asJSON && l == nil:
		fmt.Fprintln(w, `{"error":"no leader"}`)
	case asJSON:
		b, _ := json.Marshal(admin.LeaderAnswer(l))
		fmt.Fprintf(w, "%s\n", b)
	case l == nil:
		fmt.Fprintln(w, "no leader")
	default:
		fmt.Fprintf(w, "leader %s host=%s address=%s epoch=%d since=%s\n",
			l.NodeID, l.Host, l.ServiceAddress, l.Epoch, l.Since.UTC().Format(time.RFC3339))
	}
}

// leaderView is the daemon's view of the promoted leader, which GET
// /v1/leader answers; run keeps it current with Store.WatchLeader.
//
// The rule: an answer lags the cluster by at most about one session timeout
// plus one poll; past that the view answers an error (a 503 that says this
// node cannot tell).
//
// How: a sync (Store.Fresh; on etcd a linearizable read) that the server
// this node talks to answers proves that server in touch with the quorum's
// leader, and that it has delivered to our watches every change committed
// before the sync was sent. The view sends one only when it is asked, never
// on a timer, so an idle daemon sends none:
//
//  1. If the last answered sync was sent less than a poll (session timeout
//     / 5, at least 200 ms) ago, Leader answers at once.
//  2. Otherwise it sends a sync, or joins the one in flight, and waits for
//     it at most wait (one second) from that sync's start.
//  3. It answers the leader while the last answered sync is at most one
//     session timeout (zookeeper.session_timeout; etcd: the lease TTL) old,
//     else the error.
//
// So while the server answers, an answer lags by at most about one poll. A
// short disconnect (a server restart, a network blip, which the session
// survives) keeps the last leader until the session timeout, so that
// clients do not all lose it at once; a longer one (this node lost
// ZooKeeper, or its server was cut off from the quorum and still serves old
// reads) answers the error. A view not asked for longer than a session
// timeout has no recent sync to fall back on: its first answer needs a
// sync to succeed. The exception is a ZooKeeper leader cut off from its
// followers, which answers syncs until it steps down (syncLimit x
// tickTime): a client must rely on fencing, not on this answer, to keep an
// old leader from acting.
type leaderView struct {
	watch func(context.Context, func(*cluster.Leader)) error // Store.WatchLeader
	fresh func(context.Context) error                        // Store.Fresh
	stale time.Duration                                      // the session timeout (etcd: the lease TTL)
	// service names the coordination service in errors ("": ZooKeeper).
	service string
	poll    time.Duration // how old the last answered sync may be to answer without a new one
	wait    time.Duration // how long Leader waits for a sync (0: defaultLeaderWait)
	now     func() time.Time

	mu sync.Mutex
	// ctx is run's (nil before run). A sync is shared by the callers
	// that wait for it, so it must not end with one caller's request:
	// it runs under the view's lifetime instead.
	ctx     context.Context
	known   bool // the leader was read at least once
	leader  *cluster.Leader
	freshAt time.Time  // when the last answered sync was sent (zero: none yet)
	syncing *freshCall // the sync in flight, nil when none
	stopped bool
}

// defaultLeaderWait bounds how long Leader waits for a sync it asked for.
const defaultLeaderWait = time.Second

// freshCall is one sync, shared by every Leader call that waits for it.
type freshCall struct {
	done  chan struct{} // closed once it answered or failed, freshAt moved
	until time.Time     // when its waiters stop waiting (wall clock)
}

func newLeaderView(store operatorStore, sessionTimeout time.Duration, service string) *leaderView {
	return &leaderView{watch: store.WatchLeader, fresh: store.Fresh, stale: sessionTimeout, service: service,
		poll: max(sessionTimeout/5, 200*time.Millisecond), wait: defaultLeaderWait, now: time.Now}
}

// run follows the leader until ctx ends; the syncs Leader sends end with
// ctx too.
func (v *leaderView) run(ctx context.Context) error {
	v.mu.Lock()
	v.ctx = ctx
	v.mu.Unlock()
	_ = v.watch(ctx, v.set) // returns when ctx ends
	v.mu.Lock()
	v.stopped = true
	c := v.syncing
	v.mu.Unlock()
	if c != nil {
		<-c.done
	}
	return nil
}

func (v *leaderView) set(l *cluster.Leader) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.known, v.leader = true, l
}

// startFresh sends a sync (for at most one session timeout) in the
// background and notes when the last answered one was sent. v.mu is held.
func (v *leaderView) startFresh() *freshCall {
	wait := v.wait
	if wait <= 0 {
		wait = defaultLeaderWait
	}
	c := &freshCall{done: make(chan struct{}), until: time.Now().Add(wait)}
	v.syncing = c
	ctx := v.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	go func() {
		defer close(c.done) // after freshAt moved: waiters read it
		sent := v.now()
		sctx, cancel := context.WithTimeout(ctx, v.stale)
		err := v.fresh(sctx)
		cancel()
		v.mu.Lock()
		defer v.mu.Unlock()
		v.syncing = nil
		if err == nil && sent.After(v.freshAt) {
			v.freshAt = sent
		}
	}()
	return c
}

func (v *leaderView) serviceName() string {
	if v.service == "" {
		return "ZooKeeper"
	}
	return v.service
}

// Leader implements admin.LeaderSource, by the steps in leaderView's
// comment; before the first read and once stopped it answers at once. It
// never holds v.mu while it waits.
func (v *leaderView) Leader() (*cluster.Leader, error) {
	v.mu.Lock()
	if v.stopped || !v.known || !v.freshAt.IsZero() && v.now().Sub(v.freshAt) < v.poll {
		defer v.mu.Unlock()
		return v.answer()
	}
	c := v.syncing
	if c == nil {
		c = v.startFresh()
	}
	v.mu.Unlock()
	t := time.NewTimer(time.Until(c.until))
	select {
	case <-c.done:
	case <-t.C:
	}
	t.Stop()
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.answer()
}

// answer is the view's answer by the last answered sync. v.mu is held.
func (v *leaderView) answer() (*cluster.Leader, error) {
	switch {
	case v.stopped:
		return nil, errors.New("the daemon is stopping")
	case !v.known:
		return nil, fmt.Errorf("the leader has not been read from %s yet", v.serviceName())
	case v.freshAt.IsZero() && v.service == "etcd":
		return nil, errors.New("etcd has not answered a linearizable read yet")
	case v.freshAt.IsZero():
		return nil, errors.New("no ZooKeeper server has answered a sync yet")
	case v.now().Sub(v.freshAt) > v.stale && v.service == "etcd":
		return nil, fmt.Errorf("no linearizable read answered by etcd for %v, longer than the lease TTL (%v): the last leader seen may be stale",
			v.now().Sub(v.freshAt).Round(time.Millisecond), v.stale)
	case v.now().Sub(v.freshAt) > v.stale:
		return nil, fmt.Errorf("no sync answered by the ZooKeeper quorum for %v, longer than the session timeout (%v): the last leader seen may be stale",
			v.now().Sub(v.freshAt).Round(time.Millisecond), v.stale)
	}
	return v.leader, nil
}
