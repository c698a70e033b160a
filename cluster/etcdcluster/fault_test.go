package etcdcluster

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// expiryProbe polls a term's Expiry every millisecond and keeps the
// latest instant it reported and when it first failed.
type expiryProbe struct {
	mu      sync.Mutex
	latest  time.Time
	failed  time.Time
	failErr error
	stop    chan struct{}
	done    chan struct{}
}

func probe(tm cluster.Term) *expiryProbe {
	p := &expiryProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			exp, err := tm.Expiry()
			now := time.Now()
			p.mu.Lock()
			switch {
			case err != nil && p.failed.IsZero():
				p.failed, p.failErr = now, err
			case err == nil && exp.After(p.latest):
				p.latest = exp
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return p
}

// end stops polling and returns what it saw.
func (p *expiryProbe) end() (latest, failed time.Time, failErr error) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest, p.failed, p.failErr
}

// The isolated-member test (the Deadline obligation): leader a reaches
// etcd only through member X, which is cut off from its two peers while
// a's connection to it stays up; b campaigns through the other two. a's
// Expiry must fail, and its term end, before b wins, and b must win after
// the latest instant a's Expiry ever reported. X is an etcd follower, then
// the etcd leader (whose lease renewals, on Debian's 3.4, go on until it
// steps down), on every server line present.
func TestIsolatedMember(t *testing.T) {
	for _, srv := range etcdtest.Servers(t) {
		for _, role := range []string{"follower", "leader"} {
			t.Run(srv.Name+"/"+role, func(t *testing.T) {
				c := etcdtest.Start(t, etcdtest.Options{Server: srv})
				x := c.Leader()
				if role == "follower" {
					x = (x + 1) % 3
				}
				var others []string
				for i, m := range c.Members {
					if i != x {
						others = append(others, m.Endpoint())
					}
				}
				l := newLayout()
				a := newNode(t, []string{c.Members[x].Endpoint()}, l, "a")
				cha, _ := a.campaign(t, Fair)
				wa := next(t, cha)
				b := newNode(t, others, l, "b")
				chb, _ := b.campaign(t, Fair)
				waitFor(t, 20*time.Second, "b in the queue", func() bool {
					q, err := b.s.Queue(ctxT(t))
					return err == nil && len(q) == 2
				})
				time.Sleep(time.Second) // a few renewals
				if _, err := wa.t.Expiry(); err != nil {
					t.Fatalf("a's Expiry before the cut: %v", err)
				}
				p := probe(wa.t)
				cut := time.Now()
				c.Isolate(x)
				defer c.Heal(x)
				wb := next(t, chb)
				latest, failed, failErr := p.end()
				ended := time.Time{}
				select {
				case <-wa.ctx.Done():
					ended = time.Now() // an upper bound: checked below against the win
				default:
				}
				t.Logf("after the cut of %s (etcd %s): a's latest Expiry %v, a's Expiry failed %v (%v), b won %v",
					c.Members[x].Name, role, latest.Sub(cut).Round(time.Millisecond), failed.Sub(cut).Round(time.Millisecond),
					failErr, wb.at.Sub(cut).Round(time.Millisecond))
				if !wb.at.After(latest) {
					t.Errorf("b won %v before the latest instant a's Expiry reported", latest.Sub(wb.at))
				}
				switch {
				case failed.IsZero():
					t.Errorf("a's Expiry had not failed when b won")
				case !errors.Is(failErr, cluster.ErrLeaseExpired) && !errors.Is(failErr, cluster.ErrSessionExpired):
					t.Errorf("a's Expiry failed with %v; want ErrLeaseExpired or ErrSessionExpired", failErr)
				case !failed.Before(wb.at):
					t.Errorf("a's Expiry failed %v after b won", failed.Sub(wb.at))
				}
				if ended.IsZero() {
					t.Errorf("a's term context had not ended when b won")
				} else if cause := context.Cause(wa.ctx); !errors.Is(cause, cluster.ErrLeaseExpired) {
					t.Errorf("a's term ended with %v; want ErrLeaseExpired", cause)
				}
				if wb.t.Epoch() <= wa.t.Epoch() {
					t.Errorf("b's epoch %d is not above a's %d", wb.t.Epoch(), wa.t.Epoch())
				}
			})
		}
	}
}

