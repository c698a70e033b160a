package controller

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/failoverd/failoverd/cluster"
)

// The /v1/status body and the member record of fixedStatus as the code
// encoded them before Status was built from cluster.Member: nodes and
// tools of earlier versions read both, so neither may change by a byte.
// The two order some fields differently; zk_connected differs because
// the record always mirrors connected.
const (
	goldenStatus         = `{"cluster":"orders","node_id":"db-1","host":"10.0.0.1","admin_url":"https://10.0.0.1:8008","state":"leader","role":"leader","health":"healthy","epoch":17,"since":"2024-05-06T07:08:09.123456789Z","connected":true,"zk_connected":false,"lease_remaining_seconds":2.5,"last_error":"a \u003cb\u003e \u0026 c\u2028","version":"1.2.3","instance":"i-abc","service_address":"10.0.0.1:5432","priority":3,"following":"db-2","following_epoch":16,"following_since":"2024-05-06T07:08:10.123456789Z","paused":{"by":"ops","reason":"upgrade","at":"2024-05-06T07:08:11.123456789Z"},"cooldown_until":"2024-05-06T07:08:12.123456789Z","position":4242,"position_at":"2024-05-06T07:08:13.123456789Z","not_following":"stalled: x","config_hash":"abcdef","config_loaded_at":"2024-05-06T07:08:14.123456789Z","not_leading":"paused: y","holds":"db-3 until 2024-05-06T07:08:09Z: failed"}`
	goldenStatusNoEscape = `{"cluster":"orders","node_id":"db-1","host":"10.0.0.1","admin_url":"https://10.0.0.1:8008","state":"leader","role":"leader","health":"healthy","epoch":17,"since":"2024-05-06T07:08:09.123456789Z","connected":true,"zk_connected":false,"lease_remaining_seconds":2.5,"last_error":"a <b> & c\u2028","version":"1.2.3","instance":"i-abc","service_address":"10.0.0.1:5432","priority":3,"following":"db-2","following_epoch":16,"following_since":"2024-05-06T07:08:10.123456789Z","paused":{"by":"ops","reason":"upgrade","at":"2024-05-06T07:08:11.123456789Z"},"cooldown_until":"2024-05-06T07:08:12.123456789Z","position":4242,"position_at":"2024-05-06T07:08:13.123456789Z","not_following":"stalled: x","config_hash":"abcdef","config_loaded_at":"2024-05-06T07:08:14.123456789Z","not_leading":"paused: y","holds":"db-3 until 2024-05-06T07:08:09Z: failed"}` + "\n"
	goldenMember         = `{"cluster":"orders","node_id":"db-1","host":"10.0.0.1","admin_url":"https://10.0.0.1:8008","state":"leader","role":"leader","health":"healthy","epoch":17,"since":"2024-05-06T07:08:09.123456789Z","connected":true,"zk_connected":true,"lease_remaining_seconds":2.5,"last_error":"a \u003cb\u003e \u0026 c\u2028","version":"1.2.3","instance":"i-abc","service_address":"10.0.0.1:5432","following":"db-2","following_epoch":16,"following_since":"2024-05-06T07:08:10.123456789Z","priority":3,"position":4242,"position_at":"2024-05-06T07:08:13.123456789Z","not_following":"stalled: x","not_leading":"paused: y","holds":"db-3 until 2024-05-06T07:08:09Z: failed","paused":{"by":"ops","reason":"upgrade","at":"2024-05-06T07:08:11.123456789Z"},"cooldown_until":"2024-05-06T07:08:12.123456789Z","config_hash":"abcdef","config_loaded_at":"2024-05-06T07:08:14.123456789Z"}`
	goldenZero           = `{"cluster":"","node_id":"","host":"","state":"","role":"","health":"","since":"0001-01-01T00:00:00Z","connected":false,"zk_connected":false,"version":"","priority":0}`
)

