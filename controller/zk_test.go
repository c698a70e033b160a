package controller

// The controller against a real ZooKeeper, through the zkcluster adapters
// the daemon uses: what the in-memory world of loop_test.go cannot show
// (real hooks and processes, real sessions, ACLs, join checks).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/fencer"
	"github.com/failoverd/failoverd/healthcheck"
	"github.com/failoverd/failoverd/internal/proc"
	"github.com/failoverd/failoverd/internal/proc/proctest"
	"github.com/failoverd/failoverd/test/zktest"
)

// ctLayout is where the test nodes' cluster lives.
var ctLayout = cluster.Layout{Root: "/failoverd", Cluster: "ct"}

func TestMain(m *testing.M) {
	proctest.TracerMain()
	os.Exit(m.Run())
}

func TestPrimaryTrackerRules(t *testing.T) {
	type step struct {
		hook string // "promote" (started) or "demote"
		ok   bool   // demote succeeded
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  bool
	}{
		{"process start: unknown", nil, true},
		{"startup demote worked", []step{{"demote", true}}, false},
		{"startup demote failed", []step{{"demote", false}}, true},
		{"promoted", []step{{"demote", true}, {"promote", false}}, true},
		{"promote failed, demote worked", []step{{"demote", true}, {"promote", false}, {"demote", true}}, false},
		{"demote of an earlier term failed, next term not promoted", []step{{"demote", true}, {"promote", false}, {"demote", false}}, true},
		{"a later failed demote does not undo a good one", []step{{"promote", false}, {"demote", true}, {"demote", false}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := primaryTracker{mayBePrimary: true}
			for _, s := range tc.steps {
				switch {
				case s.hook == "promote":
					p.promoteStarted()
				case s.ok:
					p.demoted()
				}
			}
			if p.mayBePrimary != tc.want {
				t.Errorf("mayBePrimary = %v, want %v", p.mayBePrimary, tc.want)
			}
			if p.demotedSince(0) == tc.want && len(tc.steps) > 0 {
				t.Errorf("demotedSince(0) = %v with mayBePrimary %v", !tc.want, tc.want)
			}
			if p.demotedSince(p.demotes) {
				t.Error("demotedSince(now) = true: no demote succeeded since")
			}
		})
	}
}

// The controller's demote budget is the promote's kill grace, the demote
// timeout and the demote's kill grace (KillGrace unless set), and a
// leadership whose grace cannot hold it is refused.
func TestDemoteBudget(t *testing.T) {
	cfg := Config{Demote: Hook{Timeout: time.Second}}
	if got, want := DemoteBudget(cfg), time.Second+2*KillGrace; got != want {
		t.Errorf("DemoteBudget = %v, want %v", got, want)
	}
	cfg.Promote.KillGrace, cfg.Demote.KillGrace = time.Second, 2*time.Second
	if got := DemoteBudget(cfg); got != 4*time.Second {
		t.Errorf("DemoteBudget with kill graces 1s and 2s = %v, want 4s", got)
	}
	// A term that expires left from now: refused unless the budget fits
	// in it (a whole second of slack for the clock between the two reads).
	for _, tc := range []struct {
		left time.Duration
		ok   bool
	}{{5 * time.Second, true}, {10 * time.Second, true}, {4 * time.Second, false}, {0, false}} {
		err := checkDemoteBudget(cfg, DemoteBudget(cfg), expiringTerm{at: time.Now().Add(tc.left)})
		if (err == nil) != tc.ok {
			t.Errorf("expiry in %v: err %v, want ok=%v", tc.left, err, tc.ok)
		}
	}
}

// expiringTerm is a term that expires at at (checkDemoteBudget uses only
// Expiry and SessionTimeout).
type expiringTerm struct {
	cluster.Term
	at time.Time
}

func (e expiringTerm) Expiry() (time.Time, error)    { return e.at, nil }
func (e expiringTerm) SessionTimeout() time.Duration { return 10 * time.Second }

// nopMetrics satisfies Metrics.
type nopMetrics struct{}

