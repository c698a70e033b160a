package redistest

import (
	"testing"
	"time"
)

// TestOverlapsFindsTwoWriters checks the split-brain checker on made-up
// probe logs: a clean handover has no overlap; a second Redis accepting a
// write in the middle of the first one's run is found; one accepting at the
// very edge of the run (which the probes cannot order) is not claimed.
func TestOverlapsFindsTwoWriters(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	probe := func(node string, sentMS int, ok bool) Probe {
		return Probe{Node: node, Sent: at(sentMS), Done: at(sentMS + 2), Accepted: ok}
	}
	run := func(node string, fromMS, toMS int, ok bool) []Probe {
		var ps []Probe
		for ms := fromMS; ms <= toMS; ms += 20 {
			ps = append(ps, probe(node, ms, ok))
		}
		return ps
	}
	cat := func(parts ...[]Probe) []Probe {
		var out []Probe
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}

	clean := cat(run("a", 0, 1000, true), run("a", 1020, 2000, false),
		run("b", 0, 1400, false), run("b", 1420, 2000, true))
	if o := Overlaps(clean); len(o) != 0 {
		t.Errorf("clean handover: overlaps %v", o)
	}
	if w := Writers(clean); len(w) != 2 || w[0] != "a" || w[1] != "b" {
		t.Errorf("clean handover: writers %v, want [a b]", w)
	}

	// b accepts one write at 500 ms while a accepts throughout.
	split := cat(run("a", 0, 1000, true), run("b", 0, 480, false), []Probe{probe("b", 500, true)}, run("b", 520, 1000, false))
	o := Overlaps(split)
	if len(o) != 1 || o[0].Writer != "a" || o[0].Other.Node != "b" {
		t.Fatalf("split brain: overlaps %v, want a's run cut by b's write at 500ms", o)
	}
	t.Log(o[0])

	// b's write answered right at the end of a's last accepted probe: the
	// probes cannot tell which came first.
	edge := cat(run("a", 0, 1000, true), run("a", 1020, 1100, false), []Probe{{Node: "b", Sent: at(999), Done: at(1010), Accepted: true}})
	if o := Overlaps(edge); len(o) != 0 {
		t.Errorf("edge: overlaps %v, want none (not provable)", o)
	}
}