func fixedStatus() Status {
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	pos := int64(4242)
	return Status{State: StateLeader, Priority: 3, Member: cluster.Member{
		Cluster: "orders", NodeID: "db-1", Host: "10.0.0.1", AdminURL: "https://10.0.0.1:8008",
		Role: "leader", Health: "healthy", Epoch: 17, Since: at,
		Connected: true, ZKConnected: false, LeaseRemaining: 2.5, LastError: "a <b> & c\u2028",
		Version: "1.2.3", Instance: "i-abc", ServiceAddress: "10.0.0.1:5432",
		Following: "db-2", FollowingEpoch: 16, FollowingSince: at.Add(time.Second),
		Paused:        &cluster.Pause{By: "ops", Reason: "upgrade", At: at.Add(2 * time.Second)},
		CooldownUntil: at.Add(3 * time.Second), Position: &pos, PositionAt: at.Add(4 * time.Second),
		NotFollowing: "stalled: x", ConfigHash: "abcdef", ConfigLoadedAt: at.Add(5 * time.Second),
		NotLeading: "paused: y", Holds: "db-3 until 2024-05-06T07:08:09Z: failed",
	}}
}

func TestStatusEncodingUnchanged(t *testing.T) {
	for _, c := range []struct {
		what string
		v    any
		want string
	}{
		{"status", fixedStatus(), goldenStatus},
		{"*status", new(fixedStatus()), goldenStatus},
		{"member record", memberOf(fixedStatus()), goldenMember},
		{"zero status", Status{}, goldenZero},
		{"zero member record", memberOf(Status{}), goldenZero},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if string(b) != c.want {
			t.Errorf("%s encodes as\n%s\nwant\n%s", c.what, b, c.want)
		}
	}
	// The admin API's encoder, and one that leaves HTML alone.
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(fixedStatus()); err != nil || buf.String() != goldenStatus+"\n" {
		t.Errorf("an Encoder writes %q (%v), want %q", buf.String(), err, goldenStatus+"\n")
	}
	buf.Reset()
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fixedStatus()); err != nil || buf.String() != goldenStatusNoEscape {
		t.Errorf("an Encoder without HTML escapes writes %q (%v), want %q", buf.String(), err, goldenStatusNoEscape)
	}
	// Readers of the body decode it as before.
	var got Status
	if err := json.Unmarshal([]byte(goldenStatus), &got); err != nil || !reflect.DeepEqual(got, fixedStatus()) {
		t.Errorf("the body decodes as %+v (%v), want %+v", got, err, fixedStatus())
	}
}

// TestStatusCarriesEveryMemberField sets every field of cluster.Member and
// checks that a Status carries each one through its body and back into the
// record it publishes: a field added to Member needs nothing in
// controller.
func TestStatusCarriesEveryMemberField(t *testing.T) {
	var m cluster.Member
	fill(t, reflect.ValueOf(&m).Elem(), "Member")
	s := Status{Member: m, State: State(m.State), Priority: *m.Priority}
	s.Member.State, s.Member.Priority = "", nil
	s.ZKConnected = s.Connected // memberOf mirrors it

	body, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	record, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	bodyKeys, recordKeys := keysOf(t, body), keysOf(t, record)
	if !slices.Equal(slices.Sorted(maps.Keys(bodyKeys)), slices.Sorted(maps.Keys(recordKeys))) {
		t.Errorf("the body's fields %v, the record's %v", slices.Sorted(maps.Keys(bodyKeys)), slices.Sorted(maps.Keys(recordKeys)))
	}
	for _, k := range statusOrder {
		if _, ok := recordKeys[k]; !ok {
			t.Errorf("statusOrder lists %q, no field of cluster.Member", k)
		}
	}
	var back Status
	if err := json.Unmarshal(body, &back); err != nil {
		t.Fatal(err)
	}
	if again, err := json.Marshal(memberOf(back)); err != nil || string(again) != string(record) {
		t.Errorf("the record of the decoded body is\n%s (%v)\nwant\n%s", again, err, record)
	}
	if got, err := json.Marshal(memberOf(s)); err != nil || string(got) != string(record) {
		t.Errorf("memberOf gives\n%s (%v)\nwant\n%s", got, err, record)
	}
	// Member's methods read the record's State and Priority, Status's own.
	for _, p := range []int{0, 1} {
		if s := (Status{Priority: p}); s.MayLead() != (p > 0) {
			t.Errorf("priority %d: MayLead %v", p, s.MayLead())
		}
	}
}

// fill sets every field of v to a value of its type other than zero.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString("x-" + path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(len(path)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(len(path)) + 0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), path)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2024, 1, 2, 3, 4, 5, len(path), time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), path+"[0]")
	default:
		t.Fatalf("%s: a %s; teach fill to set one", path, v.Type())
	}
}

func keysOf(t *testing.T, obj []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatalf("%s: %v", obj, err)
	}
	return m
}
