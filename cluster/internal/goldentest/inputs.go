package goldentest

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

// The layouts of the test: records written through the API (golden), the
// place a move copies them to (goldenMovedLayout), and records seeded raw
// (goldenSeedLayout, under another root so that the tree of the first two
// is compared alone).
var (
	goldenLayout      = cluster.Layout{Root: "/failoverd", Cluster: "golden"}
	goldenMovedLayout = cluster.Layout{Root: "/failoverd", Cluster: "golden-moved"}
	goldenSeedLayout  = cluster.Layout{Root: "/seeded", Cluster: "golden"}
)

// --- the fixed inputs ---

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

// normaliseID replaces the random record id in data (exactly once) with
// goldenIDPlaceholder.
func normaliseID(t *testing.T, data []byte, id string) []byte {
	t.Helper()
	if len(id) != 32 || bytes.Count(data, []byte(`"`+id+`"`)) != 1 {
		t.Fatalf("record id %q not found once in %s", id, data)
	}
	return bytes.Replace(data, []byte(id), []byte(goldenIDPlaceholder), 1)
}

// normaliseCandidate replaces the random parts of an election entry's
// data, the elector's GUID and its join nonce, with GUID and JOIN.
func normaliseCandidate(data []byte) []byte {
	data = regexp.MustCompile(`"guid":"[0-9a-f]{32}"`).ReplaceAll(data, []byte(`"guid":"GUID"`))
	return regexp.MustCompile(`"join":"[0-9a-f]{16}"`).ReplaceAll(data, []byte(`"join":"JOIN"`))
}
