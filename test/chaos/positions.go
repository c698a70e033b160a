package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Data freshness under faults (service.position, election.max_lag).
//
// Every node's service.position is `cat <positions dir>/<node id>`, a file
// the harness owns. The harness stands in for replication: every
// PositionTick it writes the same growing counter (PositionRate a second)
// to every node's file, so every caught-up node holds what the leader holds.
// For a seeded share of the faults it freezes one candidate other than the
// leader ("lagging": its file stops, position_freeze with the value it
// keeps) FreezeLead before the injection, long enough for the leader to
// publish a position more than MaxLag ahead of it, and thaws it (the file
// catches up at once) just before the heal, so liveness is judged from the
// heal as before.
//
// What the daemons published is read back from ZooKeeper, not from their
// logs: a poller reads the leader position record, the member records and
// the failover request every PollInterval (after a sync) and logs every
// change (leader_position, member_position, failover_request;
// position_poll ok=false when a read fails: nothing is known until the
// next good one).

// Timing and sizes of the positions.
const (
	PositionRate     = 1000 // counter units a second
	PositionTick     = 50 * time.Millisecond
	PositionInterval = 500 * time.Millisecond // service.position.interval (timeout: the same)
	// MaxLag is election.max_lag: 1.5s of writes, three intervals, so that
	// caught-up nodes (their samples up to one interval apart) never lag.
	MaxLag = int64(3 * PositionRate * PositionInterval / time.Second)
	// StalenessMargin is how long before a candidate's election a fact
	// (its freeze, the leader's position, another candidate publishing)
	// must hold for the checker to rely on it: two intervals and a second.
	StalenessMargin = 2*PositionInterval + time.Second
	// FreezeLead: a lagging node is frozen this long before the injection.
	// The checker relies on a leader position more than MaxLag (1.5s)
	// ahead of it, published (a sample up to an interval old, written at
	// most once an interval) by the margin before its election: about
	// StalenessMargin + 2.5s after the freeze. An election a session
	// timeout after the injection (a dead leader's) is judged even when
	// the leader's last sample and write were late; one right at the
	// injection (a cede) only sometimes. (3.5s judged 0 of 3 lagging wins
	// in one slice run on a loaded machine.)
	FreezeLead = StalenessMargin + 2500*time.Millisecond
	// FreezeShare is the share of (eligible) faults, in percent, with a
	// lagging node (lagging-failover always has one).
	FreezeShare  = 10
	PollInterval = 100 * time.Millisecond
)

// Harness event kinds of the positions.
const (
	KindFreeze         = "position_freeze" // node= value=: the node's position stops at value
	KindThaw           = "position_thaw"   // node= value=: it catches up
	KindLeaderPosition = "leader_position" // node= epoch= position=: the record as read
	KindMemberPosition = "member_position" // node= position= (none: no record, or no position in it)
	KindPositionPoll   = "position_poll"   // ok=false: a read failed, nothing is known until the next change lines
	KindPositionConfig = "position_config" // max_lag= interval= rate=: the runs' settings
	// id= to= by= reason= done=: the failover request record as read
	// (reason preferred_priority or preferred_position: a node's handover;
	// operator: failover --to).
	KindFailoverRequest = "failover_request"
)

func init() {
	for _, k := range []string{KindFreeze, KindThaw, KindLeaderPosition, KindMemberPosition, KindPositionPoll, KindPositionConfig, KindFailoverRequest} {
		harnessKinds[k] = true
	}
}

// VPromotedLagging: a node promoted while it lagged (see checkLagging).
const VPromotedLagging = "promoted_lagging"

// positionFile is the file node id's service.position prints, in dir (the
// run's positions directory, made before the cluster starts so that no
// daemon ever reads a missing file).
func positionFile(dir, id string) string { return filepath.Join(dir, id) }

// positionYAML is a node's service.position.
func positionYAML(dir, id string) string {
	return fmt.Sprintf("  position:\n    command: [cat, %s]\n    interval: %s\n    timeout: %s\n",
		positionFile(dir, id), PositionInterval, PositionInterval)
}

// The cluster's name and root in clustertest's configs.
const (
	clusterName = "e2e"
	zkRoot      = "/failoverd"
)

// positions drives the nodes' position files and polls what the daemons
// published.
type positions struct {
	e     *Env
	start time.Time

	mu     sync.Mutex
	frozen map[string]bool

	stop chan struct{}
	done sync.WaitGroup
}

// PositionBase is the counter's value at the start: positions are never 0.
const PositionBase = 1000

// value is the counter now.
func (p *positions) value() int64 {
	return PositionBase + int64(time.Since(p.start))*PositionRate/int64(time.Second)
}