// keyGone watches key from revision rev on cli and reports when it is
// deleted.
func keyGone(t *testing.T, cli *clientv3.Client, key string, rev int64) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		for r := range cli.Watch(t.Context(), key, clientv3.WithRev(rev)) {
			for _, ev := range r.Events {
				if ev.Type == mvccpb.DELETE {
					out <- time.Now()
					return
				}
			}
		}
	}()
	return out
}

// The deadline counts from when a renewal was sent, never from its answer
// and never from what etcd does with the lease. a's client reaches etcd
// through a proxy that delays what etcd sends back by 1.5s (a renewal is
// three round trips, so it is confirmed 4.5s after its first request:
// within the 10s lease); right after a renewal was confirmed the proxy
// carries nothing more. etcd renewed the lease when the renewal arrived,
// at once, and a's Expiry must fail before etcd deletes a's key (a
// deadline taken from an answer would be 1.5 to 4.5s later: after the
// delete). Then, with etcd's own leader stopped while a is cut off: the
// new etcd leader gives every lease a full TTL again, so a's key lives
// well past a's deadline, and a's Expiry still fails on time.
func TestDeadlineIsOurs(t *testing.T) {
	for _, leaderChange := range []bool{false, true} {
		name := "SendTime"
		if leaderChange {
			name = "EtcdLeaderChange"
		}
		t.Run(name, func(t *testing.T) {
			c := etcdtest.Start(t, etcdtest.Options{})
			adm := admin(t, c)
			leader := c.Leader()
			via := (leader + 1) % 3 // a's member: not the one stopped
			proxy := etcdtest.NewDelayProxy(t, c.Members[via].ClientAddr())
			l := newLayout()
			const ttl = 10 * time.Second
			// No gRPC keepalive pings: with the latency their answers would
			// come too late and close the connection.
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + proxy.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			renewed := make(chan struct{}, 1)
			conn, err := NewConn(cli, ConnConfig{LeaseTTL: ttl, Logger: testLogger("a"), onRenewed: func() {
				select {
				case renewed <- struct{}{}:
				default:
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close(); cli.Close() })
			s, err := New(Config{Layout: l, NodeID: "a", Instance: "inst-a"}, Deps{Conn: conn})
			if err != nil {
				t.Fatal(err)
			}
			a := &node{id: "a", cli: cli, conn: conn, s: s}
			ch, _ := a.campaign(t, Fair)
			w := next(t, ch)
			if !leaderChange {
				proxy.SetDelay(0, 1500*time.Millisecond)
				// Wait for two answers: the second was sent with the latency.
				for range 2 {
					<-renewed // drop one answered before
					select {
					case <-renewed:
					case <-time.After(ttl):
						t.Fatal("no renewal answered within a TTL")
					}
				}
			} else {
				<-renewed
			}
			proxy.Blackhole(true)
			cut := time.Now()
			defer proxy.Blackhole(false)
			gone := keyGone(t, adm, w.t.key, w.t.Epoch())
			p := probe(w.t)
			if leaderChange {
				c.Stop(leader)
				defer c.StartMember(leader)
			}
			var deleted time.Time
			select {
			case deleted = <-gone:
			case <-time.After(60 * time.Second):
				t.Fatal("etcd did not delete a's key within 60s of the cut")
			}
			latest, failed, failErr := p.end()
			t.Logf("after the cut: a's latest Expiry %v, failed %v (%v); etcd deleted a's key %v",
				latest.Sub(cut).Round(time.Millisecond), failed.Sub(cut).Round(time.Millisecond), failErr,
				deleted.Sub(cut).Round(time.Millisecond))
			switch {
			case failed.IsZero():
				t.Errorf("a's Expiry reached %v after the cut and had not failed when etcd deleted the key, %v after it",
					latest.Sub(cut), deleted.Sub(cut))
			case !failed.Before(deleted) || !latest.Before(deleted):
				t.Errorf("a's Expiry reached %v after the cut and failed %v after it; etcd deleted the key %v after it",
					latest.Sub(cut), failed.Sub(cut), deleted.Sub(cut))
			}
			if failed.Sub(cut) > ttl {
				t.Errorf("a's Expiry failed %v after the cut, later than a TTL (%v) after the last renewal was sent", failed.Sub(cut), ttl)
			}
			if leaderChange && deleted.Sub(cut) < ttl+time.Second {
				t.Errorf("etcd deleted a's key %v after the cut: the leader change did not extend the lease (the test shows nothing)", deleted.Sub(cut))
			}
		})
	}
}

// A grant that etcd answers late is renewed at once, not a renew interval
// after the answer: the deadline counts from the grant's send time, so a
// session whose first renewal waited for the interval after a 3.5s answer
// (5s TTL: deadline 4.75s, renewal 5.17s after the send) would end before
// that renewal, as a daemon's first term after an etcd outage did, a
// second after its promotion. The client reaches etcd through a proxy that
// holds everything for 3.5s while the grant is in flight.
func TestLateGrantRenewedAtOnce(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	proxy, cli := proxiedClient(t, c)
	const ttl = 5 * time.Second
	proxy.Blackhole(true)
	sent := time.Now()
	conn, err := NewConn(cli, ConnConfig{LeaseTTL: ttl, Logger: testLogger("a")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	time.Sleep(3500 * time.Millisecond)
	proxy.Blackhole(false)
	ctx, cancel := context.WithTimeout(context.Background(), ttl)
	defer cancel()
	s, err := conn.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the grant was answered %v after it was sent; renew interval %v", time.Since(sent).Round(time.Millisecond), s.RenewInterval())
	select {
	case <-s.Done():
		t.Fatalf("the session of a grant answered late ended %v after the grant was sent: %v", time.Since(sent).Round(time.Millisecond), s.Err())
	case <-time.After(2 * ttl):
	}
	if left := time.Until(s.Deadline()); left < ttl/2 {
		t.Errorf("the deadline is %v away after 2 TTLs of renewals; want more than %v", left, ttl/2)
	}
}

// A watch on a member cut off from its peers does not stay silent: with
// "require leader" the member cancels it, the loop notices
// (watchInterrupted), and once the member is back the change made
// meanwhile is delivered.
func TestWatchOnIsolatedMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	adm := admin(t, c)
	x := (c.Leader() + 1) % 3
	l := newLayout()
	w := newNode(t, []string{c.Members[x].Endpoint()}, l, "w")
	interrupted := make(chan error, 16)
	w.s.watchInterrupted = func(err error) {
		select {
		case interrupted <- err:
		default:
		}
	}
	pause := watch(t, "WatchPause", w.s.WatchPause, showPause)
	pause.became(t, "none")
	time.Sleep(200 * time.Millisecond) // the watch is set
	cut := time.Now()
	c.Isolate(x)
	select {
	case err := <-interrupted:
		t.Logf("watch on the isolated member interrupted %v after the cut: %v", time.Since(cut).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		t.Fatal("the watch on the isolated member stayed silent for 30s")
	}
	if _, err := adm.Put(ctxT(t), l.Pause(), `{"by":"op","reason":"while cut off"}`); err != nil {
		t.Fatal(err)
	}
	c.Heal(x)
	pause.became(t, "while cut off")
}

// Renewals answered by an isolated etcd leader do not count. The Conn
// reaches etcd only through the etcd leader X, which is then cut off from
// its peers: X renews leases locally until it steps down (up to about two
// election timeouts after the cut, on every server line tested), while the
// majority elects a new leader after about one and extends leases by one
// election timeout only, so a deadline counted from such a renewal could
// outlive the lease. Right after the cut the test renews at once (check),
// as a renewal that falls due then would, and the session's deadline must
// never count from a renewal sent after the cut. A raw keepalive through X
// shows that X did answer after the cut (else the iteration shows
// nothing; at least one per server line must). A few iterations per line,
// at etcd's smallest lease (2s with a 1s election timeout).
func TestIsolatedLeaderRenewalsDoNotCount(t *testing.T) {
	const iterations = 3
	for _, srv := range etcdtest.Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			c := etcdtest.Start(t, etcdtest.Options{Server: srv})
			stale := 0
			for i := range iterations {
				x := c.Leader()
				cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Members[x].Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
				if err != nil {
					t.Fatal(err)
				}
				conn, err := NewConn(cli, ConnConfig{LeaseTTL: 2 * time.Second, Logger: testLogger("a")})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				s, err := conn.Session(ctx)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				// A fresh deadline (the grant or a renewal) before the cut.
				waitFor(t, 20*time.Second, "a renewal", func() bool { return s.Deadline().Sub(time.Now()) > s.TTL()-s.RenewInterval()/2 })
				cut := time.Now()
				c.Isolate(x)
				conn.check(s)
				kctx, kcancel := context.WithTimeout(clientv3.WithRequireLeader(t.Context()), time.Second)
				ka, kerr := cli.KeepAliveOnce(kctx, s.ID)
				kcancel()
				answered := kerr == nil && ka.TTL > 0
				if answered {
					stale++
				}
				select {
				case <-s.Done():
				case <-time.After(2 * s.TTL()):
					t.Fatalf("iteration %d: the session did not end within 2 TTLs of the cut", i)
				}
				d := s.Deadline()
				t.Logf("iteration %d: etcd leader %s cut off; it answered a keepalive after the cut: %t (%v); session ended %v after the cut (%v); deadline %v after the cut",
					i, c.Members[x].Name, answered, kerr, time.Since(cut).Round(time.Millisecond), s.Err(), d.Sub(cut).Round(time.Millisecond))
				if limit := cut.Add(s.TTL() - s.TTL()/RateDiv); d.After(limit) {
					t.Errorf("iteration %d: the deadline is %v after the cut, later than a renewal sent before it allows (%v): a renewal the isolated leader answered counted",
						i, d.Sub(cut).Round(time.Millisecond), limit.Sub(cut))
				}
				if !errors.Is(s.Err(), cluster.ErrLeaseExpired) {
					t.Errorf("iteration %d: the session ended with %v; want ErrLeaseExpired", i, s.Err())
				}
				conn.Close()
				cli.Close()
				c.Heal(x)
				c.WaitServing(60 * time.Second)
			}
			if stale == 0 {
				t.Errorf("the isolated etcd leader answered no keepalive after the cut in %d iterations: the test showed nothing", iterations)
			}
		})
	}
}

// A daemon's Conn warns at its first session when etcd is a release
// without pre-vote by default (Debian's 3.4), naming the flag, and stays
// quiet on the release line.
func TestPreVoteWarningAtStart(t *testing.T) {
	for _, srv := range etcdtest.Servers(t) {
		t.Run(srv.Name, func(t *testing.T) {
			v, err := srv.Version()
			if err != nil {
				t.Fatal(err)
			}
			c := etcdtest.Start(t, etcdtest.Options{Server: srv})
			cli, err := Dial(DialConfig{Endpoints: c.Endpoints()})
			if err != nil {
				t.Fatal(err)
			}
			var buf syncBuffer
			logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
			conn, err := NewConn(cli, ConnConfig{LeaseTTL: testTTL, WarnVersions: true, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if _, err := conn.Session(ctx); err != nil {
				t.Fatal(err)
			}
			want := PreVoteWarning(v) != ""
			if want {
				deadline := time.Now().Add(20 * time.Second)
				for strings.Count(buf.String(), "--pre-vote=true") < len(c.Members) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
			}
			conn.Close() // waits for the version check
			cli.Close()
			got := buf.String()
			t.Logf("etcd %s: logged %q", v, got)
			if n := strings.Count(got, "--pre-vote=true"); want && n != len(c.Members) || !want && n != 0 {
				t.Errorf("etcd %s: %d pre-vote warnings for %d members; want a warning: %t", v, n, len(c.Members), want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
