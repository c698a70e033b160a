// Command mutants checks that the test suite catches deliberately broken
// builds of failoverd (`make mutants`). For each mutant it copies the
// working tree to a temporary directory, applies a small source edit, and
// runs the few tests chosen to catch it; the mutant is caught when one of
// them fails. It exits non-zero unless every mutant is caught.
//
// Every edit replaces an anchor that must occur exactly once in its file: when
// the code moves on and an anchor no longer matches, the mutant fails loudly
// instead of silently testing the unmodified daemon. Before the mutants, the
// same tests run once against an unmodified copy (the baseline): a test that
// fails on the real code would "catch" every mutant and prove nothing.
//
//	go run ./test/mutants [-only NAME[,NAME]] [-no-baseline] [-keep] [-check]
//
// -check only applies and builds every mutant (seconds, no tests): a quick way
// to see that no anchor has gone stale after a change.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// edit replaces Old, which must occur exactly once in File, by New; with
// Append it adds New at the end of File instead.
type edit struct {
	File   string
	Old    string
	New    string
	Append bool
}

// selection is one `go test` run: a package and a -run pattern.
type selection struct {
	Pkg string
	Run string
}

// pkgOf is the package of a source file, as go test takes it.
func pkgOf(file string) string { return "./" + path.Dir(file) + "/" }

type mutant struct {
	Name  string
	What  string
	Edits []edit
	// Tests run in order until one fails; pick the fastest that catch it.
	Tests []selection
}

const (
	e2e   = "./test/e2e/"
	chaos = "./test/chaos/"
)

