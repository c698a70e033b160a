// Package goldentest is the golden-file test of every record failoverd
// stores, run against each backend: each record's path (a znode, a key),
// whether it is bound to the session, and its exact bytes, as written
// through the Store and a Term, and read back through them from bytes
// seeded raw. The golden files live in cluster/testdata/golden and are
// shared by the backends: all store the same bytes; only the path lists
// differ (paths-zookeeper.txt, paths-etcd.txt). The test uses only
// exported methods of Store and Term and the backend's raw access
// (Backend), so that it holds across any rewrite of a backend's internals.
// A backend's tests run it from a _test file:
//
//	func TestGoldenRecords(t *testing.T) {
//		goldentest.Run(t, newGoldenBackend(t))
//	}
//
// go test ./cluster/<backend>/ -run Golden -update rewrites the golden
// files from what that backend stores; run the other backends' without
// -update afterwards to check that they still agree.
package goldentest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/failoverd/failoverd/cluster"
)

var update = flag.Bool("update", false, "rewrite cluster/testdata/golden from what the backend holds")

// goldenDir is the golden files' directory, relative to a backend's
// package directory (cluster/<backend>), where go test runs its tests.
const goldenDir = "../testdata/golden"

// The kinds of a node in the path lists.
const (
	Session    = "session"    // bound to the session (ephemeral, under its lease)
	Persistent = "persistent" // outlives the session
	Parent     = "dir"        // no data, made for its children (ZooKeeper)
)

// Node is one node of a backend's tree: its path and kind.
type Node struct{ Path, Kind string }

// Store is what the test calls on a backend's Store.
type Store interface {
	cluster.Records
	cluster.Operator
}

// Backend is one running coordination service and raw access to it. Its
// methods fail t on an error.
type Backend interface {
	// Store is a new Store of node a (instance inst-a) in layout l, on a
	// connection of its own, closed when the test ends.
	Store(t *testing.T, l cluster.Layout) Store
	// Term campaigns for node a (fair mode) in the election of s, a Store
	// of this Backend's, and returns the term won, held until the test
	// ends.
	Term(t *testing.T, s Store) cluster.Term
	// Get reads the bytes and kind of the node at p, raw.
	Get(t *testing.T, p string) ([]byte, string)
	// Put seeds data at p raw, as a persistent node (replacing what is
	// there).
	Put(t *testing.T, p string, data []byte)
	// Tree lists every node below root, and root itself where the
	// backend has a node there, in any order.
	Tree(t *testing.T, root string) []Node
	// Format says what differs between the backends' trees.
	Format() Format
}

// Format is what differs between the backends' trees.
type Format struct {
	// PathsFile is the golden file listing the tree ("paths-etcd.txt"),
	// PathsHeader its comment lines (each ending in a newline).
	PathsFile, PathsHeader string
	// EntryName matches the path of a fair-mode election entry (its
	// random name); the path list has EntryPattern in its place.
	EntryName    *regexp.Regexp
	EntryPattern string
	// EntryRenewed is whether the leader's renewal rewrites its election
	// entry without the join nonce (ZooKeeper's election announce): then
	// either form may be there.
	EntryRenewed bool
}

// Run runs the test on b: Write (every record through the API, compared
// with the golden files and the path list) and Read (the golden bytes
// seeded raw, read through the API and written back unchanged).
func Run(t *testing.T, b Backend) {
	t.Run("Write", func(t *testing.T) { testWrite(t, b) })
	t.Run("Read", func(t *testing.T) { testRead(t, b) })
}

// --- golden files ---

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatalf("golden file: %v (run with -update to create it)", err)
	}
	return b
}

// checkGolden compares got with the golden file name (or, with -update,
// writes it).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join(goldenDir, name)
	if *update {
		if old, err := os.ReadFile(file); err == nil && !bytes.Equal(old, got) {
			t.Logf("updating %s:\n old: %s\n new: %s", name, old, got)
		}
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want := readGolden(t, name); !bytes.Equal(got, want) {
		t.Errorf("%s: the stored bytes differ from the golden file\n got: %s\nwant: %s", name, got, want)
	}
}

