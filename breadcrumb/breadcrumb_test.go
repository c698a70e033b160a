package breadcrumb_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/failoverd/failoverd/breadcrumb"
	"github.com/failoverd/failoverd/cluster"
)

const dir = "/failoverd/orders"

var path = cluster.Layout{Root: "/failoverd", Cluster: "orders"}.Breadcrumb()

// TestDecodeValidatesFields checks that every field of a record follows
// the config's rule for it, so that a reader never hands a hook or fencer a
// value it cannot start with.
func TestDecodeValidatesFields(t *testing.T) {
	const since = `"since":"2026-01-02T03:04:05Z"`
	good := `{"version":1,"node_id":"node-a","host":"db1.example.com","admin_url":"http://10.0.0.1:9101",` + since + `,"epoch":7}`
	if r, err := breadcrumb.Decode([]byte(good)); err != nil || r.NodeID != "node-a" || r.Epoch != 7 || r.Instance != "" {
		t.Fatalf("Decode(good) = %+v, %v", r, err)
	}
	withInstance := strings.Replace(good, `"epoch":7`, `"epoch":7,"instance":"9f3a0c1d2e4b5a67"`, 1)
	if r, err := breadcrumb.Decode([]byte(withInstance)); err != nil || r.Instance != "9f3a0c1d2e4b5a67" {
		t.Fatalf("Decode(with instance) = %+v, %v", r, err)
	}
	withAddress := strings.Replace(good, `"epoch":7`, `"epoch":7,"service_address":"db1.example.com:6379"`, 1)
	if r, err := breadcrumb.Decode([]byte(withAddress)); err != nil || r.ServiceAddress != "db1.example.com:6379" {
		t.Fatalf("Decode(with service address) = %+v, %v", r, err)
	}
	// Written only when configured: a record without one reads the same in
	// earlier versions, which decode strictly.
	if b, _ := breadcrumb.Encode(rec("a", 1)); strings.Contains(string(b), "service_address") {
		t.Errorf("Encode wrote an empty service_address: %s", b)
	}
	for _, tc := range []struct{ name, data, reason string }{
		{"NUL in node_id", `{"version":1,"node_id":"a\u0000","host":"h","epoch":1}`, `node_id "a\x00" is not a valid node id`},
		{"newline in node_id", `{"version":1,"node_id":"a\nb","host":"h","epoch":1}`, "is not a valid node id"},
		{"slash in node_id", `{"version":1,"node_id":"../x","host":"h","epoch":1}`, "is not a valid node id"},
		{"space in node_id", `{"version":1,"node_id":"a b","host":"h","epoch":1}`, "is not a valid node id"},
		{"dot-dot node_id", `{"version":1,"node_id":"..","host":"h","epoch":1}`, "is not a valid node id"},
		{"no host", `{"version":1,"node_id":"a","epoch":1}`, "host is empty"},
		{"NUL in host", `{"version":1,"node_id":"a","host":"h\u0000","epoch":1}`, "is not a host name or IP address"},
		{"shell in host", `{"version":1,"node_id":"a","host":"db1; touch /tmp/x","epoch":1}`, "is not a host name or IP address"},
		{"CR in host", `{"version":1,"node_id":"a","host":"h\r","epoch":1}`, "is not a host name or IP address"},
		{"admin_url not http", `{"version":1,"node_id":"a","host":"h","admin_url":"file:///etc/passwd","epoch":1}`, "not an http or https URL"},
		{"admin_url without host", `{"version":1,"node_id":"a","host":"h","admin_url":"http:///x","epoch":1}`, "not an http or https URL"},
		{"NUL in admin_url", `{"version":1,"node_id":"a","host":"h","admin_url":"http://h/\u0000","epoch":1}`, "control characters"},
		{"C1 control in admin_url", `{"version":1,"node_id":"a","host":"h","admin_url":"http://h/\u0085","epoch":1}`, "control characters"},
		{"epoch 0", `{"version":1,"node_id":"a","host":"h","epoch":0}`, "epoch 0 is not positive"},
		{"negative epoch", `{"version":1,"node_id":"a","host":"h","epoch":-3}`, "epoch -3 is not positive"},
		{"NUL in instance", `{"version":1,"node_id":"a","host":"h","epoch":1,"instance":"ab\u0000"}`, "is not a valid instance id"},
		{"service_address without port", `{"version":1,"node_id":"a","host":"h","epoch":1,"service_address":"h"}`, "service_address \"h\": not host:port"},
		{"service_address port 0", `{"version":1,"node_id":"a","host":"h","epoch":1,"service_address":"h:0"}`, "port must be a number"},
		{"newline in service_address", `{"version":1,"node_id":"a","host":"h","epoch":1,"service_address":"h:1\n"}`, "control characters"},
		{"space in instance", `{"version":1,"node_id":"a","host":"h","epoch":1,"instance":"a b"}`, "is not a valid instance id"},
	} {
		_, err := breadcrumb.Decode([]byte(tc.data))
		var ce *breadcrumb.CorruptError
		if !errors.As(err, &ce) || !strings.Contains(ce.Reason, tc.reason) {
			t.Errorf("%s: Decode = %v, want a *CorruptError with reason containing %q", tc.name, err, tc.reason)
			continue
		}
		if !strings.Contains(err.Error(), "failoverd breadcrumb clear") {
			t.Errorf("%s: error %q does not say how to recover", tc.name, err)
		}
		if strings.ContainsRune(err.Error(), 0) {
			t.Errorf("%s: error message carries a raw NUL: %q", tc.name, err)
		}
		if v := breadcrumb.Assess(breadcrumb.Record{}, err, "b", 9); v != breadcrumb.Refuse {
			t.Errorf("%s: Assess = %v, want refuse", tc.name, v)
		}
	}
	// A leader cannot write what its successors would refuse.
	if _, err := breadcrumb.Encode(rec("a\x00", 1)); err == nil {
		t.Error("Encode accepted a node id with a NUL")
	}
}

