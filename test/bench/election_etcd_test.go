package bench

// The 1× reference on etcd: etcd's own election recipe,
// go.etcd.io/etcd/client/v3/concurrency (used here only, never by the
// daemon). N candidates, each with its own client (own connection) and
// session (own lease), campaign on one prefix; the leader resigns (one
// guarded delete of its key), the next one's Campaign returns (its watch
// on the deleted key fired, then a read found no older key). An observer
// with its own client follows the election with Observe.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/test/clustertest"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// bareElection is N concurrency.Election candidates plus an observer.
type bareElection struct {
	b      testing.TB
	won    chan etcdWin
	leader *etcdWin
	// observed carries, per leader value Observe delivered, when it came
	// and the leader key's create revision.
	observed chan observation
	// lastObserve is Observe's delay in the last handoff (0: not seen).
	lastObserve time.Duration
}

type etcdWin struct {
	at      time.Time
	rev     int64 // the leader key's create revision
	release chan chan time.Time
}

type observation struct {
	at  time.Time
	rev int64
}

// bareTTL is the candidates' session TTL (seconds). A handoff does not
// wait for any lease to expire: only the renewals' load depends on it.
const bareTTL = 5

func startBareElection(b testing.TB, endpoints []string, prefix string, n int) *bareElection {
	b.Helper()
	g := &bareElection{b: b, won: make(chan etcdWin, n), observed: make(chan observation, 1024)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var clis []*clientv3.Client
	var sessions []*concurrency.Session
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, s := range sessions {
			s.Close()
		}
		for _, c := range clis {
			c.Close()
		}
	})
	newSession := func() *concurrency.Session {
		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}
		clis = append(clis, cli)
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(bareTTL))
		if err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, s)
		return s
	}
	obs := concurrency.NewElection(newSession(), prefix)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last int64
		for resp := range obs.Observe(ctx) {
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision == last {
				continue
			}
			last = resp.Kvs[0].CreateRevision
			select {
			case g.observed <- observation{at: time.Now(), rev: last}:
			default:
			}
		}
	}()
	for i := range n {
		e := concurrency.NewElection(newSession(), prefix)
		val := fmt.Sprintf("c%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := g.candidate(ctx, e, val); err != nil && ctx.Err() == nil {
					b.Errorf("concurrency.Election candidate %s: %v", val, err)
					return
				}
			}
		}()
	}
	return g
}

// candidate is one term: Campaign until leader, report it, Resign when told.
func (g *bareElection) candidate(ctx context.Context, e *concurrency.Election, val string) error {
	if err := e.Campaign(ctx, val); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	w := etcdWin{at: time.Now(), rev: e.Rev(), release: make(chan chan time.Time, 1)}
	select {
	case g.won <- w:
	case <-ctx.Done():
		return nil
	}
	select {
	case reply := <-w.release:
		t0 := time.Now()
		reply <- t0
		return e.Resign(ctx)
	case <-ctx.Done():
		return nil
	}
}

// handoff makes the leader resign and returns the time from its Resign
// sent to the next candidate's Campaign returning. The old leader
// campaigns again at the back of the queue; handoff waits a moment for
// that, so every run starts with N candidates, as the ZooKeeper recipe's.
func (g *bareElection) handoff() (time.Duration, error) {
	if g.leader == nil {
		select {
		case w := <-g.won:
			g.leader = &w
		case <-time.After(30 * time.Second):
			return 0, errors.New("no first leader")
		}
	}
	for len(g.observed) > 0 {
		<-g.observed
	}
	reply := make(chan time.Time, 1)
	g.leader.release <- reply
	var next etcdWin
	select {
	case next = <-g.won:
	case <-time.After(30 * time.Second):
		return 0, errors.New("no next leader")
	}
	t0 := <-reply
	g.leader = &next
	g.lastObserve = 0
	deadline := time.After(2 * time.Second)
wait:
	for {
		select {
		case o := <-g.observed:
			if o.rev == next.rev {
				g.lastObserve = o.at.Sub(t0)
				break wait
			}
		case <-deadline:
			break wait
		}
	}
	time.Sleep(50 * time.Millisecond) // the old leader rejoins
	return next.at.Sub(t0), nil
}

// bareElectionHandoff is BenchmarkBareRecipeHandoff on etcd.
func bareElectionHandoff(b *testing.B) {
	ec := etcdtest.Start(b, etcdtest.Options{})
	n := runs("BARE", 100)
	g := startBareElection(b, ec.Endpoints(), "/bare-election", 3)
	var ds, obs []time.Duration
	for i := 0; i < n; i++ {
		d, err := g.handoff()
		if err != nil {
			b.Fatalf("run %d: %v", i, err)
		}
		ds = append(ds, d)
		if g.lastObserve > 0 {
			obs = append(obs, g.lastObserve)
		}
	}
	res := Result{Backend: clustertest.BackendEtcd, Scenario: scBare, Name: "concurrency.Election (client/v3), N=3", Runs: len(ds)}
	res.fill(ds)
	var o Result
	o.fill(obs)
	res.Extra = map[string]float64{"observe_p50_ms": o.P50ms, "observe_p99_ms": o.P99ms, "observe_runs": float64(len(obs))}
	res.Notes = "Resign sent → next candidate's Campaign returns (observe_*: → an observer's Observe delivers the new leader); " + etcdDesc(ec)
	record(b, res)
}