// checkRecord checks the node at p: its kind, and its bytes against the
// golden file name.
func checkRecord(t *testing.T, b Backend, p, kind, name string) []byte {
	t.Helper()
	data, k := b.Get(t, p)
	if k != kind {
		t.Errorf("%s is %s, want %s", p, k, kind)
	}
	checkGolden(t, name, data)
	return data
}

// checkPaths compares the tree below root with the golden path list
// (lines "<path> <kind>", sorted; an election entry's name is the
// pattern).
func checkPaths(t *testing.T, b Backend, root string) {
	t.Helper()
	f := b.Format()
	nodes := b.Tree(t, root)
	slices.SortFunc(nodes, func(x, y Node) int { return strings.Compare(x.Path, y.Path) })
	var sb strings.Builder
	sb.WriteString(f.PathsHeader)
	for _, n := range nodes {
		fmt.Fprintf(&sb, "%s %s\n", f.EntryName.ReplaceAllString(n.Path, f.EntryPattern), n.Kind)
	}
	checkGolden(t, f.PathsFile, []byte(sb.String()))
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// --- the test ---

// testWrite writes every record through the API and compares the nodes
// with the golden files and the path list.
func testWrite(t *testing.T, b Backend) {
	ctx := t.Context()
	l := goldenLayout
	s := b.Store(t, l)

	// The cluster record as CheckJoin creates it: only its ID is random.
	rec, err := s.CheckJoin(ctx, "fair", "")
	must(t, "CheckJoin", err)
	data, _ := b.Get(t, l.Config())
	checkGolden(t, "config-created.json", normaliseID(t, data, rec.ID))

	must(t, "PublishMember", s.PublishMember(ctx, goldenMember()))
	checkRecord(t, b, l.Member("a"), Session, "member.json")

	must(t, "RememberMember", s.RememberMember(ctx, goldenKnown))
	checkRecord(t, b, l.Known("a"), Persistent, "known.json")

	p, created, err := s.SetPause(ctx, goldenPause)
	must(t, "SetPause", err)
	if !created || !reflect.DeepEqual(p, goldenPause) {
		t.Errorf("SetPause = %+v, %v; want the pause, created", p, created)
	}
	checkRecord(t, b, l.Pause(), Persistent, "pause.json")

	tm := b.Term(t, s)
	_, err = tm.WriteBreadcrumb(ctx, goldenBreadcrumb, cluster.Revision{})
	must(t, "WriteBreadcrumb", err)
	checkRecord(t, b, l.Breadcrumb(), Persistent, "breadcrumb.json")

	must(t, "WriteLeaderPosition", tm.WriteLeaderPosition(ctx, goldenPosition))
	checkRecord(t, b, l.LeaderPosition(), Persistent, "leader-position.json")

	stored := goldenStored()
	for i, e := range goldenAppends() {
		got, err := tm.AppendHistory(ctx, e)
		must(t, "AppendHistory", err)
		wantEqual(t, fmt.Sprintf("AppendHistory #%d as stored", i+1), got, stored[i])
		checkRecord(t, b, l.History(), Persistent, fmt.Sprintf("history-%d.json", i+1))
	}

	must(t, "ProposeFailover", s.ProposeFailover(ctx, goldenProposal))
	checkRecord(t, b, l.Failover(), Session, "failover-proposed.json")
	must(t, "RequestFailover", s.RequestFailover(ctx, goldenRequest))
	checkRecord(t, b, l.Failover(), Session, "failover.json")
	must(t, "CompleteFailover", tm.CompleteFailover(ctx, goldenDoneEpoch))
	checkRecord(t, b, l.Failover(), Session, "failover-done.json")

	// The election entry: written by the backend's elector, not by a
	// Store, in the format {"node_id","guid","join"} (the same on every
	// backend). Where the leader's renewal rewrites the data without the
	// join nonce (Format.EntryRenewed), either form may be there now.
	f := b.Format()
	var entries []Node
	for _, n := range b.Tree(t, l.ElectionDir()) {
		if n.Path != l.ElectionDir() {
			entries = append(entries, n)
		}
	}
	if len(entries) != 1 || !f.EntryName.MatchString(entries[0].Path) {
		t.Fatalf("election entries %v; want one %s", entries, strings.TrimPrefix(f.EntryPattern, "/"))
	}
	data, kind := b.Get(t, entries[0].Path)
	if kind != Session {
		t.Errorf("the election entry is %s, want session", kind)
	}
	data = normaliseCandidate(data)
	if !f.EntryRenewed || bytes.Contains(data, []byte(`"join"`)) {
		checkGolden(t, "election.json", data)
	} else if want := bytes.Replace(readGolden(t, "election.json"), []byte(`,"join":"JOIN"`), nil, 1); !bytes.Equal(data, want) {
		t.Errorf("the renewed election entry is %s, want %s", data, want)
	}

	// A move: the new place gets its record and the carried records, the
	// old one is marked moved.
	carried, err := s.ReadCarried(ctx)
	must(t, "ReadCarried", err)
	wantEqual(t, "ReadCarried", carried, cluster.Carried{Breadcrumb: readGolden(t, "breadcrumb.json"),
		History: readGolden(t, "history-3.json"), Pause: readGolden(t, "pause.json")})
	ms := b.Store(t, goldenMovedLayout)
	_, _, err = ms.WriteClusterRecord(ctx, goldenMovedIn(), cluster.Revision{})
	must(t, "WriteClusterRecord (create)", err)
	checkRecord(t, b, goldenMovedLayout.Config(), Persistent, "config-moved-in.json")
	must(t, "WriteCarried", ms.WriteCarried(ctx, carried))
	checkRecord(t, b, goldenMovedLayout.Breadcrumb(), Persistent, "breadcrumb.json")
	checkRecord(t, b, goldenMovedLayout.History(), Persistent, "history-3.json")
	checkRecord(t, b, goldenMovedLayout.Pause(), Persistent, "pause.json")
	_, rev, err := s.ClusterRecord(ctx)
	must(t, "ClusterRecord", err)
	_, _, err = s.WriteClusterRecord(ctx, goldenMovedAway(), rev)
	must(t, "WriteClusterRecord (moved away)", err)
	checkRecord(t, b, l.Config(), Persistent, "config-moved-away.json")

	checkPaths(t, b, goldenLayout.Root)
}

// testRead seeds the golden bytes raw, reads them through the API, and
// writes the values back: the bytes must not change.
func testRead(t *testing.T, b Backend) {
	ctx := t.Context()
	l := goldenSeedLayout
	s := b.Store(t, l)
	// unchanged checks that p still holds the golden file name's bytes,
	// and is of kind (session or persistent).
	unchanged := func(p, kind, name string) {
		t.Helper()
		data, k := b.Get(t, p)
		if !bytes.Equal(data, readGolden(t, name)) {
			t.Errorf("%s after the write-back: %s; want %s's bytes", p, data, name)
		}
		if k != kind {
			t.Errorf("%s after the write-back is %s, want %s", p, k, kind)
		}
	}

	// The cluster record: an earlier version's is given its ID; the ones
	// of a move read back and are admitted or refused by CheckJoin.
	b.Put(t, l.Config(), []byte(goldenLegacyRecord))
	rec, err := s.CheckJoin(ctx, "fair", "")
	must(t, "CheckJoin (legacy record)", err)
	data, _ := b.Get(t, l.Config())
	if want := readGolden(t, "config-created.json"); !bytes.Equal(normaliseID(t, data, rec.ID), want) {
		t.Errorf("the legacy record given its ID: %s; want %s", data, want)
	}
	for _, tc := range []struct {
		name string
		want cluster.ClusterRecord
	}{{"config-moved-in.json", goldenMovedIn()}, {"config-moved-away.json", goldenMovedAway()}} {
		b.Put(t, l.Config(), readGolden(t, tc.name))
		got, rev, err := s.ClusterRecord(ctx)
		must(t, "ClusterRecord", err)
		wantEqual(t, "ClusterRecord of "+tc.name, got, &tc.want)
		joined, err := s.CheckJoin(ctx, "fair", goldenOldID)
		var moved *cluster.MovedError
		switch {
		case tc.want.MovedTo == "" && (err != nil || !reflect.DeepEqual(joined, tc.want)):
			t.Errorf("CheckJoin of %s = %+v, %v; want it admitted", tc.name, joined, err)
		case tc.want.MovedTo != "" && (!errors.As(err, &moved) || moved.MovedTo != goldenNewID):
			t.Errorf("CheckJoin of %s: %v; want a MovedError naming %s", tc.name, err, goldenNewID)
		}
		_, _, err = s.WriteClusterRecord(ctx, *got, rev)
		must(t, "WriteClusterRecord", err)
		unchanged(l.Config(), Persistent, tc.name)
	}

	b.Put(t, l.Member("a"), readGolden(t, "member.json"))
	members, err := s.Members(ctx)
	must(t, "Members", err)
	wantEqual(t, "Members", members, []cluster.Member{goldenMember()})
	must(t, "PublishMember", s.PublishMember(ctx, goldenMember()))
	unchanged(l.Member("a"), Session, "member.json")

	b.Put(t, l.Known("a"), readGolden(t, "known.json"))
	known, err := s.KnownMembers(ctx)
	must(t, "KnownMembers", err)
	wantEqual(t, "KnownMembers", known, []cluster.KnownMember{goldenKnown})
	must(t, "RememberMember", s.RememberMember(ctx, goldenKnown))
	unchanged(l.Known("a"), Persistent, "known.json")

	b.Put(t, l.Pause(), readGolden(t, "pause.json"))
	pause, err := s.ReadPause(ctx)
	must(t, "ReadPause", err)
	wantEqual(t, "ReadPause", pause, &goldenPause)
	p, created, err := s.SetPause(ctx, cluster.Pause{By: "other", At: goldenTime(30)})
	must(t, "SetPause", err)
	if created || !reflect.DeepEqual(p, goldenPause) {
		t.Errorf("SetPause over the seeded pause = %+v, %v; want the seeded one, not created", p, created)
	}
	_, err = s.ClearPause(ctx)
	must(t, "ClearPause", err)
	_, _, err = s.SetPause(ctx, goldenPause)
	must(t, "SetPause", err)
	unchanged(l.Pause(), Persistent, "pause.json")

	b.Put(t, l.Breadcrumb(), readGolden(t, "breadcrumb.json"))
	b.Put(t, l.LeaderPosition(), readGolden(t, "leader-position.json"))
	b.Put(t, l.History(), readGolden(t, "history-2.json"))
	b.Put(t, l.Failover(), readGolden(t, "failover-proposed.json"))

	bc, _, err := s.ReadBreadcrumb(ctx)
	must(t, "ReadBreadcrumb", err)
	wantEqual(t, "ReadBreadcrumb", bc, goldenBreadcrumb)
	raw, _, err := s.ReadBreadcrumbData(ctx)
	must(t, "ReadBreadcrumbData", err)
	wantEqual(t, "ReadBreadcrumbData", raw, readGolden(t, "breadcrumb.json"))
	pos, err := s.ReadLeaderPosition(ctx)
	must(t, "ReadLeaderPosition", err)
	wantEqual(t, "ReadLeaderPosition", pos, &goldenPosition)
	hist, err := s.History(ctx)
	must(t, "History", err)
	wantEqual(t, "History", hist, goldenStored()[:2])
	req, err := s.ReadFailover(ctx)
	must(t, "ReadFailover", err)
	wantEqual(t, "ReadFailover", req, &goldenProposal)
	carried, err := s.ReadCarried(ctx)
	must(t, "ReadCarried", err)
	wantEqual(t, "ReadCarried", carried, cluster.Carried{Breadcrumb: readGolden(t, "breadcrumb.json"),
		History: readGolden(t, "history-2.json"), Pause: readGolden(t, "pause.json")})

	tm := b.Term(t, s)
	bc, rev, err := tm.ReadBreadcrumb(ctx)
	must(t, "Term.ReadBreadcrumb", err)
	wantEqual(t, "Term.ReadBreadcrumb", bc, goldenBreadcrumb)
	_, err = tm.WriteBreadcrumb(ctx, bc, rev)
	must(t, "WriteBreadcrumb", err)
	unchanged(l.Breadcrumb(), Persistent, "breadcrumb.json")

	pos, err = tm.ReadLeaderPosition(ctx)
	must(t, "Term.ReadLeaderPosition", err)
	wantEqual(t, "Term.ReadLeaderPosition", pos, &goldenPosition)
	must(t, "WriteLeaderPosition", tm.WriteLeaderPosition(ctx, *pos))
	unchanged(l.LeaderPosition(), Persistent, "leader-position.json")

	// The history read back and appended to; appending an entry already
	// there (a retry) writes nothing.
	e3 := goldenAppends()[2]
	got, err := tm.AppendHistory(ctx, e3)
	must(t, "AppendHistory", err)
	wantEqual(t, "AppendHistory as stored", got, goldenStored()[2])
	unchanged(l.History(), Persistent, "history-3.json")
	got, err = tm.AppendHistory(ctx, e3)
	must(t, "AppendHistory again", err)
	wantEqual(t, "AppendHistory again", got, goldenStored()[2])
	unchanged(l.History(), Persistent, "history-3.json")

	// The failover requests: each read back, written back; the seeded
	// request marked done; a done one replaced by a proposal.
	req, err = tm.ReadFailover(ctx)
	must(t, "Term.ReadFailover", err)
	wantEqual(t, "Term.ReadFailover", req, &goldenProposal)
	must(t, "RequestFailover", s.RequestFailover(ctx, *req))
	unchanged(l.Failover(), Session, "failover-proposed.json")
	b.Put(t, l.Failover(), readGolden(t, "failover.json"))
	req, err = s.ReadFailover(ctx)
	must(t, "ReadFailover", err)
	wantEqual(t, "ReadFailover", req, &goldenRequest)
	must(t, "CompleteFailover", tm.CompleteFailover(ctx, goldenDoneEpoch))
	unchanged(l.Failover(), Persistent, "failover-done.json")
	b.Put(t, l.Failover(), readGolden(t, "failover-done.json"))
	req, err = s.ReadFailover(ctx)
	must(t, "ReadFailover", err)
	done := goldenDone()
	wantEqual(t, "ReadFailover (done)", req, &done)
	must(t, "RequestFailover", s.RequestFailover(ctx, *req))
	unchanged(l.Failover(), Session, "failover-done.json")
	must(t, "ProposeFailover over a done request", s.ProposeFailover(ctx, goldenProposal))
	unchanged(l.Failover(), Session, "failover-proposed.json")

	// The carried records, written to a place of their own as stored.
	cl := cluster.Layout{Root: l.Root, Cluster: "golden-carried"}
	cs := b.Store(t, cl)
	in := cluster.Carried{Breadcrumb: readGolden(t, "breadcrumb.json"), History: readGolden(t, "history-3.json"), Pause: readGolden(t, "pause.json")}
	must(t, "WriteCarried", cs.WriteCarried(ctx, in))
	unchanged(cl.Breadcrumb(), Persistent, "breadcrumb.json")
	unchanged(cl.History(), Persistent, "history-3.json")
	unchanged(cl.Pause(), Persistent, "pause.json")
	out, err := cs.ReadCarried(ctx)
	must(t, "ReadCarried", err)
	wantEqual(t, "ReadCarried", out, in)
}
