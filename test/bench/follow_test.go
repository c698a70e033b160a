package bench

import (
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/test/redistest"
)

const (
	scFollow   = "follow (Redis example)"
	nameFollow = "failover --to, shipped Redis hooks"
)

// BenchmarkRedisFollow: how long the replicas take to follow a new leader.
// The Redis example as shipped (examples/redis rendered by render.sh: three
// redis-server, three failoverd, the bash + redis-cli hooks) switches over
// with `failoverd failover --to` the next node, round robin; per run:
//
//   - promote → last follow hook: from the new leader's promote hook's end
//     (its event line is written last) to the end of the last replica's
//     successful follow hook (the old leader demotes first, then follows);
//   - promote → last replica following: to the moment the last replica's
//     Redis answers ROLE with the new primary and its link "connected"
//     (ROLE polled every 5 ms from the benchmark). This includes Redis'
//     own resynchronisation (a partial one: a promoted replica keeps the
//     old primary's replication id).
//
// Also the CLI's wall time. The next run starts once every replica follows.
func BenchmarkRedisFollow(b *testing.B) {
	c := redistest.Start(b, redistest.Options{})
	n := runs("FOLLOW", 20)
	s := series{}
	for i := 0; i < n; i++ {
		old := c.WaitSettled("", 60*time.Second)
		target := next(c, old)
		replicas := c.Others(target)
		poll := pollFollowing(replicas, target)
		t0 := time.Now()
		out, code := old.CLI("failover", "--to", target.ID, "--timeout", "30s")
		cli := time.Since(t0)
		if code != 0 {
			poll.stop()
			b.Fatalf("run %d: failoverd failover --to %s: exit %d\n%s", i, target.ID, code, out)
		}
		if got := c.WaitLeader(old.ID, 60*time.Second); got != target {
			poll.stop()
			b.Fatalf("run %d: %s leads, want %s", i, got.ID, target.ID)
		}
		firsts, ok := poll.wait(60 * time.Second)
		if !ok {
			b.Fatalf("run %d: not every replica followed %s within 60s: %v", i, target.ID, firsts)
		}
		prom, ok := c.WaitEvent("promote", t0, 10*time.Second, "node", target.ID, "result", "ok")
		if !ok {
			b.Fatalf("run %d: no promote event of %s", i, target.ID)
		}
		promoted := prom.At
		s.add("cli", cli)
		var lastRole, lastHook time.Time
		for _, r := range replicas {
			if at := firsts[r.ID]; at.After(lastRole) {
				lastRole = at
			}
			f, ok := c.WaitEvent("follow", promoted, 10*time.Second, "node", r.ID, "leader", target.ID, "result", "ok")
			if !ok {
				b.Fatalf("run %d: no successful follow event of %s towards %s", i, r.ID, target.ID)
			}
			if f.At.After(lastHook) {
				lastHook = f.At
			}
		}
		s.add("role", lastRole.Sub(promoted))
		s.add("hook", lastHook.Sub(promoted))
	}
	res := Result{Scenario: scFollow, Name: nameFollow, Runs: len(s["role"])}
	res.fill(s["role"])
	res.Extra = map[string]float64{
		"follow_hook_p50_ms": s.p50ms("hook"),
		"follow_hook_p99_ms": s.p99ms("hook"),
		"cli_p50_ms":         s.p50ms("cli"),
	}
	res.Notes = "p50/p99: new leader's promote hook end → last of 2 replicas' ROLE shows it with link up"
	record(b, res)
}

// next is the node after n, round robin.
func next(c *redistest.Cluster, n *redistest.Node) *redistest.Node {
	for i, x := range c.Nodes {
		if x == n {
			return c.Nodes[(i+1)%len(c.Nodes)]
		}
	}
	return c.Nodes[0]
}

// followPoll polls ROLE on some Redis and records when each first
// follows the primary at addr with its link up.
type followPoll struct {
	n     int
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	first map[string]time.Time
}

func pollFollowing(nodes []*redistest.Node, leader *redistest.Node) *followPoll {
	p := &followPoll{n: len(nodes), done: make(chan struct{}), first: map[string]time.Time{}}
	for _, n := range nodes {
		p.wg.Add(1)
		go func(n *redistest.Node) {
			defer p.wg.Done()
			for {
				r := redistest.RoleOf(n)
				at := time.Now()
				if r.Follows(leader.ServiceAddr) {
					p.mu.Lock()
					p.first[n.ID] = at
					p.mu.Unlock()
					return
				}
				select {
				case <-p.done:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}(n)
	}
	return p
}

// stop ends the polling and returns when each node first followed.
func (p *followPoll) stop() map[string]time.Time {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first
}

// wait waits until every node followed (ok) or timeout passed, then stops.
func (p *followPoll) wait(timeout time.Duration) (map[string]time.Time, bool) {
	all := make(chan struct{})
	go func() { p.wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(timeout):
	}
	first := p.stop()
	return first, len(first) == p.n
}
