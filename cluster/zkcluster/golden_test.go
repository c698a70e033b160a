package zkcluster

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/cluster/zkcluster/election"
	"github.com/failoverd/failoverd/cluster/zkcluster/zk"
	"github.com/failoverd/failoverd/test/zktest"
)

// The golden-file test of every record failoverd stores in ZooKeeper: each
// record's znode path, whether it is ephemeral, and its exact bytes, as
// written through the Store and a Term, and read back through them from
// bytes seeded raw. The golden files live in cluster/testdata/golden and
// are shared with etcdcluster's TestGoldenRecords: both backends store the
// same bytes; only the path lists differ (paths-zookeeper.txt,
// paths-etcd.txt). The test uses only exported methods of Store and Term
// and the raw ZooKeeper session, so that it holds across any rewrite of
// the backend's internals.
//
// go test ./cluster/zkcluster/ -run Golden -update rewrites the golden
// files from what this backend stores; run etcdcluster's without -update
// afterwards to check that both backends still agree.

var updateGolden = flag.Bool("update", false, "rewrite cluster/testdata/golden from what ZooKeeper holds")

const goldenDir = "../testdata/golden"

// The layouts of the test: records written through the API (golden), the
// place a move copies them to (goldenMovedLayout), and records seeded raw
// (goldenSeedLayout, under another root so that the tree of the first two
// is compared alone).
var (
	goldenLayout      = cluster.Layout{Root: "/failoverd", Cluster: "golden"}
	goldenMovedLayout = cluster.Layout{Root: "/failoverd", Cluster: "golden-moved"}
	goldenSeedLayout  = cluster.Layout{Root: "/seeded", Cluster: "golden"}
)

// --- the fixed inputs (the same in etcdcluster's golden_test.go) ---

func goldenTime(sec int) time.Time { return time.Date(2026, 1, 2, 3, 4, sec, 123456789, time.UTC) }

var goldenPause = cluster.Pause{By: "operator@host-o", Reason: "maintenance window", At: goldenTime(1)}

func goldenMember() cluster.Member {
	prio, pos := 2, int64(12345)
	p := goldenPause
	return cluster.Member{
		Cluster: "golden", NodeID: "a", Host: "host-a", AdminURL: "http://10.0.0.1:9101",
		State: "standby", Role: "standby", Health: "healthy", Epoch: 12, Since: goldenTime(2),
		Connected: true, ZKConnected: true, LeaseRemaining: 4.5, LastError: "last error", Version: "1.2.3",
		Instance: "inst-a", ServiceAddress: "db1.example.com:6379",
		Following: "b", FollowingEpoch: 9, FollowingSince: goldenTime(3),
		Priority: &prio, Position: &pos, PositionAt: goldenTime(4),
		NotFollowing: "not following", NotLeading: "held: details",
		Holds: "c until 2026-01-02T03:05:00Z: promote failed", Paused: &p,
		CooldownUntil: goldenTime(5), ConfigHash: "sha256:0011", ConfigLoadedAt: goldenTime(6),
	}
}

var goldenKnown = cluster.KnownMember{NodeID: "a", Host: "host-a", AdminURL: "http://10.0.0.1:9101", Instance: "inst-a", LastSeen: goldenTime(7)}

var goldenBreadcrumb = breadcrumb.Record{Version: breadcrumb.Version, NodeID: "a", Host: "host-a", AdminURL: "http://10.0.0.1:9101",
	Epoch: 12, Since: goldenTime(8), Instance: "inst-a", ServiceAddress: "db1.example.com:6379"}

var goldenPosition = cluster.LeaderPosition{NodeID: "a", Epoch: 12, Position: 12345, At: goldenTime(9)}

// The failover requests: a node's handover proposal, an operator's request
// to a, and that request once a marked it done at epoch goldenDoneEpoch.
var (
	goldenProposal = cluster.FailoverRequest{To: "a", Deadline: goldenTime(10), TimeoutMS: 60000, ID: "req-1", By: "b",
		Reason: cluster.ReasonPreferredPriority}
	goldenRequest = cluster.FailoverRequest{To: "a", Deadline: goldenTime(11), TimeoutMS: 30000, ID: "req-2", By: "operator@host-o"}
)