// initPositions makes the run's positions directory and writes every
// node's file, before the daemons start.
func (e *Env) initPositions() {
	e.posDir = filepath.Join(e.t.TempDir(), "positions")
	must(e.t, os.MkdirAll(e.posDir, 0o755))
	for _, id := range nodeIDs {
		must(e.t, os.WriteFile(positionFile(e.posDir, id), []byte(strconv.Itoa(PositionBase)+"\n"), 0o644))
	}
}

// startPositions starts the writer and the poller.
func (e *Env) startPositions() {
	p := &positions{e: e, start: time.Now(), frozen: map[string]bool{}, stop: make(chan struct{})}
	e.pos = p
	p.writeAll()
	e.Log(KindPositionConfig, "max_lag", MaxLag, "interval", PositionInterval, "rate", PositionRate)
	p.done.Add(2)
	go p.writer()
	go p.poller()
	e.t.Cleanup(p.close)
}

func (p *positions) close() {
	select {
	case <-p.stop:
		return
	default:
		close(p.stop)
	}
	p.done.Wait()
}

func (p *positions) writer() {
	defer p.done.Done()
	tick := time.NewTicker(PositionTick)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
			p.writeAll()
		}
	}
}

// writeAll writes the counter to every node that is not frozen, each file
// replaced by a rename so that cat never reads half of it.
func (p *positions) writeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.value()
	for _, n := range p.e.C.Nodes {
		if !p.frozen[n.ID] {
			p.write(n, v)
		}
	}
}

func (p *positions) write(n *clustertest.Node, v int64) {
	f := positionFile(p.e.posDir, n.ID)
	tmp := f + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(v, 10)+"\n"), 0o644); err == nil {
		os.Rename(tmp, f)
	}
}

// freeze stops n's position; thaw lets it catch up.
func (p *positions) freeze(n *clustertest.Node, fault int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.value()
	p.write(n, v)
	p.frozen[n.ID] = true
	p.e.Log(KindFreeze, "node", n.ID, "value", v, "fault", fault)
}

func (p *positions) thaw(n *clustertest.Node, fault int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen[n.ID] {
		return
	}
	delete(p.frozen, n.ID)
	v := p.value()
	p.write(n, v)
	p.e.Log(KindThaw, "node", n.ID, "value", v, "fault", fault)
}

// poller reads the leader position and the member records every
// PollInterval on its own session (after a sync, so a lagging server
// shows nothing old; on etcd every read is linearizable) and logs what
// changed.
func (p *positions) poller() {
	defer p.done.Done()
	e := p.e
	layout := cluster.Layout{Root: zkRoot, Cluster: clusterName}
	get, closeReader, err := p.reader(layout)
	if err != nil {
		e.t.Errorf("position poller: %v", err)
		return
	}
	defer closeReader()
	last := map[string]string{} // record -> what was logged
	known := false
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		now, err := p.read(get, layout)
		if err != nil {
			if known {
				e.Log(KindPositionPoll, "ok", false, "err", err)
				known, last = false, map[string]string{}
			}
			continue
		}
		known = true
		p.logChanges(now, last)
	}
}

// getRecord reads one record of the layout: its data, or found false.
// The first call of a poll (sync true) may first bring the reader up to
// date.
type getRecord func(ctx context.Context, key string, sync bool) (data []byte, found bool, err error)

// reader connects the poller to the run's coordination service.
func (p *positions) reader(l cluster.Layout) (getRecord, func(), error) {
	e := p.e
	if e.Backend == clustertest.BackendEtcd {
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.C.Etcd.Endpoints(), DialTimeout: 2 * time.Second,
			DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, key string, _ bool) ([]byte, bool, error) {
			resp, err := cli.Get(ctx, key)
			if err != nil || len(resp.Kvs) == 0 {
				return nil, false, err
			}
			return resp.Kvs[0].Value, true, nil
		}, func() { cli.Close() }, nil
	}
	cred, err := os.ReadFile(filepath.Join(e.C.Dir, "zk.cred")) // clustertest's digest credentials
	if err != nil {
		return nil, nil, err
	}
	user, pass, _ := strings.Cut(strings.TrimSpace(string(cred)), ":")
	cl, err := zk.NewClient(zk.Config{Servers: e.C.ZK.Addrs(), SessionTimeout: 4 * time.Second,
		Auth: &zk.Auth{User: user, Password: pass}}, zk.Deps{})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, key string, sync bool) ([]byte, bool, error) {
		sess, err := cl.Session(ctx)
		if err != nil {
			return nil, false, err
		}
		if sync {
			if err := sess.Sync(ctx, l.Dir()); err != nil {
				return nil, false, err
			}
		}
		data, _, err := sess.Get(ctx, key)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, false, nil
		}
		return data, err == nil, err
	}, cl.Close, nil
}