func (nopMetrics) StateChanged(from, to State)       {}
func (nopMetrics) Leader(isLeader bool, epoch int64) {}
func (nopMetrics) ElectionWon()                      {}
func (nopMetrics) LeadershipLost(reason string)      {}
func (nopMetrics) Promotion(result string)           {}
func (nopMetrics) Demotion(result string)            {}
func (nopMetrics) FailoverDuration(d time.Duration)  {}
func (nopMetrics) BreadcrumbUnreadable()             {}
func (nopMetrics) FencingFailed()                    {}
func (nopMetrics) HookUnkillable(hook string)        {}
func (nopMetrics) PrePromoteVetoed()                 {}
func (nopMetrics) PromotionDeclined(reason string)   {}
func (nopMetrics) Preempted()                        {}
func (nopMetrics) FollowRun(result string)           {}
func (nopMetrics) Following(epoch int64)             {}
func (nopMetrics) CooldownHold()                     {}
func (nopMetrics) HistoryAppendFailed()              {}
func (nopMetrics) PositionError(reason string)       {}

// recordingFencer stands in for STONITH: it always succeeds and records.
type recordingFencer struct {
	mu      sync.Mutex
	targets []fencer.Target
}

func (f *recordingFencer) Fence(ctx context.Context, t fencer.Target) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets = append(f.targets, t)
	return "test", nil
}

func (f *recordingFencer) fenced() []fencer.Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fencer.Target(nil), f.targets...)
}

type nodeOpts struct {
	id, host       string
	mode           string // "fair" (default) or "unfair"
	session, lease time.Duration
	demoteTimeout  time.Duration
	demoteBody     string // extra shell run by the demote hook before it succeeds
	fence          Fencer
	adminURL       string
	unhealthy      bool // never reported healthy: stays out of the election
}