var mutants = []mutant{
	{
		Name: "skip-fencing",
		What: "promote without calling the fencer",
		Edits: []edit{{
			File: "controller/takeover.go",
			Old:  "method, err := tm.set.fence.Fence(tm.ctx, t)",
			New:  `method, err := "none (mutant)", error(nil); _ = t`,
		}},
		Tests: []selection{{e2e, "TestCrashedLeaderIsFencedBeforeSuccessorPromotes"}},
	},
	{
		Name: "skip-startup-demote",
		What: "do not demote the local service when the daemon starts",
		Edits: []edit{{
			File: "controller/loop.go",
			Old:  `c.startHook(&hookRun{name: "demote", purpose: forStartup, env: HookEnv{Reason: reasonStartup}}, context.Background())`,
			New:  `l.hook = &hookRun{name: "demote", purpose: forStartup, refused: true}; l.local = append(l.local, hookDone{run: l.hook})`,
		}},
		Tests: []selection{{e2e, "TestServiceBackFromHostCrashIsDemotedBeforeItsDaemonJoins"}},
	},
	{
		Name: "lease-never-expires",
		What: "the lease never ends a leadership (only ZooKeeper's verdicts do)",
		Edits: []edit{{
			File: "cluster/zkcluster/election/leader.go",
			Old:  "if l.deadline != nil && !time.Now().Before(l.deadline()) {",
			New:  "if false {",
		}, {
			File: "cluster/zkcluster/election/leader.go",
			Old:  "return time.Until(l.deadline())",
			New:  "return time.Hour",
		}, {
			File: "cluster/zkcluster/election/leader.go",
			Old:  "left := time.Until(r.deadline())",
			New:  "left := time.Hour",
		}},
		Tests: []selection{{e2e, "TestCoordinationOutageDemotesWithinLease"}},
	},
	{
		Name: "lease-renewed-by-follower-reads",
		What: "renewals are plain reads and any answer moves the lease (a follower cut off from its leader still answers)",
		Edits: []edit{{
			File: "cluster/zkcluster/zk/zk.go",
			Old:  "if viaLeader && answered(err) {",
			New:  "if answered(err) {",
		}, {
			File: "cluster/zkcluster/election/lease.go",
			Old:  "err := sess.Multi(ctx, op)",
			New:  "err := error(nil)",
		}},
		// The conformance suite's Deadline/CutOff (a leader on a follower
		// cut off from its quorum, whose Expiry must pass before anyone
		// else wins) catches it; the end-to-end test no longer does.
		Tests: []selection{{"./cluster/backendtest/", "TestZooKeeper"}, {e2e, "TestLeaderOnIsolatedZooKeeperFollowerDemotesBeforeASuccessorPromotes"}},
	},
	{
		Name: "constant-epoch",
		What: "every leadership carries epoch 1",
		Edits: []edit{{
			File: "cluster/zkcluster/election/leader.go",
			Old:  "l := Leadership{Epoch: epoch,",
			New:  "l := Leadership{Epoch: 1,",
		}},
		Tests: []selection{{e2e, "TestExactlyOnePromotedAndGracefulHandover"}},
	},
	{
		Name: "unguarded-term-writes",
		What: "a ZooKeeper term's writes (the breadcrumb among them) are plain compare-and-set writes, without the check of the election znode",
		Edits: []edit{{
			File: "cluster/zkcluster/term.go",
			Old:  "return commit(ctx, t.l.Session, t.l.Path, ops)",
			New:  "return commit(ctx, t.l.Session, \"\", ops)",
		}},
		Tests: []selection{{e2e, "TestLeaderThatLostItsZnodeBeforeTheBreadcrumbWriteCannotWriteIt"}},
	},
	{
		Name: "breadcrumb-without-election-check",
		What: "a ZooKeeper term's multi keeps its compare-and-set on the version but drops the check of the election znode",
		Edits: []edit{{
			File: "cluster/zkcluster/kv.go",
			Old:  "\tif guard != \"\" {\n\t\tzops = append(zops, zk.CheckOp{Path: guard, Version: -1})\n\t}",
			New:  "",
		}},
		Tests: []selection{{e2e, "TestLeaderThatLostItsZnodeBeforeTheBreadcrumbWriteCannotWriteIt"}},
	},
	{
		Name: "etcd-unguarded-term-writes",
		What: "etcd: a term's writes (the breadcrumb, a failover request marked done) compare only the record's revision, not the writer's election key create revision",
		Edits: []edit{{
			File: "cluster/etcdcluster/term.go",
			Old:  "If(append([]clientv3.Cmp{t.guard()}, cmps...)...)",
			New:  "If(cmps...)",
		}},
		Tests: []selection{{"./cluster/etcdcluster/", "TestOnSharedCluster/GuardedWrites"}},
	},
	{
		Name: "join-another-election",
		What: "a node that ran in one cluster record joins a place with none, as a node new to every cluster does",
		Edits: []edit{{
			File: "cluster/home.go",
			Old:  "\t\tif home == \"\" {\n\t\t\treturn nil\n\t\t}\n\t\treturn &MovedError{Home: home, Where: where}",
			New:  "\t\treturn nil",
		}},
		Tests: []selection{{"./cluster/backendtest/", "TestMemory/Join"}, {"./cmd/failoverd/", "TestBackendSwitchNeedsMigration"}},
	},
	{
		Name: "etcd-revoke-before-term-returned",
		What: "etcd: a session ended at its deadline has its lease revoked (its election entry deleted) while a term on it still runs",
		Edits: []edit{{
			File: "cluster/etcdcluster/conn.go",
			Old:  "\t\t\tgo func() {\n\t\t\t\ts.waitHolds(s.TTL())\n\t\t\t\tc.revoke(s.ID)\n\t\t\t}()",
			New:  "\t\t\tgo c.revoke(s.ID)",
		}},
		Tests: []selection{{"./cluster/etcdcluster/", "TestEndedLeaseRevokedAfterTheTermReturned"}},
	},
	{
		Name: "join-not-checked-at-win",
		What: "a won term does not run the join checks again: a node whose session expired while its cluster moved leads the old election",
		Edits: []edit{{
			File: "controller/takeover.go",
			Old:  "\t\tr.joinErr = join(ctx)",
			New:  "\t\t_ = join",
		}},
		Tests: []selection{{"./controller/", "TestSessionLostThenMovedIsNotLedAgain"}},
	},
	{
		Name: "epoch-floor-ignored",
		What: "a term's epoch is the backend's alone, without the moved cluster's epoch floor",
		Edits: []edit{{
			File: "controller/takeover.go",
			Old:  "epoch := l.floor + ev.t.Epoch()",
			New:  "epoch := ev.t.Epoch()",
		}},
		Tests: []selection{{"./controller/", "TestEpochFloorAdded"}, {"./cmd/failoverd/", "TestBackendSwitchNeedsMigration"}},
	},
	{
		Name: "etcd-deadline-from-answer",
		What: "etcd: the lease deadline counts from a renewal's answer arriving instead of from its send time",
		Edits: []edit{{
			File: "cluster/etcdcluster/conn.go",
			Old:  "func (s *Session) renewed(sent time.Time, ttl time.Duration) {\n",
			New:  "func (s *Session) renewed(sent time.Time, ttl time.Duration) {\n\tsent = time.Now()\n",
		}},
		Tests: []selection{{"./cluster/etcdcluster/", "TestDeadlineIsOurs/SendTime"}},
	},
	{
		Name: "etcd-first-renewal-from-answer",
		What: "etcd: a session's first renewal is due a renew interval after its grant's answer, not after the grant's send time",
		Edits: []edit{{
			File: "cluster/etcdcluster/conn.go",
			Old:  "t := time.NewTimer(s.untilRenewal())",
			New:  "t := time.NewTimer(s.RenewInterval())",
		}},
		Tests: []selection{{"./cluster/etcdcluster/", "TestLateGrantRenewedAtOnce"}},
	},
	{
		Name: "etcd-unconfirmed-renewal",
		What: "etcd: a renewal counts without the linearizable read that confirms its etcd leader still led (an isolated etcd leader's renewals count)",
		Edits: []edit{{
			File: "cluster/etcdcluster/conn.go",
			Old:  "read, err := c.cli.Get(rctx, c.readKey, clientv3.WithCountOnly())",
			New:  "read, err := &clientv3.GetResponse{Header: second.Header}, rctx.Err()",
		}},
		Tests: []selection{{"./cluster/etcdcluster/", "TestIsolatedLeaderRenewalsDoNotCount"}},
	},
	{
		Name: "etcd-serializable-leader-view",
		What: "etcd: record reads (the leader view's among them) come from the member's own copy (serializable)",
		Edits: []edit{{
			File: "cluster/etcdcluster/kv.go",
			Old:  "ops[i] = clientv3.OpGet(dir(q.Key), clientv3.WithPrefix())\n\t\tdefault:\n\t\t\tops[i] = clientv3.OpGet(q.Key)",
			New:  "ops[i] = clientv3.OpGet(dir(q.Key), clientv3.WithPrefix(), clientv3.WithSerializable())\n\t\tdefault:\n\t\t\tops[i] = clientv3.OpGet(q.Key, clientv3.WithSerializable())",
		}},
		Tests: []selection{{"./cluster/etcdcluster/", "TestReadsNeedTheQuorum"}},
	},
	{
		Name: "promote-after-failed-fence",
		What: "a failed fence is logged, then the node promotes anyway",
		Edits: []edit{{
			File: "controller/takeover.go",
			Old:  "method, err := tm.set.fence.Fence(tm.ctx, t)",
			New: `method, err := tm.set.fence.Fence(tm.ctx, t)
	if err != nil {
		c.log.Error("MUTANT: promoting after a failed fence", "err", err)
		err = nil
	}`,
		}},
		Tests: []selection{{e2e, "TestFailedFencingBlocksPromotionUntilItWorks"}},
	},
	// The four below passed the whole chaos slice and every end-to-end
	// test until the fault suite exercised the operator's controls and the
	// worst case of the demote budget. Their anchors are small on purpose:
	// the files around them are being reworked.
	{
		Name: "lease-without-kill-graces",
		What: "the demote budget leaves out the promote's and the demote's kill graces (lease 0.8s -> 1.3s on the test clusters)",
		Edits: []edit{{
			File: "controller/guards.go",
			Old:  "return killGrace(cfg.Promote) + cfg.Demote.Timeout + killGrace(cfg.Demote)",
			New:  "return cfg.Demote.Timeout",
		}},
		Tests: []selection{{chaos, "TestChaosSlice"}},
	},
	{
		Name: "ignore-max-lag",
		What: "the daemon ignores election.max_lag (a lagging winner promotes)",
		Edits: []edit{{
			File: "cmd/failoverd/daemon.go",
			Old:  "ccfg.MaxLag, ccfg.PreemptAfter = cfg.Election.MaxLag,",
			New:  "ccfg.MaxLag, ccfg.PreemptAfter = nil,",
		}},
		Tests: []selection{{e2e, "TestLaggingWinnerDeclinesAndACaughtUpNodeTakesOver"}, {chaos, "TestChaosSlice"}},
	},
	{
		Name: "ignore-pause",
		What: "the controller never considers the cluster paused (status still shows the pause)",
		Edits: []edit{{
			File: "controller/pause.go",
			Old:  "return c.l.pause.cur != nil",
			New:  "return false",
		}},
		Tests: []selection{{e2e, "TestPausedClusterDoesNotReplaceALeaderThatLostItsLease"}, {chaos, "TestChaosSlice"}},
	},
	{
		Name: "rpc-fence-accepts-any-2xx",
		What: "any 2xx answer to an rpc fence counts as a fence (another node's id, an older epoch, demoted false)",
		Edits: []edit{{
			File: "fencer/rpc.go",
			Old:  "if err := checkAnswer(t, answer); err != nil {",
			New:  "if err := checkAnswer(t, answer); err != nil && !mutantAcceptsAny {",
		}, {
			File:   "fencer/rpc.go",
			Append: true,
			New:    "\nconst mutantAcceptsAny = true\n",
		}},
		Tests: []selection{{chaos, "TestChaosSlice"}},
	},
	{
		Name: "graceful-release-before-demote",
		What: "a graceful end gives the term up (breadcrumb and election entry deleted) as its demote starts, not after it",
		Edits: []edit{{
			File: "controller/graceful.go",
			Old:  "tm.endReason, tm.phase, tm.graceful = reason, phEndDemote, true",
			New: `tm.endReason, tm.phase, tm.graceful = reason, phEndDemote, true
	go func() { c.send(termFinished{epoch: tm.epoch, err: tm.t.Finish(context.Background(), tm.bcVersion)}) }()`,
		}},
		Tests: []selection{{"./controller/", "TestGracefulDemoteKeepsTheTermAndHandsOverWithoutFence"}, {e2e, "TestLongGracefulDemoteHandsOverWithoutFencing"}},
	},
	{
		Name: "graceful-without-renewals",
		What: "a graceful end leaves the election (its term no longer renewed) as its demote starts",
		Edits: []edit{{
			File: "controller/graceful.go",
			Old:  "l.cand.later = cause",
			New:  "l.cand.cancel(cause)",
		}},
		Tests: []selection{{"./controller/", "TestGracefulDemoteKeepsTheTermAndHandsOverWithoutFence"}, {e2e, "TestLongGracefulDemoteHandsOverWithoutFencing"}},
	},
	{
		Name: "controller-ignores-expiry-at-rest",
		What: "the controller has no timer of its own at a term's Expiry less the demote budget: a leader at rest waits for the backend to end its term",
		Edits: []edit{{
			File: "controller/takeover.go",
			Old:  "tm.lapse(err)",
			New:  "_ = err // mutant: only the backend ends a term",
		}},
		Tests: []selection{{"./controller/", "TestLeaderAtRestDemotesByItsExpiryWhenTheBackendDoesNot"}},
	},
	{
		Name: "remove-entry-of-another-owner",
		What: "ZooKeeper's RemoveEntry deletes the znode at the path whatever its owner and czxid",
		Edits: []edit{{
			File: "cluster/zkcluster/entry.go",
			Old:  "\tif !ok {\n\t\tnow := \"gone\"",
			New:  "\tif !ok && st.Czxid == 0 {\n\t\tnow := \"gone\"",
		}},
		Tests: []selection{{"./cluster/backendtest/", "TestZooKeeper$/RemoveEntry"}},
	},
	{
		Name: "remove-entry-unguarded-etcd",
		What: "etcd's RemoveEntry deletes the key and revokes the lease without comparing the key's create revision and lease",
		Edits: []edit{{
			File: "cluster/etcdcluster/entry.go",
			Old:  "If(clientv3.Compare(clientv3.CreateRevision(e.Key), \"=\", e.Created),\n\t\t\tclientv3.Compare(clientv3.LeaseValue(e.Key), \"=\", clientv3.LeaseID(e.Owner))).",
			New:  "If().",
		}},
		Tests: []selection{{"./cluster/backendtest/", "TestEtcd/release/RemoveEntry"}},
	},
	{
		Name: "restart-removes-without-the-lock",
		What: "a starting daemon opens the node state file and goes on although another process of the node holds the file's lock",
		Edits: []edit{{
			File: "cmd/failoverd/home.go",
			Old:  "\t\tif err := h.lock(); err != nil {\n\t\t\treturn nil, err\n\t\t}",
			New:  "\t\t_ = h.lock()",
		}},
		Tests: []selection{{"./cmd/failoverd/", "TestRestartRemovesOwnPreviousEntry"}},
	},
	{
		Name: "restart-trusts-another-boot",
		What: "a starting daemon trusts the instance and the entry of a state file written in another kernel boot (a copy of the state directory on another host)",
		Edits: []edit{{
			File: "cmd/failoverd/home.go",
			Old:  "trusted = boot != \"\" && st.BootID == boot",
			New:  "trusted = true",
		}},
		Tests: []selection{{"./cmd/failoverd/", "TestRestartTrustsOnlyItsOwnBoot"}},
	},
	{
		Name: "restart-removes-before-the-startup-demote",
		What: "a starting daemon removes its previous process's election entry as it starts, before its startup demote",
		Edits: []edit{{
			File: "cmd/failoverd/restart.go",
			Old:  "\t\tr.prev, r.prevBy = e, prev\n\t}\n\treturn r, prev, nil",
			New:  "\t\tr.prev, r.prevBy = e, prev\n\t}\n\tr.once.Do(func() { r.removePrevious(context.Background()) })\n\treturn r, prev, nil",
		}},
		Tests: []selection{{"./cmd/failoverd/", "TestRestartRemovesOnlyAfterTheStartupDemote"}},
	},
	{
		Name: "remove-entry-unfair-lock",
		What: "ZooKeeper's RemoveEntry removes the unfair-mode lock, whose shared path a resent delete could take from the next leader",
		Edits: []edit{{
			File: "cluster/zkcluster/entry.go",
			Old:  "\tif election.IsUnfairLock(e.Key) {",
			New:  "\tif false && election.IsUnfairLock(e.Key) {",
		}},
		Tests: []selection{{"./cluster/zkcluster/", "TestRemoveEntryRefusesTheUnfairLock"}},
	},
	{
		Name: "takeover-without-heartbeat-compare",
		What: "the successor taking over at the leader's deadline deletes the leader's znode at any version, not at the heartbeat version it timed",
		Edits: []edit{{
			File: "cluster/zkcluster/election/takeover.go",
			Old:  "err = r.sess.Delete(ctx, pred, seen)",
			New:  "err = r.sess.Delete(ctx, pred, -1)",
		}},
		Tests: []selection{{pkgOf("cluster/zkcluster/election/takeover.go"), "TestTakeOverRefusedWhileTheHeartbeatMoves"}},
	},
	{
		Name: "takeover-lease-from-any-write",
		What: "with take_over_at_deadline the lease still runs from any answered write of the session, not from the heartbeats the successor times",
		Edits: []edit{{
			File: "cluster/zkcluster/election/lease.go",
			Old:  "\tall := r.sess.Acks()\n\tif !e.beats() {",
			New:  "\tall := r.sess.Acks()\n\tif true {",
		}},
		Tests: []selection{{pkgOf("cluster/zkcluster/election/lease.go"), "TestLeaseRunsFromHeartbeatsOnly"}},
	},
	{
		Name: "fence-first-without-proof",
		What: "fencing first takes over after any fencing method succeeded, not only after one that proves the old leader cannot act",
		Edits: []edit{{
			File: "cmd/failoverd/fencefirst.go",
			Old:  "\tif p, ok := ch.Proving(); ok {",
			New:  "\tif p, ok := ch, true; ok {",
		}},
		Tests: []selection{{e2e, "TestFenceFirstNeedsAStillHeartbeatAndAProvingFence"}},
	},
	{
		Name: "fence-first-suspects-a-moving-heartbeat",
		What: "the successor keeps timing the first heartbeat version it saw, so it suspects (and probes, and fences) a leader whose heartbeat moves: suspicion on probes alone",
		Edits: []edit{{
			File: "cluster/zkcluster/election/takeover.go",
			Old:  "\t\tif !have || st.Version != seen {",
			New:  "\t\tif !have {",
		}},
		Tests: []selection{{e2e, "TestFenceFirstNeedsAStillHeartbeatAndAProvingFence"}},
	},
	{
		Name: "fence-first-end-term-without-heartbeat-compare",
		What: "etcd's EndTerm removes the suspect's key whatever its mod revision: a heartbeat answered after the suspicion no longer saves the term",
		Edits: []edit{{
			File: "cluster/etcdcluster/fencefirst.go",
			Old:  "\t\tclientv3.Compare(clientv3.ModRevision(e.Key), \"=\", b.Version)}",
			New:  "\t\tclientv3.Compare(clientv3.ModRevision(e.Key), \">\", 0)}",
		}},
		Tests: []selection{{e2e, "TestFenceFirstSlowLeaderKeepsItsTermWhenItsHeartbeatMovedDuringTheFence"},
			{pkgOf("cluster/etcdcluster/fencefirst.go"), "TestFenceFirst/EndTerm"}},
	},
	{
		Name: "fence-first-proof-outlives-refused-removal",
		What: "a proving fence stands at once, not only once the elector removed the term it proved out: after a refused removal (the heartbeat moved) the term won later skips its fence of that breadcrumb",
		Edits: []edit{{
			File: "controller/fencefirst.go",
			Old:  "\tc.l.proving = p\n",
			New:  "\tc.l.provedOut = p\n",
		}},
		Tests: []selection{{chaos, "TestChaosSliceFenceFirst"}, {pkgOf("controller/fencefirst.go"), "TestProveOutWithoutTheRemovalStandsForNothing"}},
	},
}