const goldenDoneEpoch = 42

func goldenDone() cluster.FailoverRequest {
	r := goldenRequest
	r.Done, r.Epoch = true, goldenDoneEpoch
	return r
}

// The history: three appends, and the entries as stored (AppendHistory
// fills in the old leader of the handoff from the entry before it, and
// cuts strings to 128 bytes).
func goldenAppends() []cluster.HistoryEntry {
	return []cluster.HistoryEntry{
		{At: goldenTime(12), NewLeader: "a", NewEpoch: 5, NewHost: "host-a", Reason: cluster.HistoryStart,
			FenceMethod: cluster.FenceNone, DurationMS: 1500},
		{At: goldenTime(13), NewLeader: "b", NewEpoch: 9, NewHost: "host-b", Reason: cluster.HistoryHandoff,
			FenceMethod: cluster.FenceNone, DurationMS: 800},
		{At: goldenTime(14), OldLeader: "b", OldEpoch: 9, OldHost: "host-b", NewLeader: "a", NewEpoch: 12, NewHost: "host-a",
			Reason: cluster.HistorySwitchover, FenceMethod: "rpc", DurationMS: 2300, RequestedBy: strings.Repeat("r", 130)},
	}
}

func goldenStored() []cluster.HistoryEntry {
	h := goldenAppends()
	h[1].OldLeader, h[1].OldEpoch, h[1].OldHost = "a", 5, "host-a"
	h[2].RequestedBy = strings.Repeat("r", 128)
	return h
}

// The cluster records: one as CheckJoin creates it (its random ID
// normalised to goldenIDPlaceholder), one a move created at the new place,
// and the old place's once marked moved.
const (
	goldenIDPlaceholder = "RECORD-ID"
	goldenOldID         = "0123456789abcdef0123456789abcdef"
	goldenNewID         = "fedcba9876543210fedcba9876543210"
)

func goldenMovedIn() cluster.ClusterRecord {
	at := goldenTime(15)
	return cluster.ClusterRecord{ElectionMode: "fair", ID: goldenNewID, EpochFloor: 1000, MovedFrom: []string{goldenOldID}, MovedAt: &at}
}

func goldenMovedAway() cluster.ClusterRecord {
	at := goldenTime(16)
	return cluster.ClusterRecord{ElectionMode: cluster.MovedMode, ID: goldenOldID, MovedTo: goldenNewID,
		MovedToPlace: "etcd [https://10.0.0.7:2379] /failoverd/orders", ModeBeforeMove: "fair", MovedAt: &at}
}

// goldenLegacyRecord is a cluster record of a version without record IDs:
// CheckJoin gives it one.
const goldenLegacyRecord = `{"election_mode":"fair"}`

// goldenNormaliseID replaces the random record id in data (exactly once) with
// goldenIDPlaceholder.
func goldenNormaliseID(t *testing.T, data []byte, id string) []byte {
	t.Helper()
	if len(id) != 32 || bytes.Count(data, []byte(`"`+id+`"`)) != 1 {
		t.Fatalf("record id %q not found once in %s", id, data)
	}
	return bytes.Replace(data, []byte(id), []byte(goldenIDPlaceholder), 1)
}

// goldenNormaliseCandidate replaces the random parts of an election entry's
// data, the elector's GUID and its join nonce, with GUID and JOIN.
func goldenNormaliseCandidate(data []byte) []byte {
	data = regexp.MustCompile(`"guid":"[0-9a-f]{32}"`).ReplaceAll(data, []byte(`"guid":"GUID"`))
	return regexp.MustCompile(`"join":"[0-9a-f]{16}"`).ReplaceAll(data, []byte(`"join":"JOIN"`))
}

// --- golden files ---

func goldenReadGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatalf("golden file: %v (run with -update to create it)", err)
	}
	return b
}

// goldenCheckGolden compares got with the golden file name (or, with -update,
// writes it).
func goldenCheckGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join(goldenDir, name)
	if *updateGolden {
		if old, err := os.ReadFile(file); err == nil && !bytes.Equal(old, got) {
			t.Logf("updating %s:\n old: %s\n new: %s", name, old, got)
		}
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want := goldenReadGolden(t, name); !bytes.Equal(got, want) {
		t.Errorf("%s: the stored bytes differ from the golden file\n got: %s\nwant: %s", name, got, want)
	}
}

