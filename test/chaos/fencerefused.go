package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/clustertest"
)

// Two faults of fencing first for defects of the past: a proof that
// outlived the removal it was for, and a cooldown started for the target
// of an operator's failover.
const (
	// A proof whose removal was refused, then a real crash. The leader's
	// daemon is stopped (SIGSTOP) with its peers refused at its admin API
	// (probe and rpc fence fail at once): the successor suspects it and
	// fences it with the shell fence (proving), which is held: the leader
	// is continued, and only once the election shows its heartbeat moved
	// does the fence exit 0 (a slow fence that says it proved the node
	// out, while the node went on). The successor's guarded removal must
	// be refused and the old leader keep its term. Then the old leader's
	// daemon is SIGKILLed (its service stays primary) with its admin API
	// answered by a stub that says it leads and is connected (so no proof
	// comes again: the successor waits for the lease) and refuses rpc
	// fences: the term that follows must fence the old leader (the shell
	// fence stands its service down); a proof whose removal was refused
	// stands for nothing (fence_skipped).
	FenceRefusedThenCrash = "fence-refused-then-crash"
	// An operator's failover right after an automatic one: the leader's
	// daemon is SIGKILLed (its service stays primary), and as soon as
	// another node leads (its promotion automatic: it starts the failover
	// cooldown, election.failover_cooldown), the operator runs `failoverd
	// failover --to` the third node (or, when it never leads, the killed
	// leader, restarted at once). It must go through (exit 0), and
	// the target's term starts no cooldown (operator_failover_cooldown).
	FailoverAfterFailover = "failover-after-failover"
)

// ChaosCooldown is election.failover_cooldown during
// failover-after-failover (reloaded on, and off again after it: a leader
// whose service dies within a cooldown keeps its term, and a service
// restarted as a standby then stays one: kill-service right after an
// automatic failover would leave no primary).
const ChaosCooldown = 5 * time.Second

// withCooldown adds election.failover_cooldown after fence_first.
func withCooldown(cfg string) (string, error) {
	const anchor = "  fence_first: true\n"
	if !strings.Contains(cfg, anchor) {
		return "", errors.New("no election.fence_first in the config")
	}
	return strings.Replace(cfg, anchor, anchor+"  failover_cooldown: "+ChaosCooldown.String()+"\n", 1), nil
}

// Harness and daemon event kinds of the two faults.
const (
	// node= to= from= code=: the operator's failover --to and its exit code.
	KindOperatorFailover = "operator_failover"
	// node= target= target_epoch=: the held fence started (events log).
	KindFenceHeld = "fence_held"
	// node= target= target_epoch= answer=ok|fail: the held fence returned.
	KindFenceReleased = "fence_released"
	// leader_node= version=: a successor's guarded removal of a term it
	// proved out (or timed, with take_over_at_deadline) was refused: the
	// heartbeat moved.
	KindRemovalRefused = "removal_refused"
	// epoch= until=: a new leader started its failover cooldown.
	KindCooldown = "cooldown"
)

// Violation kinds of the two faults.
const (
	// A winner skipped its fence of the previous term without having
	// proved out and removed exactly that term itself right before it won;
	// or, after fence-refused-then-crash's crash, the successor promoted
	// without a fence of the crashed term or such a proved removal.
	VFenceSkipped = "fence_skipped"
	// An operator's failover right after an automatic failover was refused
	// (failover --to failed), or its target started a failover cooldown.
	VOperatorCooldown = "operator_failover_cooldown"
)

func init() {
	FenceFirstKinds = append(FenceFirstKinds, FenceRefusedThenCrash, FailoverAfterFailover)
	stoppedDaemonKinds[FenceRefusedThenCrash] = true
	noVetoKinds[FenceRefusedThenCrash] = true
	noVetoKinds[FailoverAfterFailover] = true
	harnessKinds[KindOperatorFailover] = true
	daemonMessages["the old leader's heartbeat moved while it was fenced; its term goes on"] = KindRemovalRefused
	daemonMessages["the old leader's heartbeat moved before its term could be ended; waiting again"] = KindRemovalRefused
	daemonMessages["failover cooldown: an unhealthy health check does not end this leadership until it is over"] = KindCooldown
	AllViolationKinds = append(AllViolationKinds, VFenceSkipped, VOperatorCooldown)
}

