package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// BenchmarkElectionHandoff measures, for N candidates in each mode, the time
// from the leader leaving (its Run context cancelled, as the daemon ends a
// candidacy) to the next leader's callback, and how many watch
// notifications one change delivers to the other candidates.
func BenchmarkElectionHandoff(b *testing.B) {
	sizes := benchSizes()
	zks := zktest.Start(b, 1)
	for _, mode := range []election.Mode{election.Fair, election.Unfair} {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/N=%d", mode, n), func(b *testing.B) {
				res := runHandoff(b, zks, mode, n, handoffRounds(n))
				res.Scenario = "election handoff"
				record(b, res)
			})
		}
	}
}

func handoffRounds(n int) int {
	if n >= 500 {
		return 30
	}
	return 50
}

type elected struct {
	id string
	at time.Time
}

func runHandoff(b *testing.B, zks *zktest.Cluster, mode election.Mode, n, rounds int) Result {
	dir := fmt.Sprintf("/bench/%s-%d-%d/election", mode, n, time.Now().UnixNano())
	events := make(chan elected, 16)
	type member struct {
		id     string
		client *zk.Client
		el     *election.Elector
		cancel context.CancelFunc // ends the member's current Run
		done   chan struct{}      // closed when that Run returned
	}
	members := map[string]*member{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		for _, m := range members {
			m.client.Close()
		}
	}()
	// run starts m's Run with a context of its own, below ctx. A member
	// leads only once its Run runs, so whoever reads the cancel of the
	// leader reads the one written here (the callback's event orders it).
	run := func(m *member) {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		m.cancel, m.done = rcancel, done
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			m.el.Run(rctx, func(lctx context.Context, l election.Leadership) {
				select {
				case events <- elected{id: m.id, at: time.Now()}:
				case <-lctx.Done():
				}
				<-lctx.Done()
			})
		}()
	}
	for i := range n {
		id := fmt.Sprintf("n%04d", i)
		c, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 10 * time.Second}, zk.Deps{})
		if err != nil {
			b.Fatal(err)
		}
		el, err := election.New(election.Config{Dir: dir, NodeID: id, Mode: mode}, election.Deps{Client: c})
		if err != nil {
			b.Fatal(err)
		}
		m := &member{id: id, client: c, el: el}
		members[id] = m
		run(m)
	}
	waitQueue(b, zks, dir, mode, n)
	var leader elected
	select {
	case leader = <-events:
	case <-time.After(60 * time.Second):
		b.Fatal("no first leader")
	}
	// Server load: reset the server's statistics (latencies) first.
	addr := zks.Servers[0].Addr()
	zktest.FourLetter(addr, "srst")
	mntrBefore, _ := zktest.Mntr(addr)
	roundsStart := time.Now()
	var lat []time.Duration
	var notes []float64
	for r := 0; r < rounds; r++ {
		before := int64(0)
		for id, m := range members {
			if id != leader.id {
				before += m.client.WatchEvents()
			}
		}
		old := members[leader.id]
		t0 := time.Now()
		// Out of the race, back in 300 ms later: its Run ends (the
		// elector leaves) and starts again on the same session.
		old.cancel()
		wg.Add(1)
		go func(done <-chan struct{}) {
			defer wg.Done()
			<-done
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(t0.Add(300 * time.Millisecond))):
				run(old)
			}
		}(old.done)
		select {
		case next := <-events:
			lat = append(lat, next.at.Sub(t0))
			time.Sleep(400 * time.Millisecond) // stray notifications arrive; the old leader rejoins
			after := int64(0)
			for id, m := range members {
				if id != leader.id {
					after += m.client.WatchEvents()
				}
			}
			notes = append(notes, float64(after-before))
			leader = next
		case <-time.After(60 * time.Second):
			b.Fatalf("round %d: no new leader", r)
		}
		if mode == election.Fair {
			waitQueue(b, zks, dir, mode, n)
		}
	}
	mntrAfter, _ := zktest.Mntr(addr)
	elapsed := time.Since(roundsStart).Seconds()
	// Then count the packets of a quiet spell of one ping period (a third
	// of the 10s session timeout; three with many sessions, whose pings
	// come in bursts), so that the sessions' pings can be taken out of the
	// per-change figure.
	time.Sleep(500 * time.Millisecond)
	quiet := 3500 * time.Millisecond
	if n >= 500 {
		quiet = 10 * time.Second
	}
	quiet0, _ := zktest.Mntr(addr)
	quietStart := time.Now()
	time.Sleep(quiet)
	quiet1, _ := zktest.Mntr(addr)
	quietRate, quietOK := mntrDelta(quiet0, quiet1, "zk_packets_received")
	quietRate /= time.Since(quietStart).Seconds()
	res := Result{Name: fmt.Sprintf("%s N=%d", mode, n), Runs: len(lat)}
	res.fill(lat)
	res.Extra = map[string]float64{
		"watch_notifications_per_change": mean(notes),
		"watch_notifications_min":        slices.Min(notes),
		"watch_notifications_max":        slices.Max(notes),
	}
	changes := float64(len(lat))
	if v, ok := mntrDelta(mntrBefore, mntrAfter, "zk_packets_received"); ok {
		res.Extra["zk_packets_received_per_change"] = v / changes
		if quietOK {
			// Without the packets of a quiet spell (pings): what one change
			// costs the server, the benchmark's own queue check included.
			res.Extra["zk_idle_packets_per_s"] = quietRate
			res.Extra["zk_packets_received_per_change_net"] = (v - quietRate*elapsed) / changes
		}
	}
	if v, ok := mntrDelta(mntrBefore, mntrAfter, "zk_packets_sent"); ok {
		res.Extra["zk_packets_sent_per_change"] = v / changes
	}
	var notes2 []string
	for _, k := range []string{"zk_avg_latency", "zk_max_latency", "zk_watch_count", "zk_znode_count", "zk_num_alive_connections"} {
		if v, ok := mntrAfter[k]; ok {
			notes2 = append(notes2, k+"="+v)
		}
	}
	res.Notes = strings.Join(notes2, " ") + " (latencies in ms since srst)"
	return res
}

func waitQueue(b *testing.B, zks *zktest.Cluster, dir string, mode election.Mode, n int) {
	b.Helper()
	if mode == election.Unfair {
		time.Sleep(time.Duration(n) * time.Millisecond) // everyone has its watch set
		return
	}
	c, err := zk.NewClient(zk.Config{Servers: zks.Addrs(), SessionTimeout: 10 * time.Second}, zk.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := c.Session(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		kids, _ := s.Children(context.Background(), dir)
		if len(kids) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("queue never reached %d", n)
}
