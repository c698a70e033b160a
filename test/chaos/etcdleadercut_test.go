package chaos

import (
	"strings"
	"testing"
)

// A term pinned to an isolated etcd leader must not be seen to end later
// than the bound; a fault whose node did not lead judges nothing.
func TestCheckPinnedTerm(t *testing.T) {
	line := "0 nemesis etcd_pinned_term node=node-a epoch=57 polls=20 end=1.04s bound=" + EtcdPinnedEndBound.String() + "\n"
	r := Check(hist(t, line), cfg)
	wantClean(t, r)
	if r.Judged[VPinnedTermExtended] != 1 {
		t.Errorf("judged %d pinned terms, want 1", r.Judged[VPinnedTermExtended])
	}
	wantOnly(t, Check(hist(t, strings.Replace(line, "end=1.04s", "end=2.6s", 1)), cfg), VPinnedTermExtended)
	r = Check(hist(t, strings.Replace(strings.Replace(line, "polls=20", "polls=0", 1), "end=1.04s", "end=none", 1)), cfg)
	if len(r.Violations) != 0 || r.Judged[VPinnedTermExtended] != 0 {
		t.Errorf("no term polled: violations %v, judged %d", r.Violations, r.Judged[VPinnedTermExtended])
	}
	// The bound: a 3s TTL less TTL/20, the 0.8s demote timeout and two
	// 250ms kill graces, plus 100ms.
	if EtcdPinnedEndBound.String() != "1.65s" {
		t.Errorf("EtcdPinnedEndBound = %v, want 1.65s", EtcdPinnedEndBound)
	}
}