// heldFence is a fence.sh that, for the target named in the file hold,
// logs fence_held, creates started, waits until release holds an answer
// and exits 0 for "ok" (fence_released), 1 otherwise; any other fence
// runs real.
func heldFence(events, hold, started, release, real string) string {
	return fmt.Sprintf(`#!/usr/bin/env bash
ev() { printf '%%s %%s\n' "$(date +%%s%%N)" "$*" >> %q; }
if [ -e %q ] && [ "$(cat %q)" = "$FAILOVERD_TARGET_ID" ]; then
  ev fence_held node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID target_epoch=$FAILOVERD_TARGET_EPOCH
  : > %q
  while [ ! -s %q ]; do sleep 0.02; done
  answer=$(cat %q)
  ev fence_released node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID target_epoch=$FAILOVERD_TARGET_EPOCH answer=$answer
  [ "$answer" = ok ] && exit 0
  exit 1
fi
exec %q
`, events, hold, hold, started, release, release, real)
}

// fenceRefusedThenCrash injects fence-refused-then-crash.
func (m *Nemesis) fenceRefusedThenCrash(id int, leader *clustertest.Node, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	st, ok := leader.Status()
	if !ok || st.State != controller.StateLeader {
		inject(leader.ID, "skipped", "not_leading")
		heal(leader.ID)
		return
	}
	epoch := st.Epoch
	beat, closeBeat, err := e.heartbeatReader()
	must(e.t, err)
	defer closeBeat()

	dir := e.C.Dir
	fence, real := filepath.Join(dir, "fence.sh"), filepath.Join(dir, "fence-held-real.sh")
	hold, started, release := filepath.Join(dir, "fence-hold"), filepath.Join(dir, "fence-held"), filepath.Join(dir, "fence-release")
	orig, err := os.ReadFile(fence)
	must(e.t, err)
	must(e.t, os.WriteFile(real, orig, 0o755))
	for _, p := range []string{started, release} {
		os.Remove(p)
	}
	must(e.t, os.WriteFile(hold, []byte(leader.ID), 0o644))
	must(e.t, os.WriteFile(fence, []byte(heldFence(e.C.EventsPath, hold, started, release, real)), 0o755))
	restore := func() {
		must(e.t, os.WriteFile(fence, orig, 0o755))
		for _, p := range []string{hold, started, release, real} {
			os.Remove(p)
		}
	}
	// Peers are refused at the leader's admin API: the probe and the rpc
	// fence fail at once, so the stop lasts about the suspicion time.
	refused := refusingAddr(e.t)
	leader.SetPeerTarget(refused)

	inject(leader.ID, "epoch", epoch)
	leader.Signal(syscall.SIGSTOP)
	outcome := "no_fence"
	if waitPath(started, e.Session+5*time.Second) {
		// The leader is stopped: the version read now is the one the
		// successor suspected, or a later one.
		v0, err := beat(leader.ID)
		leader.Signal(syscall.SIGCONT)
		answer := "fail"
		switch {
		case err != nil:
			outcome = "unread"
		default:
			outcome = "heartbeat_stood"
			for end := time.Now().Add(min(e.Session, 4*time.Second)); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if v, err := beat(leader.ID); err == nil && v > v0 {
					answer, outcome = "ok", "heartbeat_moved"
					break
				}
			}
		}
		must(e.t, os.WriteFile(release, []byte(answer), 0o644))
	} else {
		leader.Signal(syscall.SIGCONT)
	}
	leader.SetPeerTarget("")
	e.Log(KindFault, "phase", "proof", "kind", FenceRefusedThenCrash, "id", id, "target", leader.ID, "outcome", outcome)
	time.Sleep(holdIn(time.Second, 2*time.Second)) // the fence returns, the removal is tried
	restore()

	if st, ok := leader.Status(); !ok || st.State != controller.StateLeader || st.Epoch != epoch {
		e.Log(KindFault, "phase", "crash", "kind", FenceRefusedThenCrash, "id", id, "target", leader.ID, "skipped", "term_over")
		heal(leader.ID)
		return
	}
	// The real crash: no proof can come again (the stub says the leader
	// leads and is connected), and the rpc fence is refused.
	stub := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: aliveStub(leader.ID, epoch)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(e.t, err)
	go stub.Serve(ln)
	defer stub.Close()
	e.Log(KindFault, "phase", "crash", "kind", FenceRefusedThenCrash, "id", id, "target", leader.ID, "epoch", epoch)
	e.crashBehind(leader, ln.Addr().String(), holdIn)
	heal(leader.ID)
}