// read is one poll: "leader" -> "node epoch position", "member:<id>" ->
// "position" or "none".
func (p *positions) read(get getRecord, l cluster.Layout) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	out := map[string]string{}
	data, found, err := get(ctx, l.LeaderPosition(), true)
	switch {
	case err != nil:
		return nil, err
	case found:
		var lp cluster.LeaderPosition
		if err := json.Unmarshal(data, &lp); err != nil {
			return nil, fmt.Errorf("leader position %q: %w", data, err)
		}
		out["leader"] = fmt.Sprintf("%s %d %d", lp.NodeID, lp.Epoch, lp.Position)
	}
	data, found, err = get(ctx, l.Failover(), false)
	switch {
	case err != nil:
		return nil, err
	case found:
		var fr cluster.FailoverRequest
		if err := json.Unmarshal(data, &fr); err != nil {
			return nil, fmt.Errorf("failover request %q: %w", data, err)
		}
		reason := fr.Reason
		if reason == "" {
			reason = "operator"
		}
		out["failover"] = fmt.Sprintf("%s %s %s %s %t", orDash(fr.ID), orDash(fr.To), orDash(fr.By), reason, fr.Done)
	}
	for _, n := range p.e.C.Nodes {
		out["member:"+n.ID] = "none"
		data, found, err := get(ctx, l.Member(n.ID), false)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		var m cluster.Member
		if err := json.Unmarshal(data, &m); err == nil && m.Position != nil {
			out["member:"+n.ID] = strconv.FormatInt(*m.Position, 10)
		}
	}
	return out, nil
}

// logChanges logs every record that differs from last, and updates last.
func (p *positions) logChanges(now, last map[string]string) {
	keys := make([]string, 0, len(now))
	for k := range now {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := now[k]
		if last[k] == v {
			continue
		}
		last[k] = v
		if k == "failover" {
			f := strings.Fields(v)
			p.e.Log(KindFailoverRequest, "id", f[0], "to", f[1], "by", f[2], "reason", f[3], "done", f[4])
			continue
		}
		if k == "leader" {
			var node string
			var epoch, pos int64
			fmt.Sscanf(v, "%s %d %d", &node, &epoch, &pos)
			p.e.Log(KindLeaderPosition, "node", node, "epoch", epoch, "position", pos)
			continue
		}
		p.e.Log(KindMemberPosition, "node", k[len("member:"):], "position", v)
	}
}

// laggard picks the node lagging-failover freezes: a standby (in the
// election now) that may lead, other than the leader, from pick; else any
// node that may lead other than the leader; nil if there is none.
func (e *Env) laggard(leader *clustertest.Node, pick int) *clustertest.Node {
	var fallback *clustertest.Node
	for k := range e.C.Nodes {
		n := e.C.Nodes[(pick+k)%len(e.C.Nodes)]
		if n == leader || !e.Policy.CanLead(n.ID) {
			continue
		}
		if s, ok := n.Status(); ok && s.State == controller.StateStandby {
			return n
		}
		if fallback == nil {
			fallback = n
		}
	}
	return fallback
}

// freezeShare is FreezeShare, or CHAOS_FREEZE_SHARE (percent) when set:
// CHAOS_FREEZE_SHARE=100 makes a node lag in every fault that allows it.
func freezeShare() int {
	if v, err := strconv.Atoi(os.Getenv("CHAOS_FREEZE_SHARE")); err == nil {
		return v
	}
	return FreezeShare
}

// lagNode is one fault's lagging node: frozen FreezeLead before the
// injection, thawed before the heal.
type lagNode struct {
	e    *Env
	node *clustertest.Node // nil: none in this fault
	id   int
}

// newLagNode picks the node that lags during fault id of kind, from the
// step's draws (roll in 0..99, pick any): for most faults none, else one
// that can lead other than the leader (its likely successor). Faults that
// need a node to lead while they last get none (noVetoKinds).
func (e *Env) newLagNode(kind string, id, roll, pick int, leader *clustertest.Node) *lagNode {
	l := &lagNode{e: e, id: id}
	if e.pos == nil || noVetoKinds[kind] || roll >= freezeShare() {
		return l
	}
	l.node = e.pickSuccessor(leader, pick)
	return l
}

// freeze stops the node's position and waits FreezeLead, so the leader
// publishes positions more than MaxLag ahead before the fault.
func (l *lagNode) freeze() {
	if l.node == nil {
		return
	}
	l.e.pos.freeze(l.node, l.id)
	time.Sleep(FreezeLead)
}

func (l *lagNode) thaw() {
	if l.node == nil {
		return
	}
	l.e.pos.thaw(l.node, l.id)
	l.node = nil
}

