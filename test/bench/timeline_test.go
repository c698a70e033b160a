package bench

// Per-step timelines of a handoff. Three sources, all on the wall clock of
// this host: the hooks' event lines (µs), the daemons' debug logs (µs), and
// watches that the benchmark's own ZooKeeper session sets on the znodes a
// handoff changes (the failover request, the breadcrumb, the leader's
// election znode): a watch fires when the server applied the change, so
// its time is when the change happened plus one notification's delivery
// (BenchmarkHandoffSteps: well under a millisecond on loopback), without
// any log line in the daemons.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fdcluster "github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/clustertest"
)

// Timeline steps, named as the breakdown prints them (offsets from the
// start of the run).
const (
	stRequestWritten = "request_written"         // failover request znode created (watch)
	stDemoteStart    = "leaver_demote_start"     // the demote hook's event line (it stamps at its start)
	stDemoteEnd      = "leaver_demote_end"       // the leaver's "hook done" log line
	stBCDeleted      = "breadcrumb_deleted"      // the leaver's guarded delete applied (watch)
	stBCHanded       = "breadcrumb_handed"       // the leaver's Finish named its successor in the breadcrumb (watch: data changed)
	stZnodeGone      = "leaver_znode_gone"       // the leader's election znode deleted (watch)
	stCandidateWon   = "successor_candidate_won" // "candidate won" log line, when the elector writes it
	stElected        = "successor_elected"       // "elected" log line (the lease is settled)
	stLeaseReady     = "successor_lease_ready"   // "lease ready" log line, when the elector writes it
	stBCWritten      = "breadcrumb_written"      // the successor's breadcrumb created (watch)
	stPromote        = "promote_hook_start"      // the promote hook's event line
	stCLIExit        = "cli_exit"                // failover CLI returned
)

// layout is clustertest's: root /failoverd, cluster e2e.
var layout = fdcluster.Layout{Root: "/failoverd", Cluster: "e2e"}

// zkWatcher stamps, from the benchmark's own session, the changes of a
// handoff. Start it before acting; read it with stamps after.
type zkWatcher struct {
	mu     sync.Mutex
	at     map[string]time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// watchHandoff sets the watches: on the leader's election znode (leader is
// the node id that holds it now), the breadcrumb (deleted, then written
// again) and, with request, the failover request (created).
func (c *cluster) watchHandoff(leader string, request bool) (*zkWatcher, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	w := &zkWatcher{at: map[string]time.Time{}, cancel: cancel}
	if c.ec != nil {
		if err := c.watchHandoffEtcd(ctx, w, leader); err != nil {
			cancel()
			return nil, err
		}
		return w, nil
	}
	s, err := c.zc.Session(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	node, err := leaderZnode(ctx, s, leader)
	if err != nil {
		cancel()
		return nil, err
	}
	arm := func(p string) (bool, <-chan zk.Event, error) {
		ok, _, ch, err := s.ExistsW(ctx, p)
		return ok, ch, err
	}
	// Every watch is armed before the run starts: a later one could miss the change.
	_, nodeCh, err := arm(node)
	if err != nil {
		cancel()
		return nil, err
	}
	bc := layout.Breadcrumb()
	bcThere, bcCh, err := arm(bc)
	if err != nil {
		cancel()
		return nil, err
	}
	var reqCh <-chan zk.Event
	if request {
		if _, reqCh, err = arm(layout.Failover()); err != nil {
			cancel()
			return nil, err
		}
	}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		if ev, ok := <-nodeCh; ok && ev.Type == zk.EventNodeDeleted {
			w.stamp(stZnodeGone)
		}
	}()
	go func() {
		defer w.wg.Done()
		ch := bcCh
		if bcThere {
			ev, ok := <-ch
			if ok && ev.Type == zk.EventNodeDataChanged {
				// A graceful leaver's Finish named the successor, which
				// then writes nothing.
				w.stamp(stBCHanded)
				return
			}
			if !ok || ev.Type != zk.EventNodeDeleted {
				return
			}
			w.stamp(stBCDeleted)
			there, ch2, err := arm(bc)
			if err != nil {
				return
			}
			if there { // written before the watch was back: now is an upper bound
				w.stamp(stBCWritten)
				return
			}
			ch = ch2
		}
		if ev, ok := <-ch; ok && ev.Type == zk.EventNodeCreated {
			w.stamp(stBCWritten)
		}
	}()
	if reqCh != nil {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if ev, ok := <-reqCh; ok && ev.Type == zk.EventNodeCreated {
				w.stamp(stRequestWritten)
			}
		}()
	}
	return w, nil
}

func (w *zkWatcher) stamp(step string) {
	now := time.Now()
	w.mu.Lock()
	w.at[step] = now
	w.mu.Unlock()
}

// stamps stops the watcher (waiting at most a moment for changes still on
// their way) and returns what it saw.
func (w *zkWatcher) stamps() map[string]time.Time {
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond):
	}
	w.cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.at)
}

