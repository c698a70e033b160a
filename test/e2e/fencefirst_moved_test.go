package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/failoverd/failoverd/test/clustertest"
)

// A leader that was only slow keeps its term, on etcd, even when a fence
// that claims to prove it out succeeds: the leader's daemon is stopped
// (SIGSTOP) right after a heartbeat, well within its lease, so the
// successor suspects it, its probe gets no answer and it fences it with
// the shell method, marked as proving. That fence lies: it stops nothing,
// lets the leader go on (SIGCONT) and exits 0 only once the leader's
// heartbeat has moved past the version the successor suspected. The
// guarded removal (EndTerm, which compares the heartbeat's mod revision)
// must then refuse: the successor logs that the heartbeat moved and does
// not take over; the old leader keeps its term at its epoch through
// several lease TTLs, renewing all along; no node promotes; never two
// promoted nodes.
func TestFenceFirstSlowLeaderKeepsItsTermWhenItsHeartbeatMovedDuringTheFence(t *testing.T) {
	const ttl = 10 * time.Second // room for the stop: the leader's renewals are 1 s apart
	c := clustertest.Start(t, clustertest.Options{Backend: clustertest.BackendEtcd, EtcdLeaseTTL: ttl,
		EtcdDemoteTimeout: 2 * time.Second, NoRPCFence: true, ShellProves: true,
		ElectionYAML: "  fence_first: true\n  suspect_after: 300ms\n"})
	c.WaitLeader("", 30*time.Second)
	waitCampaigning(t, c)
	lie := installLyingFence(t, c)
	old := c.Leader()
	if old == nil {
		t.Fatal("no leader")
	}
	st, _ := old.Status()
	epoch := st.Epoch

	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := clustertest.Context(t, 5*time.Minute)
	time.Sleep(2 * time.Second) // the successor has timed the leader's heartbeats for a while

	// Stop the leader's daemon just after one of its heartbeats.
	key, rev := electionKey(ctx, t, cli, c, old.ID)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, r := electionKey(ctx, t, cli, c, old.ID)
		if r != rev {
			rev = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the heartbeat of %s (%s) stood still at %d for 10s before the fault", old.ID, key, rev)
		}
	}
	must(t, os.WriteFile(lie.on, nil, 0o644))
	t0 := time.Now()
	old.Signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			old.Signal(syscall.SIGCONT)
		}
	}()
	if !waitFile(lie.started, 30*time.Second) {
		t.Fatalf("nobody fenced the stopped leader %s within 30s", old.ID)
	}
	stood := time.Since(t0)
	old.Signal(syscall.SIGCONT)
	stopped = false
	var moved int64
	for deadline := time.Now().Add(ttl); ; time.Sleep(10 * time.Millisecond) {
		if _, r := electionKey(ctx, t, cli, c, old.ID); r > rev {
			moved = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the heartbeat of %s did not move within %v after it went on (stopped %v)", old.ID, ttl, stood)
		}
	}
	must(t, os.WriteFile(lie.release, nil, 0o644))
	must(t, os.Remove(lie.on))
	t.Logf("%s stopped for %v after its heartbeat at revision %d; the fence returned once it was at %d", old.ID, stood.Round(time.Millisecond), rev, moved)

	// The successor's guarded removal is refused, or (were it not
	// guarded) the term ends: wait for one of the two, then for several
	// TTLs of the old leader renewing.
	var fencer *clustertest.Node
	for deadline := time.Now().Add(30 * time.Second); fencer == nil; time.Sleep(50 * time.Millisecond) {
		for _, n := range c.Others(old) {
			lines, err := clustertest.ReadLog(n.LogPath())
			if err != nil {
				t.Fatal(err)
			}
			if len(clustertest.FindLog(lines, refusedRemoval, t0))+
				len(clustertest.FindLog(lines, tookOver, t0)) > 0 {
				fencer = n
			}
		}
		if fencer == nil && time.Now().After(deadline) {
			t.Fatal("no successor logged either a refused or a successful removal of the old leader's term within 30s of the fence")
		}
	}
	const hold = 2 * ttl
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if _, r := electionKeyOrZero(ctx, t, cli, c, old.ID); r == 0 {
			t.Errorf("the election key of %s is gone %v after the fault: its term was ended while it renewed", old.ID, time.Since(t0).Round(time.Millisecond))
			break
		}
		if st, ok := old.Status(); ok && (st.State != "leader" || st.Epoch != epoch) {
			t.Errorf("%s is %s at epoch %d %v after the fault, not leader at %d: a slow leader lost its term", old.ID, st.State, st.Epoch,
				time.Since(t0).Round(time.Millisecond), epoch)
			break
		}
	}
	_, after := electionKeyOrZero(ctx, t, cli, c, old.ID)
	if after <= moved {
		t.Errorf("the heartbeat of %s stood at %d after the fence (it was at %d): it should have renewed throughout", old.ID, after, moved)
	}
	if ev := since(c, t0, "promote"); len(ev) > 0 {
		t.Errorf("a node promoted while the old leader %s renewed its term: %v", old.ID, ev)
	}
	lines, err := clustertest.ReadLog(fencer.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if took := clustertest.FindLog(lines, tookOver, t0); len(took) > 0 {
		t.Errorf("%s ended the term of %s although its heartbeat moved between the suspicion and the removal: %v", fencer.ID, old.ID, took)
	}
	if refused := clustertest.FindLog(lines, refusedRemoval, t0); len(refused) != 1 {
		t.Errorf("%s logged %d refused removals, want 1", fencer.ID, len(refused))
	}
	if l := c.Leader(); l == nil || l.ID != old.ID {
		t.Errorf("the leader is %v, want %s", l, old.ID)
	}
	c.CheckNoOverlap()
	if !t.Failed() {
		t.Logf("%s's removal was refused; %s kept its term at epoch %d for %v, its heartbeat at %d", fencer.ID, old.ID, epoch, hold, after)
	}
}