// envSafe reports why s cannot go into an environment variable or argv
// element of a program, or "" if it can.
func envSafe(s string) string {
	if _, err := syscall.ByteSliceFromString("FAILOVERD_PREVIOUS_LEADER=" + s); err != nil {
		return err.Error()
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) || r == utf8.RuneError }) {
		return "control character, white space or invalid UTF-8"
	}
	return ""
}

func FuzzBreadcrumb(f *testing.F) {
	good, _ := breadcrumb.Encode(rec("a", 5))
	for _, s := range []string{string(good), "", "{}", "null",
		`{"version":1,"node_id":"a\u0000","host":"h","epoch":1}`, `{"version":1,"node_id":"a","host":"h","admin_url":"http://h:1/\u0085","epoch":1}`, `{"version":1}`, `{"version":1,"node_id":"a","epoch":1,"x":1}`, `{"version":99}`, "[1,2]", `{"version":1,"node_id":"a","epoch":1}{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := breadcrumb.Decode(b)
		if err != nil {
			var ce *breadcrumb.CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Decode error %T is not *CorruptError", err)
			}
			return
		}
		// Whatever decodes is safe to hand to hooks and fencers.
		for name, v := range map[string]string{"node_id": r.NodeID, "host": r.Host, "admin_url": r.AdminURL, "instance": r.Instance, "service_address": r.ServiceAddress} {
			if why := envSafe(v); why != "" {
				t.Fatalf("Decode accepted %s %q, which cannot go into an environment variable or argv: %s", name, v, why)
			}
		}
		if r.NodeID == "" || r.Host == "" || r.Epoch <= 0 {
			t.Fatalf("Decode accepted an incomplete record %+v", r)
		}
		// Whatever decodes must round-trip.
		enc, err := breadcrumb.Encode(r)
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		r2, err := breadcrumb.Decode(enc)
		if err != nil || r2.NodeID != r.NodeID || r2.Epoch != r.Epoch || !r2.Since.Equal(r.Since) {
			t.Fatalf("round trip: %+v -> %+v, %v", r, r2, err)
		}
	})
}

func rec(id string, epoch int64) breadcrumb.Record {
	return breadcrumb.Record{NodeID: id, Host: "127.0.0.1", AdminURL: "http://127.0.0.1:9101", Epoch: epoch, Since: time.Now().UTC().Truncate(time.Second)}
}