// aliveStub answers a status probe as node at epoch, leading and
// connected; everything else (an rpc fence) 503.
func aliveStub(node string, epoch int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/status") {
			http.Error(w, "stub: not answering", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"node_id": node, "state": controller.StateLeader, "epoch": epoch, "connected": true})
	})
}

// refusingAddr is a loopback address nothing listens on.
func refusingAddr(t interface{ Fatal(...any) }) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	a := ln.Addr().String()
	ln.Close()
	return a
}

func waitPath(p string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// heartbeatReader reads a node's election entry's heartbeat version
// (ZooKeeper: the znode's data version; etcd: the key's mod revision)
// straight from the coordination service.
func (e *Env) heartbeatReader() (func(node string) (int64, error), func(), error) {
	dir := e.C.Layout().ElectionDir()
	mine := func(b []byte, node string) bool {
		var c struct {
			NodeID string `json:"node_id"`
		}
		return json.Unmarshal(b, &c) == nil && c.NodeID == node
	}
	if e.Backend == clustertest.BackendEtcd {
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.C.Etcd.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		return func(node string) (int64, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			resp, err := cli.Get(ctx, dir+"/", clientv3.WithPrefix())
			if err != nil {
				return 0, err
			}
			for _, kv := range resp.Kvs {
				if mine(kv.Value, node) {
					return kv.ModRevision, nil
				}
			}
			return 0, fmt.Errorf("no election key of %s", node)
		}, func() { cli.Close() }, nil
	}
	cred, err := os.ReadFile(filepath.Join(e.C.Dir, "zk.cred"))
	if err != nil {
		return nil, nil, err
	}
	user, pass, _ := strings.Cut(strings.TrimSpace(string(cred)), ":")
	cl, err := zk.NewClient(zk.Config{Servers: e.C.ZK.Addrs(), SessionTimeout: 4 * time.Second,
		Auth: &zk.Auth{User: user, Password: pass}}, zk.Deps{})
	if err != nil {
		return nil, nil, err
	}
	return func(node string) (int64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		sess, err := cl.Session(ctx)
		if err != nil {
			return 0, err
		}
		kids, err := sess.Children(ctx, dir)
		if err != nil {
			return 0, err
		}
		for _, k := range kids {
			b, st, err := sess.Get(ctx, path.Join(dir, k))
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return 0, err
			}
			if mine(b, node) {
				return int64(st.Version), nil
			}
		}
		return 0, fmt.Errorf("no election znode of %s", node)
	}, cl.Close, nil
}