// The successor's log lines (cluster/etcdcluster): its guarded removal
// was refused, or it ended the old leader's term.
const (
	refusedRemoval = "the old leader's heartbeat moved while it was fenced; its term goes on"
	tookOver       = "ended the old leader's term after fencing it: its heartbeat stood still"
)

// lyingFence is the files of a shell fence that lies (installLyingFence).
type lyingFence struct{ on, started, release string }

// installLyingFence wraps the cluster's fence.sh: while the file on
// exists, a fence logs fence_lie_start, creates started, waits until
// release exists and exits 0 (fence_lie) without touching the target;
// otherwise it runs the real fence. It emits no "fence" event, so
// CheckNoOverlap still counts the target as promoted.
func installLyingFence(t *testing.T, c *clustertest.Cluster) lyingFence {
	t.Helper()
	real := filepath.Join(c.Dir, "fence-real.sh")
	must(t, os.Rename(filepath.Join(c.Dir, "fence.sh"), real))
	l := lyingFence{on: filepath.Join(c.Dir, "fence-lie"), started: filepath.Join(c.Dir, "fence-lie-started"),
		release: filepath.Join(c.Dir, "fence-lie-release")}
	script := fmt.Sprintf(`#!/usr/bin/env bash
ev() { printf '%%s %%s\n' "$(date +%%s%%N)" "$*" >> %q; }
if [ -e %q ]; then
  ev fence_lie_start node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID target_epoch=$FAILOVERD_TARGET_EPOCH
  : > %q
  while [ ! -e %q ]; do sleep 0.02; done
  ev fence_lie node=$FAILOVERD_NODE_ID target=$FAILOVERD_TARGET_ID target_epoch=$FAILOVERD_TARGET_EPOCH
  exit 0
fi
exec %q
`, c.EventsPath, l.on, l.started, l.release, real)
	must(t, os.WriteFile(filepath.Join(c.Dir, "fence.sh"), []byte(script), 0o755))
	return l
}

func waitFile(p string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// electionKey is the election key of node id and its mod revision (its
// heartbeat's version); it fails the test when there is none.
func electionKey(ctx context.Context, t *testing.T, cli *clientv3.Client, c *clustertest.Cluster, id string) (string, int64) {
	t.Helper()
	k, r := electionKeyOrZero(ctx, t, cli, c, id)
	if r == 0 {
		t.Fatalf("no election key of %s", id)
	}
	return k, r
}

// electionKeyOrZero is electionKey, with 0 when there is none.
func electionKeyOrZero(ctx context.Context, t *testing.T, cli *clientv3.Client, c *clustertest.Cluster, id string) (string, int64) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(rctx, c.Layout().ElectionDir()+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading the election: %v", err)
	}
	for _, kv := range resp.Kvs {
		var cand struct {
			NodeID string `json:"node_id"`
		}
		if json.Unmarshal(kv.Value, &cand) == nil && cand.NodeID == id {
			return string(kv.Key), kv.ModRevision
		}
	}
	return "", 0
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