// checkLagging: a node must not promote while it lags (election.max_lag),
// judged only where the daemon certainly knew it. Node X promoting at
// epoch E, elected for it at Te, broke the rule when, with cut = Te -
// StalenessMargin:
//
//   - X was frozen at value V since cut or earlier and still at the
//     promote: every position X ever sampled since is V, and every one
//     before the freeze is lower (the counter only grows), so X's own
//     position was at most V, or unknown;
//   - the poller read a leader position P > V + max_lag by cut: the
//     record is persistent and never goes back (a term writes it, never
//     over a later epoch, and only while its election znode exists), and
//     X reads it after winning, so X saw at least P;
//
// Whether another, caught-up candidate was there does not matter: once a
// leader position is recorded the rule is on at every win (the daemon
// applies it even when no member publishes a position), so X declines
// whoever else campaigns. (Judging only wins with a caught-up candidate
// beside X left the rule nothing to judge in runs where the only other
// node that may lead was the one the fault struck.)
//
// The margin keeps samples, polls and log lines of different processes
// from being compared within an interval or two of each other.
func checkLagging(h History, r *Report, add func(string, time.Time, string, ...any)) {
	maxLag := int64(-1)
	canLead := map[string]bool{}
	for _, e := range h {
		switch e.Kind {
		case KindPositionConfig:
			maxLag = e.Int("max_lag")
		case KindNodeConfig:
			canLead[e.Get("node")] = e.Get("priority") != "0"
		}
	}
	if maxLag < 0 {
		return
	}
	r.MaxLag = maxLag
	type freeze struct {
		since time.Time
		value int64
	}
	type obs struct {
		at  time.Time
		pos int64
	}
	type election struct {
		at    time.Time
		epoch int64
	}
	frozen := map[string]freeze{}
	thawed := map[string]time.Time{}    // node -> its last thaw
	published := map[string]time.Time{} // node -> since when every poll showed a position
	var leader []obs
	elected := map[string]election{}
	judged := map[string]bool{}      // node|epoch of the lagging wins
	up := map[string]time.Time{}     // node -> since when its daemon runs
	struck := map[string]time.Time{} // node -> when the last fault aimed at it healed (zero: one is on)
	faultTarget := map[string]string{}

	// lagging says whether node x, elected at te, lagged with an eligible
	// caught-up candidate, by the facts known now.
	lagging := func(x string, te time.Time) (string, bool) {
		cut := te.Add(-StalenessMargin)
		fz, ok := frozen[x]
		if !ok || fz.since.After(cut) {
			return "", false
		}
		p := int64(-1)
		for _, o := range leader {
			if o.at.After(cut) {
				break
			}
			p = max(p, o.pos)
		}
		if p-fz.value <= maxLag {
			return "", false
		}
		return fmt.Sprintf("frozen at %d since %s, %d behind the leader position %d read by %s",
			fz.value, fz.since.Format("15:04:05.000"), p-fz.value, p, cut.Format("15:04:05.000")), true
	}

	for _, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case KindDaemonStart:
			up[node] = e.At
		case KindDaemonExit:
			delete(up, node)
		case KindFault:
			switch id := e.Get("id"); e.Get("phase") {
			case "inject":
				faultTarget[id] = e.Get("target")
				struck[e.Get("target")] = time.Time{}
			case "heal":
				struck[faultTarget[id]] = e.At
			}
		case KindFreeze:
			r.Freezes++
			frozen[node] = freeze{e.At, e.Int("value")}
		case KindThaw:
			delete(frozen, node)
			thawed[node] = e.At
		case KindLeaderPosition:
			r.LeaderPositions++
			leader = append(leader, obs{e.At, e.Int("position")})
		case KindMemberPosition:
			if e.Get("position") == "none" {
				delete(published, node)
			} else if _, ok := published[node]; !ok {
				published[node] = e.At
			}
		case KindPositionPoll:
			if e.Get("ok") == "false" {
				clear(published)
			}
		case KindElected:
			elected[node] = election{e.At, e.Int("epoch")}
			if _, ok := lagging(node, e.At); ok {
				r.LaggingWins++
				r.judge(VPromotedLagging, 1)
				judged[node+"|"+e.Get("epoch")] = true
			}
		case KindDeclined:
			if judged[node+"|"+e.Get("epoch")] {
				r.LaggingDeclined++
			}
		case "promote":
			el, ok := elected[node]
			if !ok || el.epoch != e.Int("epoch") {
				continue
			}
			if why, ok := lagging(node, el.at); ok {
				add(VPromotedLagging, e.At, "%s promoted at epoch %d (elected %s) while it lagged: %s",
					node, el.epoch, el.at.Format("15:04:05.000"), why)
			}
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