// failoverAfterFailover injects failover-after-failover.
func (m *Nemesis) failoverAfterFailover(id int, leader *clustertest.Node, holdIn func(lo, hi time.Duration) time.Duration,
	inject func(string, ...any), heal func(string)) {
	e := m.e
	// Both others in the election first (an earlier fault may have left
	// one ceded or backing off): the operator's target must be able to
	// campaign at once.
	for _, n := range e.C.Nodes {
		if n != leader && e.Policy.CanLead(n.ID) {
			e.waitStandby([]*clustertest.Node{n}, 20*time.Second)
		}
	}
	orig, cool := e.editConfigs(FailoverAfterFailover, withCooldown)
	defer func() { // the files as at start, whatever happened
		for _, n := range e.C.Nodes {
			writeFileAtomic(n.Config, []byte(orig[n.ID]), 0o600) // the killed leader may be reading it
		}
	}()
	e.reloadAll("cooldown_on", cool)
	inject(leader.ID)
	e.expectKill(leader)
	leader.Kill(syscall.SIGKILL)
	var next *clustertest.Node
	for end := time.Now().Add(e.Session + 20*time.Second); time.Now().Before(end) && next == nil; time.Sleep(20 * time.Millisecond) {
		if l := e.Leader(); l != nil && l != leader {
			next = l
		}
	}
	var to *clustertest.Node
	for _, n := range e.C.Nodes {
		if n != leader && n != next && e.Policy.CanLead(n.ID) {
			to = n
		}
	}
	restarted := false
	if to == nil && next != nil && e.Policy.CanLead(leader.ID) {
		// The third node never leads (priority 0): the operator fails
		// over to the killed leader instead, restarted at once.
		leader.Start()
		restarted = true
		if e.waitStandby([]*clustertest.Node{leader}, 20*time.Second) {
			to = leader
		}
	}
	switch {
	case next == nil:
		e.Log(KindFault, "phase", "operator", "kind", FailoverAfterFailover, "id", id, "target", leader.ID, "skipped", "no_automatic_failover")
	case to == nil:
		e.Log(KindFault, "phase", "operator", "kind", FailoverAfterFailover, "id", id, "target", leader.ID, "skipped", "no_third_node_can_lead")
	default:
		// Right away: the automatic leader is within its cooldown.
		at := e.Log(KindFault, "phase", "operator", "kind", FailoverAfterFailover, "id", id, "target", to.ID, "from", next.ID)
		out, code := next.CLI("failover", "--to", to.ID, "--timeout", "30s")
		e.Log(KindOperatorFailover, "node", to.ID, "from", next.ID, "code", code, "fault", id, "requested", at.UnixNano())
		if code != 0 {
			e.t.Logf("fault %d (%s): failover --to %s failed (%d): %s", id, FailoverAfterFailover, to.ID, code, strings.TrimSpace(out))
		}
	}
	e.reloadAll("cooldown_off", orig)
	for _, n := range e.C.Nodes { // the killed leader's too, before its restart
		must(e.t, writeFileAtomic(n.Config, []byte(orig[n.ID]), 0o600))
	}
	time.Sleep(holdIn(300*time.Millisecond, time.Second))
	if !restarted {
		leader.Start()
	}
	heal(leader.ID)
}