// leaderZnode finds the election znode the node id holds: the unfair lock,
// or its lowest fair-mode znode.
func leaderZnode(ctx context.Context, s *zk.Session, id string) (string, error) {
	dir := layout.ElectionDir()
	kids, err := s.Children(ctx, dir)
	if err != nil {
		return "", err
	}
	slices.SortFunc(kids, func(a, b string) int {
		switch {
		case a == "lock":
			return -1
		case b == "lock":
			return 1
		}
		return strings.Compare(a[strings.LastIndexByte(a, '_')+1:], b[strings.LastIndexByte(b, '_')+1:])
	})
	for _, k := range kids {
		data, _, err := s.Get(ctx, dir+"/"+k)
		if err != nil {
			continue
		}
		var c struct {
			NodeID string `json:"node_id"`
		}
		if json.Unmarshal(data, &c) == nil && c.NodeID == id {
			return dir + "/" + k, nil
		}
	}
	return "", fmt.Errorf("no election znode of %s among %v", id, kids)
}

// timeline is one run's steps, as offsets from its start t0.
type timeline struct {
	t0 time.Time
	at map[string]time.Time
}

func newTimeline(t0 time.Time, zkStamps map[string]time.Time) *timeline {
	tl := &timeline{t0: t0, at: map[string]time.Time{}}
	for k, v := range zkStamps {
		tl.at[k] = v
	}
	return tl
}

func (tl *timeline) set(step string, at time.Time) { tl.at[step] = at }

// fromLogs adds the leaver's demote hook (event line + duration) and the
// successor's elector log lines.
func (tl *timeline) fromLogs(evs []clustertest.Event, old, next *clustertest.Node) {
	if d, ok := findEvent(evs, "demote", tl.t0, nodeIs(old)); ok {
		tl.set(stDemoteStart, d.At)
	}
	if l, ok := firstLog(old, "hook done", tl.t0, "hook", "demote"); ok {
		tl.set(stDemoteEnd, l.At) // µs resolution
	}
	for step, msg := range map[string]string{stCandidateWon: "candidate won", stElected: "elected", stLeaseReady: "lease ready"} {
		if l, ok := firstLog(next, msg, tl.t0); ok {
			tl.set(step, l.At)
		}
	}
	if p, ok := findEvent(evs, "promote", tl.t0, nodeIs(next)); ok {
		tl.set(stPromote, p.At)
	}
}

// addTo appends the offsets to s.
func (tl *timeline) addTo(s series) {
	for k, v := range tl.at {
		s.add(k, v.Sub(tl.t0))
	}
}

// breakdown puts the p50 (and p99) offset of each step that was seen into
// extra, in step order, as "<i>_<step>_p50_ms".
func breakdown(s series, extra map[string]float64, steps ...string) {
	for i, st := range steps {
		if len(s[st]) == 0 {
			continue
		}
		extra[fmt.Sprintf("t%02d_%s_p50_ms", i, st)] = s.p50ms(st)
		extra[fmt.Sprintf("t%02d_%s_p99_ms", i, st)] = s.p99ms(st)
	}
}

// fmtTimeline is one run's steps for a log line.
func fmtTimeline(tl *timeline, steps ...string) string {
	var b strings.Builder
	for _, st := range steps {
		if at, ok := tl.at[st]; ok {
			fmt.Fprintf(&b, " %s=%s", st, strconv.FormatFloat(float64(at.Sub(tl.t0).Microseconds())/1000, 'f', 1, 64))
		}
	}
	return strings.TrimSpace(b.String())
}

// watchHandoffEtcd is watchHandoff on etcd: one watch of the cluster's
// prefix from the revision after a read that found the leader's election
// key, so no change of the handoff can be missed; each step is stamped
// at its first event. The failover request counts when created.
func (c *cluster) watchHandoffEtcd(ctx context.Context, w *zkWatcher, leader string) error {
	resp, err := c.ec.Get(ctx, layout.ElectionDir()+"/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	var key string
	var lowest int64
	for _, kv := range resp.Kvs {
		var cand struct {
			NodeID string `json:"node_id"`
		}
		if json.Unmarshal(kv.Value, &cand) == nil && cand.NodeID == leader && (key == "" || kv.CreateRevision < lowest) {
			key, lowest = string(kv.Key), kv.CreateRevision
		}
	}
	if key == "" {
		return fmt.Errorf("no election key of %s among %d", leader, len(resp.Kvs))
	}
	ch := c.ec.Watch(clientv3.WithRequireLeader(ctx), layout.Dir()+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		seen := map[string]bool{}
		once := func(step string) {
			if !seen[step] {
				seen[step] = true
				w.stamp(step)
			}
		}
		for wr := range ch {
			for _, ev := range wr.Events {
				k, put := string(ev.Kv.Key), ev.Type == clientv3.EventTypePut
				switch {
				case k == key && !put:
					once(stZnodeGone)
				case k == layout.Breadcrumb() && !put:
					once(stBCDeleted)
				case k == layout.Breadcrumb() && ev.Kv.Version > 1:
					once(stBCHanded)
				case k == layout.Breadcrumb():
					once(stBCWritten)
				case k == layout.Failover() && put && ev.Kv.Version == 1:
					once(stRequestWritten)
				}
			}
			if seen[stBCWritten] || seen[stBCHanded] {
				return
			}
		}
	}()
	return nil
}