// --- raw ZooKeeper ---

// goldenRawNode is one znode of the tree as the path list names it.
type goldenRawNode struct{ path, kind string }

// kind of a znode: "session" (ephemeral), "dir" (no data, made for its
// children) or "persistent".
func goldenZnodeKind(data []byte, st zk.Stat) string {
	switch {
	case st.EphemeralOwner != 0:
		return "session"
	case len(data) == 0 && st.NumChildren > 0:
		return "dir"
	}
	return "persistent"
}

// goldenRawGet reads p's bytes and kind on the raw session.
func goldenRawGet(t *testing.T, sess *zk.Session, p string) ([]byte, string) {
	t.Helper()
	data, st, err := sess.Get(t.Context(), p)
	if err != nil {
		t.Fatalf("raw read of %s: %v", p, err)
	}
	return data, goldenZnodeKind(data, st)
}

// goldenCheckRecord checks the znode at p: its kind, and its bytes against the
// golden file name.
func goldenCheckRecord(t *testing.T, sess *zk.Session, p, kind, name string) []byte {
	t.Helper()
	data, k := goldenRawGet(t, sess, p)
	if k != kind {
		t.Errorf("%s is %s, want %s", p, k, kind)
	}
	goldenCheckGolden(t, name, data)
	return data
}

// goldenRawPut seeds data at p as a persistent znode (replacing what is there).
func goldenRawPut(t *testing.T, sess *zk.Session, p string, data []byte) {
	t.Helper()
	ctx := t.Context()
	if err := sess.EnsurePath(ctx, path.Dir(p)); err != nil {
		t.Fatal(err)
	}
	if err := sess.Delete(ctx, p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	if _, _, err := sess.Create(ctx, p, data, zk.Persistent); err != nil {
		t.Fatalf("seeding %s: %v", p, err)
	}
}

// goldenTree lists every znode below root (root included), sorted.
func goldenTree(t *testing.T, sess *zk.Session, root string) []goldenRawNode {
	t.Helper()
	data, kind := goldenRawGet(t, sess, root)
	_ = data
	out := []goldenRawNode{{root, kind}}
	kids, err := sess.Children(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		out = append(out, goldenTree(t, sess, path.Join(root, k))...)
	}
	slices.SortFunc(out, func(a, b goldenRawNode) int { return strings.Compare(a.path, b.path) })
	return out
}

// goldenElectionName matches a fair-mode election znode's name: c_<GUID>-n_<sequence>.
var goldenElectionName = regexp.MustCompile(`/c_[0-9a-f]{32}-n_[0-9]{10}$`)

const goldenElectionPattern = "/c_{guid}-n_{seq}"

// goldenCheckPaths compares the tree with the golden path list (lines "<path>
// <kind>"; an election entry's name is the pattern c_{guid}-n_{seq}).
func goldenCheckPaths(t *testing.T, nodes []goldenRawNode) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# Every znode failoverd's records make in ZooKeeper (zkcluster's TestGoldenRecords):\n" +
		"# path, and session (ephemeral), persistent, or dir (no data, a parent).\n")
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s %s\n", goldenElectionName.ReplaceAllString(n.path, goldenElectionPattern), n.kind)
	}
	goldenCheckGolden(t, "paths-zookeeper.txt", []byte(b.String()))
}

// --- the test ---