// testNode is one controller with its own ZooKeeper client and hooks that
// append "promote EPOCH" / "demote REASON" lines to an events file.
type testNode struct {
	t      *testing.T
	c      *Controller
	client *zk.Client
	dir    string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startNode(t *testing.T, zkc *zktest.Cluster, o nodeOpts) *testNode {
	t.Helper()
	if o.mode == "" {
		o.mode = "fair"
	}
	if o.host == "" {
		o.host = "host-" + o.id
	}
	if o.session == 0 {
		o.session = 6 * time.Second
	}
	if o.demoteTimeout == 0 {
		o.demoteTimeout = time.Second
	}
	dir := t.TempDir()
	events := filepath.Join(dir, "events")
	promote := proctest.Script(t, fmt.Sprintf("echo \"promote $FAILOVERD_EPOCH\" >> %q\n", events))
	demote := proctest.Script(t, o.demoteBody+fmt.Sprintf("\necho \"demote $FAILOVERD_REASON\" >> %q\n", events))
	client, err := zk.NewClient(zk.Config{Servers: zkc.Addrs(), SessionTimeout: o.session}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	mode := election.Fair
	if o.mode == "unfair" {
		mode = election.Unfair
	}
	cfg := Config{
		Cluster: "ct", NodeID: o.id, Host: o.host, AdminURL: o.adminURL, ElectionMode: o.mode, Instance: NewInstance(),
		Promote:    Hook{Argv: []string{promote}, Timeout: 10 * time.Second},
		Demote:     Hook{Argv: []string{demote}, Timeout: o.demoteTimeout},
		BackoffMin: 200 * time.Millisecond, BackoffMax: time.Second,
		ShutdownTimeout: 30 * time.Second,
	}
	el, err := election.New(election.Config{Dir: ctLayout.ElectionDir(), NodeID: o.id, Mode: mode, Lease: o.lease,
		DemoteBudget: DemoteBudget(cfg)}, election.Deps{Client: client, Logger: testLogger(o.id)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := zkcluster.New(zkcluster.Config{Layout: ctLayout, NodeID: o.id, Instance: cfg.Instance},
		zkcluster.Deps{Client: client, Logger: testLogger(o.id)})
	if err != nil {
		t.Fatal(err)
	}
	deps := Deps{
		Elector: store.Elector(el), Records: store, Metrics: nopMetrics{}, Logger: testLogger(o.id),
		Hooks: ProcHooks{Promote: cfg.Promote, Demote: cfg.Demote, Cluster: cfg.Cluster, NodeID: o.id, Logger: testLogger(o.id)},
	}
	if o.fence != nil {
		deps.Fencer = o.fence
	}
	c, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{t: t, c: c, client: client, dir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- c.Run(ctx) }()
	if !o.unhealthy {
		c.HealthChanged(healthcheck.Initializing, healthcheck.Healthy, nil)
	}
	t.Cleanup(n.stop)
	return n
}

// testLogger logs to stderr when CONTROLLER_TEST_LOG is set.
func testLogger(id string) *slog.Logger {
	if os.Getenv("CONTROLLER_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", id)
}

func (n *testNode) stop() {
	n.once.Do(func() {
		n.cancel()
		select {
		case <-n.done:
		case <-time.After(60 * time.Second):
			n.t.Errorf("controller %s did not stop", n.c.cfg.NodeID)
		}
		n.client.Close() // the daemon's session actor closes it after Run
	})
}

func (n *testNode) events() []string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "events"))
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func (n *testNode) count(prefix string) int {
	k := 0
	for _, e := range n.events() {
		if strings.HasPrefix(e, prefix) {
			k++
		}
	}
	return k
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *testNode) state() State { return n.c.Status().State }

// Item 3: a demote that arrives while a term is in progress, after an
// earlier term's demote failed, must not be told "demoted".
func TestDemoteAnswerAfterFailedDemote(t *testing.T) {
	zkc := zktest.Start(t, 1)
	failFile := filepath.Join(t.TempDir(), "fail")
	a := startNode(t, zkc, nodeOpts{id: "a", demoteBody: fmt.Sprintf("if [ -e %q ]; then sleep 1; exit 1; fi", failFile)})
	waitFor(t, 30*time.Second, "a to lead", func() bool { return a.state() == StateLeader })

	// The term ends and its demote fails: the service may still be primary.
	if err := os.WriteFile(failFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.c.HealthChanged(healthcheck.Healthy, healthcheck.Unhealthy, nil)
	waitFor(t, 30*time.Second, "the term to end", func() bool { return a.state() == StateOut })
	a.c.HealthChanged(healthcheck.Unhealthy, healthcheck.Healthy, nil)
	// The next term fences our own previous term with a local demote, which
	// fails (a second, slow): ask for a demote while that term runs.
	waitFor(t, 30*time.Second, "the next term", func() bool { return a.state() == StateFencing })
	if o := a.c.Demote(t.Context(), "test"); o.Demoted || o.Err == nil {
		t.Fatalf("Demote() = %+v while every demote failed since the last promotion, want demoted=false with an error", o)
	}

	// Once the demote works, the answer is yes.
	if err := os.Remove(failFile); err != nil {
		t.Fatal(err)
	}
	if o := a.c.Demote(t.Context(), "test"); !o.Demoted {
		t.Fatalf("Demote() = %+v; want demoted=true", o)
	}
	if a.count("promote") != 1 {
		t.Errorf("events %v, want exactly one promotion", a.events())
	}
}

// Item 8: a demote hook that cannot be killed must not keep the leadership:
// after its timeout + kill grace + proc.ReapWait the node gives up its
// election znode, a successor is elected, fences it and promotes.
func TestUnkillableDemoteReleasesLeadership(t *testing.T) {
	zkc := zktest.Start(t, 1)
	snippet, release := proctest.Unkillable(t)
	stuckFile := filepath.Join(t.TempDir(), "stuck")
	failFile := filepath.Join(t.TempDir(), "fail")
	a := startNode(t, zkc, nodeOpts{id: "a", demoteBody: fmt.Sprintf("if [ -e %q ]; then\n%s\nfi\nif [ -e %q ]; then exit 1; fi", stuckFile, snippet, failFile)})
	waitFor(t, 30*time.Second, "a to lead", func() bool { return a.state() == StateLeader })
	f := &recordingFencer{}
	b := startNode(t, zkc, nodeOpts{id: "b", fence: f})
	waitFor(t, 30*time.Second, "b to stand by", func() bool { return b.state() == StateStandby })

	if err := os.WriteFile(stuckFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a.c.HealthChanged(healthcheck.Healthy, healthcheck.Unhealthy, nil) // storage died: demote hangs in umount
	// Session 6s, lease 4s: the demote gets 1s + 1s kill grace.
	bound := proc.MaxDuration(time.Second, time.Second) + 10*time.Second
	waitFor(t, bound, "b to promote", func() bool { return b.count("promote") == 1 })
	t.Logf("b promoted %v after a's demote hung", time.Since(start).Round(time.Millisecond))
	if got := f.fenced(); len(got) != 1 || got[0].NodeID != "a" {
		t.Errorf("b fenced %+v, want a", got)
	}
	st := a.c.Status()
	if !strings.Contains(st.LastError, "SIGKILL") {
		t.Errorf("a's last error = %q, want it to say the hook did not exit after SIGKILL", st.LastError)
	}
	// While the hook is alive, a demote request cannot be honoured.
	if o := a.c.Demote(t.Context(), "test"); o.Demoted || !errors.Is(o.Err, ErrHookStuck) {
		t.Errorf("Demote() = %+v, want demoted=false because the hook is stuck", o)
	}
	a.c.HealthChanged(healthcheck.Unhealthy, healthcheck.Healthy, nil)
	time.Sleep(time.Second)
	if a.state() != StateOut {
		t.Errorf("a is %s while its hook is stuck, want out", a.state())
	}

	// Review #3: once the stuck demote is reaped, the service may still be
	// primary: a must demote it before it rejoins, and stay out while that
	// demote fails.
	if err := os.Remove(stuckFile); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(failFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	demotes := a.count("demote")
	release()
	time.Sleep(3 * time.Second)
	if a.state() != StateOut {
		t.Fatalf("a is %s after its stuck demote was reaped while every demote since fails, want out", a.state())
	}
	if err := os.Remove(failFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a to rejoin after the hook went and a demote worked", func() bool { return a.state() == StateStandby })
	if a.count("demote_hook_unkillable") != 1 || a.count("demote") != demotes+1 {
		t.Errorf("events %v: want one demote (reason hook_unkillable) after the stuck hook was reaped", a.events())
	}
	if e := a.c.Status().LastError; e != "" {
		t.Errorf("a is back in the election but its last error still says %q", e)
	}
}

// Item 11: the demote budget is checked against the session timeout the
// server granted. Asked for 100s, ZooKeeper (maxSessionTimeout 60s) grants
// 60s; with a 50s lease only 10s remain, too little for a 30s demote,
// although the configured numbers (100s - 50s) would fit.
func TestDemoteBudgetUsesNegotiatedTimeout(t *testing.T) {
	zkc := zktest.Start(t, 1)
	a := startNode(t, zkc, nodeOpts{id: "a", session: 100 * time.Second, lease: 50 * time.Second, demoteTimeout: 30 * time.Second})
	waitFor(t, 30*time.Second, "a to refuse to lead", func() bool {
		return strings.Contains(a.c.Status().LastError, "granted")
	})
	time.Sleep(2 * time.Second)
	if n := a.count("promote"); n != 0 {
		t.Fatalf("a promoted %d times; it must refuse to lead", n)
	}
	t.Logf("refusal: %s", a.c.Status().LastError)
}

// openSession connects a client of its own (with auth, if not nil) to zkc
// and waits, within ctx, for its session. The caller calls the returned
// func (it closes the client) when done with the session: helpers that poll
// open one per call, and leaving them open would pile up connections until
// the test ends.
func openSession(ctx context.Context, t *testing.T, zkc *zktest.Cluster, auth *zk.Auth) (*zk.Session, func()) {
	t.Helper()
	client, err := zk.NewClient(zk.Config{Servers: zkc.Addrs(), SessionTimeout: 6 * time.Second, Auth: auth}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := client.Session(ctx)
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	return sess, client.Close
}

func electionQueue(t *testing.T, zkc *zktest.Cluster) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sess, closeSess := openSession(ctx, t, zkc, nil)
	defer closeSess()
	kids, err := sess.Children(ctx, ctLayout.ElectionDir())
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return kids
}

// Item 14a: a second process with the same node id refuses to join while
// the first is alive, names the first's host, and once it leads it fences
// the first (the breadcrumb names the id but another host) instead of
// taking it for its own previous term.
func TestDuplicateNodeID(t *testing.T) {
	zkc := zktest.Start(t, 1)
	failFile := filepath.Join(t.TempDir(), "fail")
	a1 := startNode(t, zkc, nodeOpts{id: "a", host: "host-one", demoteBody: fmt.Sprintf("if [ -e %q ]; then exit 1; fi", failFile)})
	waitFor(t, 30*time.Second, "a@host-one to lead", func() bool { return a1.state() == StateLeader })
	f := &recordingFencer{}
	a2 := startNode(t, zkc, nodeOpts{id: "a", host: "host-two", fence: f})
	waitFor(t, 30*time.Second, "a@host-two to refuse", func() bool {
		return strings.Contains(a2.c.Status().LastError, `host "host-one"`)
	})
	time.Sleep(2 * time.Second)
	if q := electionQueue(t, zkc); len(q) != 1 {
		t.Fatalf("election znodes %v: the duplicate joined", q)
	}
	if a2.state() != StateOut {
		t.Errorf("duplicate is %s, want out", a2.state())
	}

	// The first one stops, its demote failing: the breadcrumb stays.
	if err := os.WriteFile(failFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a1.stop()
	waitFor(t, 30*time.Second, "a@host-two to lead", func() bool { return a2.state() == StateLeader })
	got := f.fenced()
	if len(got) != 1 || got[0].Host != "host-one" {
		t.Fatalf("a@host-two fenced %+v, want the other host's a", got)
	}
	// Review #10: the refusal is over, so is its error.
	if e := a2.c.Status().LastError; e != "" {
		t.Errorf("a@host-two leads but its last error still says %q", e)
	}
}

// Item 14b: a node of the other election mode refuses to join.
func TestMixedElectionModes(t *testing.T) {
	zkc := zktest.Start(t, 1)
	a := startNode(t, zkc, nodeOpts{id: "a", mode: "fair"})
	waitFor(t, 30*time.Second, "a to lead", func() bool { return a.state() == StateLeader })
	b := startNode(t, zkc, nodeOpts{id: "b", mode: "unfair"})
	waitFor(t, 30*time.Second, "b to refuse", func() bool {
		return strings.Contains(b.c.Status().LastError, `election.mode is "unfair"`)
	})
	time.Sleep(2 * time.Second)
	if q := electionQueue(t, zkc); len(q) != 1 || q[0] == "lock" {
		t.Fatalf("election znodes %v: the unfair node joined", q)
	}
	if b.count("promote") != 0 {
		t.Fatal("the unfair node promoted")
	}
}

// A request whose target never takes over is deleted when its timeout (as
// measured by the nodes) is over, so nodes that restart later do not stand
// aside for it again; the node leads again meanwhile.
func TestExpiredFailoverRequestDeleted(t *testing.T) {
	zkc := zktest.Start(t, 1)
	a := startNode(t, zkc, nodeOpts{id: "a"})
	waitFor(t, 30*time.Second, "a to lead", func() bool { return a.state() == StateLeader })
	sess, closeSess := openSession(t.Context(), t, zkc, nil)
	defer closeSess()
	path := ctLayout.Failover()
	data, _ := json.Marshal(cluster.FailoverRequest{To: "ghost", TimeoutMS: 1500, ID: "r1", Deadline: time.Now().Add(time.Hour)})
	if _, _, err := sess.Create(t.Context(), path, data, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a to stand aside", func() bool { return a.state() == StateOut })
	waitFor(t, 15*time.Second, "the expired request to be deleted", func() bool {
		ok, _, err := sess.Exists(t.Context(), path)
		return err == nil && !ok
	})
	waitFor(t, 15*time.Second, "a to lead again", func() bool { return a.state() == StateLeader })
}

// writeFailoverRequest creates or replaces the failover request znode.
func writeFailoverRequest(t *testing.T, zkc *zktest.Cluster, req cluster.FailoverRequest) {
	t.Helper()
	sess, closeSess := openSession(t.Context(), t, zkc, nil)
	defer closeSess()
	data, _ := json.Marshal(req)
	path := ctLayout.Failover()
	if _, err := sess.Set(t.Context(), path, data, -1); errors.Is(err, zk.ErrNoNode) {
		_, _, err = sess.Create(t.Context(), path, data, zk.Persistent)
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

// Review #4a: failover --to b, then --to c: c stood aside for the first
// request and must end that stand-aside when the second names it, instead
// of staying out for the first request's whole timeout.
func TestOverlappingFailoverRequestEndsStandAside(t *testing.T) {
	zkc := zktest.Start(t, 1)
	c := startNode(t, zkc, nodeOpts{id: "c"})
	waitFor(t, 30*time.Second, "c to lead", func() bool { return c.state() == StateLeader })
	writeFailoverRequest(t, zkc, cluster.FailoverRequest{To: "b", TimeoutMS: 120000, ID: "r1"})
	waitFor(t, 15*time.Second, "c to stand aside", func() bool { return c.state() == StateOut })
	writeFailoverRequest(t, zkc, cluster.FailoverRequest{To: "c", TimeoutMS: 120000, ID: "r2"})
	waitFor(t, 30*time.Second, "c to lead again well before the first request's 120s", func() bool { return c.state() == StateLeader })
}

// Review #10: a node that cannot write its member record (here the members
// directory lets others only read) does not join, and says why in its
// status; once it can, it joins and the error goes.
func TestMemberWriteFailureShown(t *testing.T) {
	zkc := zktest.Start(t, 1)
	open := func(auth *zk.Auth) *zk.Session {
		sess, closeSess := openSession(t.Context(), t, zkc, auth)
		t.Cleanup(closeSess)
		return sess
	}
	if err := open(nil).EnsurePath(t.Context(), ctLayout.Dir()); err != nil {
		t.Fatal(err)
	}
	owner := open(&zk.Auth{User: "owner", Password: "secret"})
	if _, _, err := owner.Create(t.Context(), ctLayout.MembersDir(), nil, zk.Persistent); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, zkc, nodeOpts{id: "a"})
	waitFor(t, 30*time.Second, "a to say why it is not joining", func() bool {
		return strings.Contains(a.c.Status().LastError, "member record")
	})
	if a.state() != StateOut || len(electionQueue(t, zkc)) != 0 {
		t.Fatalf("a is %s, queue %v: it joined without a member record", a.state(), electionQueue(t, zkc))
	}
	t.Logf("last error: %s", a.c.Status().LastError)
	if err := owner.Delete(t.Context(), ctLayout.MembersDir(), -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a to lead", func() bool { return a.state() == StateLeader })
	if e := a.c.Status().LastError; e != "" {
		t.Errorf("a leads but its last error still says %q", e)
	}
}

// Review #9: a breadcrumb of our node id and host but of another process
// that advertised another admin URL (a duplicate on this host, configured
// for another service) is fenced, not taken for our previous term; one of
// an earlier run with our admin URL (a restart) is demoted locally.
func TestPreviousTermOnSameHost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		firstURL  string
		wantFence bool
	}{
		{"duplicate with another admin URL", "http://127.0.0.1:9102", true},
		{"restart with the same admin URL", "http://127.0.0.1:9101", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			zkc := zktest.Start(t, 1)
			failFile := filepath.Join(t.TempDir(), "fail")
			first := startNode(t, zkc, nodeOpts{id: "a", host: "host-one", adminURL: tc.firstURL, demoteBody: fmt.Sprintf("if [ -e %q ]; then exit 1; fi", failFile)})
			waitFor(t, 30*time.Second, "the first a to lead", func() bool { return first.state() == StateLeader })
			// It stops, its demote failing: the breadcrumb stays.
			if err := os.WriteFile(failFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			first.stop()
			f := &recordingFencer{}
			second := startNode(t, zkc, nodeOpts{id: "a", host: "host-one", adminURL: "http://127.0.0.1:9101", fence: f})
			waitFor(t, 30*time.Second, "the second a to lead", func() bool { return second.state() == StateLeader })
			fenced, local := len(f.fenced()), second.count("demote_fence_previous_term")
			if tc.wantFence && (fenced != 1 || local != 0) {
				t.Fatalf("fenced %+v, local demotes %d: want the other process fenced and no local demote", f.fenced(), local)
			}
			if !tc.wantFence && (fenced != 0 || local != 1) {
				t.Fatalf("fenced %+v, local demotes %d: want our previous term demoted locally", f.fenced(), local)
			}
		})
	}
}

// Review (rpc fencing liveness): a daemon restarted after a crash of its
// leader's host answers a fence of that leadership's epoch once its startup
// demote worked: the rpc fencer asks for epoch >= the breadcrumb's.
func TestRestartedNodeAnswersFenceWithPreviousEpoch(t *testing.T) {
	zkc := zktest.Start(t, 1)
	failFile := filepath.Join(t.TempDir(), "fail")
	const url = "http://127.0.0.1:9101"
	first := startNode(t, zkc, nodeOpts{id: "a", host: "host-one", adminURL: url, demoteBody: fmt.Sprintf("if [ -e %q ]; then exit 1; fi", failFile)})
	waitFor(t, 30*time.Second, "a to lead", func() bool { return first.state() == StateLeader })
	epoch := first.c.Status().Epoch
	// The host crashes: no demote, the breadcrumb stays.
	if err := os.WriteFile(failFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	first.stop()
	again := startNode(t, zkc, nodeOpts{id: "a", host: "host-one", adminURL: url, unhealthy: true})
	waitFor(t, 30*time.Second, "the restarted a to be up", func() bool { return again.state() == StateOut })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if o := again.c.Demote(ctx, "rpc fence"); !o.Demoted || o.Epoch != epoch {
		t.Fatalf("Demote() = %+v; want demoted=true at epoch %d", o, epoch)
	}
}

// A node whose startup demote fails does not join the election: its service
// may still act as primary from before a crash, and no successor would
// fence it (the breadcrumb names the successor's own term). It retries with
// a back-off, says why in its status, and joins once the demote worked.
func TestStartupDemoteFailureKeepsNodeOut(t *testing.T) {
	zkc := zktest.Start(t, 1)
	dir := t.TempDir()
	failFile, attempts := filepath.Join(dir, "fail"), filepath.Join(dir, "attempts")
	if err := os.WriteFile(failFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, zkc, nodeOpts{id: "a", demoteBody: fmt.Sprintf("echo x >> %q\nif [ -e %q ]; then exit 1; fi", attempts, failFile)})
	tries := func() int { b, _ := os.ReadFile(attempts); return strings.Count(string(b), "x") }
	waitFor(t, 30*time.Second, "three failed startup demotes", func() bool { return tries() >= 3 })
	st := a.c.Status()
	if st.State != StateOut || !strings.Contains(st.LastError, "startup demote failed") {
		t.Errorf("status while the startup demote fails: state %s, last error %q", st.State, st.LastError)
	}
	if q := electionQueue(t, zkc); len(q) != 0 {
		t.Errorf("joined the election while its service may be primary: %v", q)
	}
	if ev := a.events(); len(ev) != 0 {
		t.Errorf("hooks succeeded while the demote fails: %v", ev)
	}
	if err := os.Remove(failFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a to lead once its demote worked", func() bool { return a.state() == StateLeader })
	if ev := a.events(); len(ev) < 2 || ev[0] != "demote_startup" || !strings.HasPrefix(ev[1], "promote_") {
		t.Errorf("events %v, want the startup demote, then the promote", ev)
	}
	if st := a.c.Status(); strings.Contains(st.LastError, "startup demote failed") {
		t.Errorf("last error not cleared: %q", st.LastError)
	}
}