// checkFenceSkips applies fence_skipped: every winner's skipped fence
// (proved_out_not_fenced) of a term T at epoch E must follow its own
// proving fence of exactly T at E and its own removal of that term
// (took_over_after_fence) right before the term it skips in (no other
// term of it won in between); and after each crash of
// fence-refused-then-crash, the first promote of another node must
// follow its fence of the crashed term (its daemon's "previous leader
// fenced", or the fence hook) or such a skip. It counts refused removals
// and held fences.
func checkFenceSkips(h History, r *Report, add func(string, time.Time, string, ...any)) {
	type mark struct {
		at    time.Time
		e     Event
		valid bool
	}
	lastFence := map[string]Event{}   // node -> its last proving fence
	lastRemoval := map[string]Event{} // node -> its last removal after one, while no term of it was won since
	provedFor := map[string]*Event{}  // node -> the proving fence its current term may skip (nil: none)
	var skips []mark
	for _, e := range h {
		node := e.Get("node")
		switch e.Kind {
		case KindRemovalRefused:
			r.RemovalsRefused++
		case KindFenceReleased:
			r.HeldFences++
		case KindProvingFence:
			lastFence[node] = e
		case KindTakeoverAfterFence:
			if f, ok := lastFence[node]; ok {
				lastRemoval[node] = f
			}
		case KindElected:
			if f, ok := lastRemoval[node]; ok {
				provedFor[node] = &f
			} else {
				provedFor[node] = nil
			}
			delete(lastRemoval, node)
		case KindProvedOutSkip:
			r.judge(VFenceSkipped, 1)
			f := provedFor[node]
			ok := f != nil && f.Get("target") == e.Get("target") && f.Get("target_epoch") == e.Get("target_epoch")
			skips = append(skips, mark{e.At, e, ok})
			if !ok {
				what := "no proving fence it removed the term after"
				if f != nil {
					what = fmt.Sprintf("its proof and removal were of %s at epoch %s", f.Get("target"), f.Get("target_epoch"))
				}
				add(VFenceSkipped, e.At, "%s did not fence %s (epoch %s) although it had not proved out and removed exactly that term right before it won: %s",
					node, e.Get("target"), e.Get("target_epoch"), what)
			}
		}
	}
	// After each crash: the first promote of another node.
	for i, c := range h {
		if c.Kind != KindFault || c.Get("kind") != FenceRefusedThenCrash || c.Get("phase") != "crash" || c.Get("skipped") != "" {
			continue
		}
		r.FenceRefusedCrashes++
		target, epoch := c.Get("target"), c.Get("epoch")
		r.judge(VFenceSkipped, 1)
		fenced := map[string]bool{}
		for _, e := range h[i+1:] {
			node := e.Get("node")
			switch {
			case (e.Kind == KindFenced || e.Kind == "fence") && e.Get("target") == target && e.Get("target_epoch") == epoch:
				fenced[node] = true
			case e.Kind == KindProvedOutSkip && e.Get("target") == target && e.Get("target_epoch") == epoch:
				for _, s := range skips {
					if s.at.Equal(e.At) && s.e.Get("node") == node && s.valid {
						fenced[node] = true
					}
				}
			case e.Kind == "promote" && node != target && e.Src == SrcHook:
				if !fenced[node] {
					add(VFenceSkipped, e.At, "%s promoted (epoch %s) after %s (epoch %s) crashed at %s without a fence of that term or a proved removal of exactly it",
						node, e.Get("epoch"), target, epoch, c.At.Format("15:04:05.000"))
				}
			default:
				continue
			}
			if e.Kind == "promote" && node != target {
				break
			}
		}
	}
}

// checkOperatorFailovers applies operator_failover_cooldown: every
// operator's failover of failover-after-failover went through, and its
// target's term (its first won after the request) started no cooldown.
// It counts the cooldowns started.
func checkOperatorFailovers(h History, r *Report, add func(string, time.Time, string, ...any)) {
	for i, o := range h {
		if o.Kind == KindCooldown {
			r.Cooldowns++
		}
		if o.Kind != KindOperatorFailover {
			continue
		}
		r.OperatorFailovers++
		r.judge(VOperatorCooldown, 1)
		to := o.Get("node")
		if o.Get("code") != "0" {
			add(VOperatorCooldown, o.At, "the operator's failover --to %s right after an automatic failover (from %s) failed: exit %s", to, o.Get("from"), o.Get("code"))
			continue
		}
		requested := o.At
		for _, e := range h[:i] {
			if e.Kind == KindFault && e.Get("phase") == "operator" && e.Get("id") == o.Get("fault") {
				requested = e.At
			}
		}
		var term string
		for _, e := range h {
			if e.At.Before(requested) || e.Get("node") != to {
				continue
			}
			if e.Kind == KindElected && term == "" {
				term = e.Get("epoch")
			}
			if e.Kind == KindCooldown && term != "" && e.Get("epoch") == term {
				add(VOperatorCooldown, e.At, "%s started a failover cooldown (until %s) in the term (epoch %s) an operator's failover --to gave it", to, e.Get("until"), term)
				break
			}
			if e.At.After(o.At.Add(FenceFirstSlack)) {
				break
			}
		}
		if term == "" {
			add(VOperatorCooldown, o.At, "failover --to %s exited 0 but %s was not elected after the request", to, to)
		}
	}
}