// goldenStore is a Store of node a in layout l on its own client.
func goldenStore(t *testing.T, zkc *zktest.Cluster, l cluster.Layout) (*Store, *zk.Client) {
	t.Helper()
	client, err := zk.NewClient(zk.Config{Servers: zkc.Addrs(), SessionTimeout: 4 * time.Second}, zk.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s, err := New(Config{Layout: l, NodeID: "a", Instance: "inst-a"}, Deps{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	return s, client
}

// goldenTerm campaigns for node a (fair mode) in s's layout and returns
// the term won, held until the test ends.
func goldenTerm(t *testing.T, s *Store, c *zk.Client) cluster.Term {
	t.Helper()
	el, err := election.New(election.Config{Dir: s.Layout().ElectionDir(), NodeID: "a", Mode: election.Fair}, election.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	won := make(chan cluster.Term, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Elector(el).Campaign(ctx, func(ctx context.Context, tm cluster.Term) {
			select {
			case won <- tm:
			default:
			}
			<-ctx.Done()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case tm := <-won:
		return tm
	case <-time.After(30 * time.Second):
		t.Fatal("not elected")
	}
	return nil
}

func goldenMust(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func goldenWantEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func TestGoldenRecords(t *testing.T) {
	zkc := zktest.Start(t, 1)
	_, ac := goldenStore(t, zkc, goldenLayout)
	adm := session(t, ac)
	t.Run("Write", func(t *testing.T) { testGoldenWrite(t, zkc, adm) })
	t.Run("Read", func(t *testing.T) { testGoldenRead(t, zkc, adm) })
}

// testGoldenWrite writes every record through the API and compares the
// znodes with the golden files and the path list.
func testGoldenWrite(t *testing.T, zkc *zktest.Cluster, adm *zk.Session) {
	ctx := t.Context()
	l := goldenLayout
	s, c := goldenStore(t, zkc, l)

	// The cluster record as CheckJoin creates it: only its ID is random.
	rec, err := s.CheckJoin(ctx, "fair", "")
	goldenMust(t, "CheckJoin", err)
	data, _ := goldenRawGet(t, adm, l.Config())
	goldenCheckGolden(t, "config-created.json", goldenNormaliseID(t, data, rec.ID))

	goldenMust(t, "PublishMember", s.PublishMember(ctx, goldenMember()))
	goldenCheckRecord(t, adm, l.Member("a"), "session", "member.json")

	goldenMust(t, "RememberMember", s.RememberMember(ctx, goldenKnown))
	goldenCheckRecord(t, adm, l.Known("a"), "persistent", "known.json")

	p, created, err := s.SetPause(ctx, goldenPause)
	goldenMust(t, "SetPause", err)
	if !created || !reflect.DeepEqual(p, goldenPause) {
		t.Errorf("SetPause = %+v, %v; want the pause, created", p, created)
	}
	goldenCheckRecord(t, adm, l.Pause(), "persistent", "pause.json")

	tm := goldenTerm(t, s, c)
	_, err = tm.WriteBreadcrumb(ctx, goldenBreadcrumb, cluster.Revision{})
	goldenMust(t, "WriteBreadcrumb", err)
	goldenCheckRecord(t, adm, l.Breadcrumb(), "persistent", "breadcrumb.json")

	goldenMust(t, "WriteLeaderPosition", tm.WriteLeaderPosition(ctx, goldenPosition))
	goldenCheckRecord(t, adm, l.LeaderPosition(), "persistent", "leader-position.json")

	stored := goldenStored()
	for i, e := range goldenAppends() {
		got, err := tm.AppendHistory(ctx, e)
		goldenMust(t, "AppendHistory", err)
		goldenWantEqual(t, fmt.Sprintf("AppendHistory #%d as stored", i+1), got, stored[i])
		goldenCheckRecord(t, adm, l.History(), "persistent", fmt.Sprintf("history-%d.json", i+1))
	}

	goldenMust(t, "ProposeFailover", s.ProposeFailover(ctx, goldenProposal))
	goldenCheckRecord(t, adm, l.Failover(), "session", "failover-proposed.json")
	goldenMust(t, "RequestFailover", s.RequestFailover(ctx, goldenRequest))
	goldenCheckRecord(t, adm, l.Failover(), "session", "failover.json")
	goldenMust(t, "CompleteFailover", tm.CompleteFailover(ctx, goldenDoneEpoch))
	goldenCheckRecord(t, adm, l.Failover(), "session", "failover-done.json")

	// The election entry: written by package election, not by a Store, in
	// the format {"node_id","guid","join"}; the join nonce is dropped when
	// the leader's renewal rewrites the data (election's announce), so
	// either form may be there now.
	kids, err := adm.Children(ctx, l.ElectionDir())
	goldenMust(t, "listing the election", err)
	if len(kids) != 1 || !goldenElectionName.MatchString("/"+kids[0]) {
		t.Fatalf("election entries %q; want one c_<guid>-n_<seq>", kids)
	}
	data, kind := goldenRawGet(t, adm, path.Join(l.ElectionDir(), kids[0]))
	if kind != "session" {
		t.Errorf("the election entry is %s, want session", kind)
	}
	data = goldenNormaliseCandidate(data)
	if bytes.Contains(data, []byte(`"join"`)) {
		goldenCheckGolden(t, "election.json", data)
	} else if want := bytes.Replace(goldenReadGolden(t, "election.json"), []byte(`,"join":"JOIN"`), nil, 1); !bytes.Equal(data, want) {
		t.Errorf("the renewed election entry is %s, want %s", data, want)
	}

	// A move: the new place gets its record and the carried records, the
	// old one is marked moved.
	carried, err := s.ReadCarried(ctx)
	goldenMust(t, "ReadCarried", err)
	goldenWantEqual(t, "ReadCarried", carried, cluster.Carried{Breadcrumb: goldenReadGolden(t, "breadcrumb.json"),
		History: goldenReadGolden(t, "history-3.json"), Pause: goldenReadGolden(t, "pause.json")})
	ms, _ := goldenStore(t, zkc, goldenMovedLayout)
	_, _, err = ms.WriteClusterRecord(ctx, goldenMovedIn(), cluster.Revision{})
	goldenMust(t, "WriteClusterRecord (create)", err)
	goldenCheckRecord(t, adm, goldenMovedLayout.Config(), "persistent", "config-moved-in.json")
	goldenMust(t, "WriteCarried", ms.WriteCarried(ctx, carried))
	goldenCheckRecord(t, adm, goldenMovedLayout.Breadcrumb(), "persistent", "breadcrumb.json")
	goldenCheckRecord(t, adm, goldenMovedLayout.History(), "persistent", "history-3.json")
	goldenCheckRecord(t, adm, goldenMovedLayout.Pause(), "persistent", "pause.json")
	_, rev, err := s.ClusterRecord(ctx)
	goldenMust(t, "ClusterRecord", err)
	_, _, err = s.WriteClusterRecord(ctx, goldenMovedAway(), rev)
	goldenMust(t, "WriteClusterRecord (moved away)", err)
	goldenCheckRecord(t, adm, l.Config(), "persistent", "config-moved-away.json")

	goldenCheckPaths(t, goldenTree(t, adm, goldenLayout.Root))
}

// testGoldenRead seeds the golden bytes raw, reads them through the API,
// and writes the values back: the bytes goldenMust not change.
func testGoldenRead(t *testing.T, zkc *zktest.Cluster, adm *zk.Session) {
	ctx := t.Context()
	l := goldenSeedLayout
	s, c := goldenStore(t, zkc, l)
	// unchanged checks that p still holds the golden file name's bytes,
	// and is of kind (session or persistent).
	unchanged := func(p, kind, name string) {
		t.Helper()
		data, k := goldenRawGet(t, adm, p)
		if !bytes.Equal(data, goldenReadGolden(t, name)) {
			t.Errorf("%s after the write-back: %s; want %s's bytes", p, data, name)
		}
		if k != kind {
			t.Errorf("%s after the write-back is %s, want %s", p, k, kind)
		}
	}

	// The cluster record: an earlier version's is given its ID; the ones
	// of a move read back and are admitted or refused by CheckJoin.
	goldenRawPut(t, adm, l.Config(), []byte(goldenLegacyRecord))
	rec, err := s.CheckJoin(ctx, "fair", "")
	goldenMust(t, "CheckJoin (legacy record)", err)
	data, _ := goldenRawGet(t, adm, l.Config())
	if want := goldenReadGolden(t, "config-created.json"); !bytes.Equal(goldenNormaliseID(t, data, rec.ID), want) {
		t.Errorf("the legacy record given its ID: %s; want %s", data, want)
	}
	for _, tc := range []struct {
		name string
		want cluster.ClusterRecord
	}{{"config-moved-in.json", goldenMovedIn()}, {"config-moved-away.json", goldenMovedAway()}} {
		goldenRawPut(t, adm, l.Config(), goldenReadGolden(t, tc.name))
		got, rev, err := s.ClusterRecord(ctx)
		goldenMust(t, "ClusterRecord", err)
		goldenWantEqual(t, "ClusterRecord of "+tc.name, got, &tc.want)
		joined, err := s.CheckJoin(ctx, "fair", goldenOldID)
		var moved *cluster.MovedError
		switch {
		case tc.want.MovedTo == "" && (err != nil || !reflect.DeepEqual(joined, tc.want)):
			t.Errorf("CheckJoin of %s = %+v, %v; want it admitted", tc.name, joined, err)
		case tc.want.MovedTo != "" && (!errors.As(err, &moved) || moved.MovedTo != goldenNewID):
			t.Errorf("CheckJoin of %s: %v; want a MovedError naming %s", tc.name, err, goldenNewID)
		}
		_, _, err = s.WriteClusterRecord(ctx, *got, rev)
		goldenMust(t, "WriteClusterRecord", err)
		unchanged(l.Config(), "persistent", tc.name)
	}

	goldenRawPut(t, adm, l.Member("a"), goldenReadGolden(t, "member.json"))
	members, err := s.Members(ctx)
	goldenMust(t, "Members", err)
	goldenWantEqual(t, "Members", members, []cluster.Member{goldenMember()})
	goldenMust(t, "PublishMember", s.PublishMember(ctx, goldenMember()))
	unchanged(l.Member("a"), "session", "member.json")

	goldenRawPut(t, adm, l.Known("a"), goldenReadGolden(t, "known.json"))
	known, err := s.KnownMembers(ctx)
	goldenMust(t, "KnownMembers", err)
	goldenWantEqual(t, "KnownMembers", known, []cluster.KnownMember{goldenKnown})
	goldenMust(t, "RememberMember", s.RememberMember(ctx, goldenKnown))
	unchanged(l.Known("a"), "persistent", "known.json")

	goldenRawPut(t, adm, l.Pause(), goldenReadGolden(t, "pause.json"))
	pause, err := s.ReadPause(ctx)
	goldenMust(t, "ReadPause", err)
	goldenWantEqual(t, "ReadPause", pause, &goldenPause)
	p, created, err := s.SetPause(ctx, cluster.Pause{By: "other", At: goldenTime(30)})
	goldenMust(t, "SetPause", err)
	if created || !reflect.DeepEqual(p, goldenPause) {
		t.Errorf("SetPause over the seeded pause = %+v, %v; want the seeded one, not created", p, created)
	}
	_, err = s.ClearPause(ctx)
	goldenMust(t, "ClearPause", err)
	_, _, err = s.SetPause(ctx, goldenPause)
	goldenMust(t, "SetPause", err)
	unchanged(l.Pause(), "persistent", "pause.json")

	goldenRawPut(t, adm, l.Breadcrumb(), goldenReadGolden(t, "breadcrumb.json"))
	goldenRawPut(t, adm, l.LeaderPosition(), goldenReadGolden(t, "leader-position.json"))
	goldenRawPut(t, adm, l.History(), goldenReadGolden(t, "history-2.json"))
	goldenRawPut(t, adm, l.Failover(), goldenReadGolden(t, "failover-proposed.json"))

	bc, _, err := s.ReadBreadcrumb(ctx)
	goldenMust(t, "ReadBreadcrumb", err)
	goldenWantEqual(t, "ReadBreadcrumb", bc, goldenBreadcrumb)
	raw, _, err := s.ReadBreadcrumbData(ctx)
	goldenMust(t, "ReadBreadcrumbData", err)
	goldenWantEqual(t, "ReadBreadcrumbData", raw, goldenReadGolden(t, "breadcrumb.json"))
	pos, err := s.ReadLeaderPosition(ctx)
	goldenMust(t, "ReadLeaderPosition", err)
	goldenWantEqual(t, "ReadLeaderPosition", pos, &goldenPosition)
	hist, err := s.History(ctx)
	goldenMust(t, "History", err)
	goldenWantEqual(t, "History", hist, goldenStored()[:2])
	req, err := s.ReadFailover(ctx)
	goldenMust(t, "ReadFailover", err)
	goldenWantEqual(t, "ReadFailover", req, &goldenProposal)
	carried, err := s.ReadCarried(ctx)
	goldenMust(t, "ReadCarried", err)
	goldenWantEqual(t, "ReadCarried", carried, cluster.Carried{Breadcrumb: goldenReadGolden(t, "breadcrumb.json"),
		History: goldenReadGolden(t, "history-2.json"), Pause: goldenReadGolden(t, "pause.json")})

	tm := goldenTerm(t, s, c)
	bc, rev, err := tm.ReadBreadcrumb(ctx)
	goldenMust(t, "Term.ReadBreadcrumb", err)
	goldenWantEqual(t, "Term.ReadBreadcrumb", bc, goldenBreadcrumb)
	_, err = tm.WriteBreadcrumb(ctx, bc, rev)
	goldenMust(t, "WriteBreadcrumb", err)
	unchanged(l.Breadcrumb(), "persistent", "breadcrumb.json")

	pos, err = tm.ReadLeaderPosition(ctx)
	goldenMust(t, "Term.ReadLeaderPosition", err)
	goldenWantEqual(t, "Term.ReadLeaderPosition", pos, &goldenPosition)
	goldenMust(t, "WriteLeaderPosition", tm.WriteLeaderPosition(ctx, *pos))
	unchanged(l.LeaderPosition(), "persistent", "leader-position.json")

	// The history read back and appended to; appending an entry already
	// there (a retry) writes nothing.
	e3 := goldenAppends()[2]
	got, err := tm.AppendHistory(ctx, e3)
	goldenMust(t, "AppendHistory", err)
	goldenWantEqual(t, "AppendHistory as stored", got, goldenStored()[2])
	unchanged(l.History(), "persistent", "history-3.json")
	got, err = tm.AppendHistory(ctx, e3)
	goldenMust(t, "AppendHistory again", err)
	goldenWantEqual(t, "AppendHistory again", got, goldenStored()[2])
	unchanged(l.History(), "persistent", "history-3.json")

	// The failover requests: each read back, written back; the seeded
	// request marked done; a done one replaced by a proposal.
	req, err = tm.ReadFailover(ctx)
	goldenMust(t, "Term.ReadFailover", err)
	goldenWantEqual(t, "Term.ReadFailover", req, &goldenProposal)
	goldenMust(t, "RequestFailover", s.RequestFailover(ctx, *req))
	unchanged(l.Failover(), "session", "failover-proposed.json")
	goldenRawPut(t, adm, l.Failover(), goldenReadGolden(t, "failover.json"))
	req, err = s.ReadFailover(ctx)
	goldenMust(t, "ReadFailover", err)
	goldenWantEqual(t, "ReadFailover", req, &goldenRequest)
	goldenMust(t, "CompleteFailover", tm.CompleteFailover(ctx, goldenDoneEpoch))
	unchanged(l.Failover(), "persistent", "failover-done.json")
	goldenRawPut(t, adm, l.Failover(), goldenReadGolden(t, "failover-done.json"))
	req, err = s.ReadFailover(ctx)
	goldenMust(t, "ReadFailover", err)
	done := goldenDone()
	goldenWantEqual(t, "ReadFailover (done)", req, &done)
	goldenMust(t, "RequestFailover", s.RequestFailover(ctx, *req))
	unchanged(l.Failover(), "session", "failover-done.json")
	goldenMust(t, "ProposeFailover over a done request", s.ProposeFailover(ctx, goldenProposal))
	unchanged(l.Failover(), "session", "failover-proposed.json")

	// The carried records, written to a place of their own as stored.
	cl := cluster.Layout{Root: l.Root, Cluster: "golden-carried"}
	cs, _ := goldenStore(t, zkc, cl)
	in := cluster.Carried{Breadcrumb: goldenReadGolden(t, "breadcrumb.json"), History: goldenReadGolden(t, "history-3.json"), Pause: goldenReadGolden(t, "pause.json")}
	goldenMust(t, "WriteCarried", cs.WriteCarried(ctx, in))
	unchanged(cl.Breadcrumb(), "persistent", "breadcrumb.json")
	unchanged(cl.History(), "persistent", "history-3.json")
	unchanged(cl.Pause(), "persistent", "pause.json")
	out, err := cs.ReadCarried(ctx)
	goldenMust(t, "ReadCarried", err)
	goldenWantEqual(t, "ReadCarried", out, in)
}