type result struct {
	Name    string
	Caught  bool
	By      string
	Took    time.Duration
	Problem string // the mutant could not be tested (stale anchor, no build)
}

func main() {
	only := flag.String("only", "", "comma-separated mutant names to run (default: all)")
	noBaseline := flag.Bool("no-baseline", false, "skip the run of the chosen tests against the unmodified tree")
	keep := flag.Bool("keep", false, "keep the temporary copies")
	timeout := flag.Duration("timeout", 20*time.Minute, "go test -timeout for each run (the chaos slice takes several minutes)")
	check := flag.Bool("check", false, "only apply and build every mutant; run no tests")
	flag.Parse()

	root, err := repoRoot()
	if err != nil {
		fatal(err)
	}
	chosen, err := choose(*only)
	if err != nil {
		fatal(err)
	}
	r := runner{root: root, keep: *keep, timeout: *timeout}
	if *check {
		ok := true
		for _, m := range chosen {
			if err := r.build(m); err != nil {
				fmt.Printf("%-34s %v\n", m.Name, err)
				ok = false
			} else {
				fmt.Printf("%-34s applies and builds\n", m.Name)
			}
		}
		if !ok {
			os.Exit(1)
		}
		return
	}

	if !*noBaseline {
		start := time.Now()
		fmt.Printf(">> baseline: the chosen tests against the unmodified tree\n")
		if failed, err := r.baseline(chosen); err != nil {
			fatal(fmt.Errorf("baseline: %w", err))
		} else if failed != "" {
			fatal(fmt.Errorf("baseline: %s fails on the unmodified tree; fix it before trusting any mutant result", failed))
		}
		fmt.Printf(">> baseline passed in %v\n", time.Since(start).Round(time.Second))
	}

	var results []result
	for _, m := range chosen {
		fmt.Printf(">> mutant %s: %s\n", m.Name, m.What)
		res := r.run(m)
		results = append(results, res)
		switch {
		case res.Problem != "":
			fmt.Printf(">> mutant %s: NOT TESTED: %s\n", m.Name, res.Problem)
		case res.Caught:
			fmt.Printf(">> mutant %s: caught by %s in %v\n", m.Name, res.By, res.Took.Round(time.Second))
		default:
			fmt.Printf(">> mutant %s: SURVIVED (%v)\n", m.Name, res.Took.Round(time.Second))
		}
	}
	if !printTable(os.Stdout, results) {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	os.Exit(2)
}

func choose(only string) ([]mutant, error) {
	if only == "" {
		return mutants, nil
	}
	var out []mutant
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, m := range mutants {
			if m.Name == name {
				out, found = append(out, m), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no mutant %q", name)
		}
	}
	return out, nil
}

// printTable prints mutant → caught by → time and reports whether every
// mutant was caught.
func printTable(w io.Writer, results []result) bool {
	all := true
	fmt.Fprintf(w, "\n| mutant | caught | by test | time |\n|---|---|---|---:|\n")
	for _, r := range results {
		verdict, by := "yes", r.By
		switch {
		case r.Problem != "":
			verdict, by, all = "NOT TESTED", r.Problem, false
		case !r.Caught:
			verdict, by, all = "NO (survived)", "-", false
		}
		fmt.Fprintf(w, "| %s | %s | %s | %v |\n", r.Name, verdict, by, r.Took.Round(time.Second))
	}
	if all {
		fmt.Fprintf(w, "\nall %d mutants caught\n", len(results))
	} else {
		fmt.Fprintf(w, "\nFAIL: not every mutant was caught\n")
	}
	return all
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository root (run from inside the repository): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

type runner struct {
	root    string
	keep    bool
	timeout time.Duration
}

// baseline runs every chosen test against an unmodified copy and returns the
// first that failed ("" if none did).
func (r runner) baseline(ms []mutant) (string, error) {
	dir, err := r.copyTree()
	if err != nil {
		return "", err
	}
	defer r.cleanup(dir)
	seen := map[selection]bool{}
	for _, m := range ms {
		for _, s := range m.Tests {
			if seen[s] {
				continue
			}
			seen[s] = true
			failed, out, err := r.goTest(dir, s)
			if err != nil {
				return "", fmt.Errorf("%s %s: %w\n%s", s.Pkg, s.Run, err, tail(out))
			}
			if failed != "" {
				return failed + "\n" + tail(out), nil
			}
		}
	}
	return "", nil
}

// build applies one mutant to a fresh copy and builds it.
func (r runner) build(m mutant) error {
	dir, err := r.prepare(m)
	r.cleanup(dir)
	return err
}

// prepare copies the tree, applies m and builds it. The caller removes dir
// (even on error).
func (r runner) prepare(m mutant) (dir string, err error) {
	if dir, err = r.copyTree(); err != nil {
		return dir, err
	}
	for _, e := range m.Edits {
		if err := apply(dir, e); err != nil {
			return dir, err
		}
	}
	if out, err := r.command(dir, "go", "build", "./...").CombinedOutput(); err != nil {
		return dir, fmt.Errorf("mutant does not build: %s", firstLine(string(out)))
	}
	return dir, nil
}

// run builds one mutant and runs its tests until one fails.
func (r runner) run(m mutant) (res result) {
	start := time.Now()
	res.Name = m.Name
	defer func() { res.Took = time.Since(start) }()
	dir, err := r.prepare(m)
	defer r.cleanup(dir)
	if err != nil {
		res.Problem = err.Error()
		return res
	}
	for _, s := range m.Tests {
		failed, out, err := r.goTest(dir, s)
		if err != nil {
			res.Problem = fmt.Sprintf("%s -run %s: %v: %s", s.Pkg, s.Run, err, firstLine(tail(out)))
			return res
		}
		if failed != "" {
			res.Caught, res.By = true, failed
			fmt.Print(indent(failureExcerpt(out)))
			return res
		}
	}
	return res
}

// runPattern anchors each level of a -run selection ("TestA/Sub" matches
// exactly the subtest Sub of TestA).
func runPattern(run string) string {
	levels := strings.Split(run, "/")
	for i, l := range levels {
		levels[i] = "^(" + l + ")$"
	}
	return strings.Join(levels, "/")
}

var (
	failRE    = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)
	timeoutRE = regexp.MustCompile(`(?m)^panic: test timed out after \S+\s*\n\s*running tests:\s*\n\s*(\S+)`)
)

// goTest runs one selection in dir. failed names the failing test ("" when
// all passed); err is set when go test failed without a failing test (a
// build error, for example).
func (r runner) goTest(dir string, s selection) (failed string, out []byte, err error) {
	cmd := r.command(dir, "go", "test", "-count=1", "-p", "1", "-timeout", r.timeout.String(), "-run", runPattern(s.Run), s.Pkg)
	out, err = cmd.CombinedOutput()
	if err == nil {
		if !bytes.Contains(out, []byte("ok ")) || bytes.Contains(out, []byte("no tests to run")) {
			return "", out, fmt.Errorf("no test matched -run %s", s.Run)
		}
		return "", out, nil
	}
	// The innermost failing test is the most precise name.
	if ms := failRE.FindAllSubmatch(out, -1); len(ms) > 0 {
		return s.Pkg + " " + string(ms[len(ms)-1][1]), out, nil
	}
	if m := timeoutRE.FindSubmatch(out); m != nil {
		return s.Pkg + " " + string(m[1]) + " (timed out)", out, nil
	}
	return "", out, err
}

// command runs in dir with the race detector off in the cluster binaries
// (faster; the mutants are logic errors) and CI=true, so a missing
// ZooKeeper fails the tests instead of skipping them.
func (r runner) command(dir string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CLUSTERTEST_NORACE=1", "CI=true")
	return cmd
}

// copyTree copies the working tree (tracked and untracked, not ignored
// files, as they are now) to a new temporary directory.
func (r runner) copyTree() (string, error) {
	out, err := exec.Command("git", "-C", r.root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return "", fmt.Errorf("listing files: %w", err)
	}
	dir, err := os.MkdirTemp("", "failoverd-mutant-")
	if err != nil {
		return "", err
	}
	for _, rel := range strings.Split(string(out), "\x00") {
		if rel == "" {
			continue
		}
		src := filepath.Join(r.root, rel)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a symlink/submodule
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return dir, err
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return dir, err
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			return dir, err
		}
	}
	return dir, nil
}

func (r runner) cleanup(dir string) {
	if dir == "" {
		return
	}
	if r.keep {
		fmt.Printf("   kept %s\n", dir)
		return
	}
	os.RemoveAll(dir)
}

// apply makes one edit, failing when its anchor does not occur exactly once.
func apply(dir string, e edit) error {
	path := filepath.Join(dir, e.File)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	if e.Append {
		s += e.New
	} else {
		switch n := strings.Count(s, e.Old); n {
		case 1:
			s = strings.Replace(s, e.Old, e.New, 1)
		default:
			return fmt.Errorf("stale mutant: anchor %q occurs %d times in %s (want exactly 1); update test/mutants", e.Old, n, e.File)
		}
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func tail(b []byte) string {
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// failureExcerpt is the lines of the test output that say why it failed.
func failureExcerpt(out []byte) string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "--- FAIL") || (strings.Contains(t, "_test.go:") && !strings.Contains(t, "====")) {
			if len(t) > 240 {
				t = t[:240] + "..."
			}
			keep = append(keep, t)
		}
		if len(keep) >= 8 {
			break
		}
	}
	return strings.Join(keep, "\n") + "\n"
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("   " + l + "\n")
	}
	return b.String()
}
