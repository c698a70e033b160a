package etcdcluster

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/etcdtest"
)

// The golden-file test of every record failoverd stores in etcd: each
// record's key, whether it is bound to the session's lease, and its exact
// bytes, as written through the Store and a Term, and read back through
// them from bytes seeded raw. The golden files live in
// cluster/testdata/golden and are shared with zkcluster's
// TestGoldenRecords: both backends store the same bytes; only the key
// lists differ (paths-etcd.txt, paths-zookeeper.txt). The test uses only
// exported methods of Store and Term and the raw etcd client, so that it
// holds across any rewrite of the backend's internals.
//
// go test ./cluster/etcdcluster/ -run Golden -update rewrites the golden
// files from what this backend stores; run zkcluster's without -update
// afterwards to check that both backends still agree.

var updateGolden = flag.Bool("update", false, "rewrite cluster/testdata/golden from what etcd holds")

const goldenDir = "../testdata/golden"

// The layouts of the test: records written through the API (golden), the
// place a move copies them to (goldenMovedLayout), and records seeded raw
// (goldenSeedLayout, under another root so that the keys of the first two
// are compared alone).
var (
	goldenLayout      = cluster.Layout{Root: "/failoverd", Cluster: "golden"}
	goldenMovedLayout = cluster.Layout{Root: "/failoverd", Cluster: "golden-moved"}
	goldenSeedLayout  = cluster.Layout{Root: "/seeded", Cluster: "golden"}
)

// --- the fixed inputs (the same in zkcluster's golden_test.go) ---

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

// --- raw etcd ---

// goldenRawNode is one key as the key list names it.
type goldenRawNode struct{ path, kind string }

// goldenKind of a key: "session" (bound to a lease) or "persistent".
func goldenKind(lease int64) string {
	if lease != 0 {
		return "session"
	}
	return "persistent"
}

// goldenRawGet reads key's bytes and kind with the raw client.
func goldenRawGet(t *testing.T, cli *clientv3.Client, key string) ([]byte, string) {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("raw read of %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("raw read of %s: no such key", key)
	}
	return resp.Kvs[0].Value, goldenKind(resp.Kvs[0].Lease)
}

// goldenCheckRecord checks the key: its kind, and its bytes against the
// golden file name.
func goldenCheckRecord(t *testing.T, cli *clientv3.Client, key, kind, name string) []byte {
	t.Helper()
	data, k := goldenRawGet(t, cli, key)
	if k != kind {
		t.Errorf("%s is %s, want %s", key, k, kind)
	}
	goldenCheckGolden(t, name, data)
	return data
}

// goldenRawPut seeds data at key, without a lease.
func goldenRawPut(t *testing.T, cli *clientv3.Client, key string, data []byte) {
	t.Helper()
	if _, err := cli.Put(t.Context(), key, string(data)); err != nil {
		t.Fatalf("seeding %s: %v", key, err)
	}
}

// goldenTree lists every key under root, sorted.
func goldenTree(t *testing.T, cli *clientv3.Client, root string) []goldenRawNode {
	t.Helper()
	resp, err := cli.Get(t.Context(), root+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []goldenRawNode
	for _, k := range resp.Kvs {
		out = append(out, goldenRawNode{string(k.Key), goldenKind(k.Lease)})
	}
	return out
}

// goldenElectionName matches a fair-mode election key's name: c_<lease id in hex>.
var goldenElectionName = regexp.MustCompile(`/c_[0-9a-f]+$`)

const goldenElectionPattern = "/c_{lease}"

// goldenCheckPaths compares the keys with the golden key list (lines "<key>
// <kind>"; an election entry's name is the pattern c_{lease}).
func goldenCheckPaths(t *testing.T, nodes []goldenRawNode) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# Every key failoverd's records make in etcd (etcdcluster's TestGoldenRecords):\n" +
		"# key, and session (bound to the session's lease) or persistent.\n")
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s %s\n", goldenElectionName.ReplaceAllString(n.path, goldenElectionPattern), n.kind)
	}
	goldenCheckGolden(t, "paths-etcd.txt", []byte(b.String()))
}

// --- the test ---

// goldenStore is a Store of node a (instance inst-a) in layout l, on a
// client and Conn of its own.
func goldenStore(t *testing.T, c *etcdtest.Cluster, l cluster.Layout) *Store {
	t.Helper()
	return newNode(t, c.Endpoints(), l, "a").s
}

// goldenTerm campaigns for node a (fair mode) in s's layout and returns
// the term won, held until the test ends.
func goldenTerm(t *testing.T, s *Store) cluster.Term {
	t.Helper()
	el, err := s.Elector(ElectorConfig{NodeID: "a", Mode: Fair, DemoteBudget: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	won := make(chan cluster.Term, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		el.Campaign(ctx, func(ctx context.Context, tm cluster.Term) {
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
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	adm := admin(t, c)
	t.Run("Write", func(t *testing.T) { testGoldenWrite(t, c, adm) })
	t.Run("Read", func(t *testing.T) { testGoldenRead(t, c, adm) })
}

// testGoldenWrite writes every record through the API and compares the
// keys with the golden files and the key list.
func testGoldenWrite(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	ctx := t.Context()
	l := goldenLayout
	s := goldenStore(t, c, l)

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

	tm := goldenTerm(t, s)
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

	// The election entry: written by the Elector, not by a Store, in the
	// format {"node_id","guid","join"} (the same as ZooKeeper's), never
	// rewritten while the key lives.
	resp, err := adm.Get(ctx, l.ElectionDir()+"/", clientv3.WithPrefix())
	goldenMust(t, "listing the election", err)
	if len(resp.Kvs) != 1 || !goldenElectionName.MatchString(string(resp.Kvs[0].Key)) {
		t.Fatalf("election entries %v; want one c_<lease>", resp.Kvs)
	}
	if kind := goldenKind(resp.Kvs[0].Lease); kind != "session" {
		t.Errorf("the election entry is %s, want session", kind)
	}
	goldenCheckGolden(t, "election.json", goldenNormaliseCandidate(resp.Kvs[0].Value))

	// A move: the new place gets its record and the carried records, the
	// old one is marked moved.
	carried, err := s.ReadCarried(ctx)
	goldenMust(t, "ReadCarried", err)
	goldenWantEqual(t, "ReadCarried", carried, cluster.Carried{Breadcrumb: goldenReadGolden(t, "breadcrumb.json"),
		History: goldenReadGolden(t, "history-3.json"), Pause: goldenReadGolden(t, "pause.json")})
	ms := goldenStore(t, c, goldenMovedLayout)
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
func testGoldenRead(t *testing.T, c *etcdtest.Cluster, adm *clientv3.Client) {
	ctx := t.Context()
	l := goldenSeedLayout
	s := goldenStore(t, c, l)
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

	tm := goldenTerm(t, s)
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
	cs := goldenStore(t, c, cl)
	in := cluster.Carried{Breadcrumb: goldenReadGolden(t, "breadcrumb.json"), History: goldenReadGolden(t, "history-3.json"), Pause: goldenReadGolden(t, "pause.json")}
	goldenMust(t, "WriteCarried", cs.WriteCarried(ctx, in))
	unchanged(cl.Breadcrumb(), "persistent", "breadcrumb.json")
	unchanged(cl.History(), "persistent", "history-3.json")
	unchanged(cl.Pause(), "persistent", "pause.json")
	out, err := cs.ReadCarried(ctx)
	goldenMust(t, "ReadCarried", err)
	goldenWantEqual(t, "ReadCarried", out, in)
}
