package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/failoverd/failoverd/cluster"
	"github.com/failoverd/failoverd/test/zktest"
)

// failoverd pause / resume against real ZooKeeper: idempotent both ways,
// the first pause stands, status prints who paused, when and why (and
// no second "Leader: none" line when status already says why), status
// --json carries it.
func TestPauseResumeCommands(t *testing.T) {
	zkc := zktest.Start(t, 1)
	conf := writeLeaderConfig(t, zkc.Addrs()[0])
	cli := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(append(args[:1:1], append([]string{"-c", conf}, args[1:]...)...), &out, &errb)
		return out.String(), errb.String(), code
	}
	if out, errs, code := cli("resume"); code != exitOK || !strings.Contains(out, "is not paused") {
		t.Fatalf("resume when not paused: exit %d, %q, %q", code, out, errs)
	}
	if out, _, _ := cli("status"); strings.Contains(out, "PAUSED") {
		t.Fatalf("status before any pause says PAUSED:\n%s", out)
	}
	if out, errs, code := cli("pause", "--reason", "kernel upgrade"); code != exitOK || !strings.Contains(out, "paused") {
		t.Fatalf("pause: exit %d, %q, %q", code, out, errs)
	}
	out, errs, code := cli("pause", "--reason", "other")
	if code != exitOK || !strings.Contains(out, "already paused") || !strings.Contains(out, "kernel upgrade") {
		t.Fatalf("second pause: exit %d, %q, %q; want the first pause shown", code, out, errs)
	}
	out, _, code = cli("status")
	if code != exitOK || !strings.Contains(out, "PAUSED since ") || !strings.Contains(out, "@") || !strings.Contains(out, ": kernel upgrade") ||
		!strings.Contains(out, "Leader: none: no member") || strings.Contains(out, "while paused") {
		t.Fatalf("status while paused:\n%s", out)
	}
	out, _, _ = cli("status", "--json")
	var v clusterView
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Pause == nil || v.Pause.Reason != "kernel upgrade" {
		t.Fatalf("status --json while paused: %v, %+v", err, v.Pause)
	}
	if out, errs, code := cli("resume"); code != exitOK || !strings.Contains(out, "resumed") {
		t.Fatalf("resume: exit %d, %q, %q", code, out, errs)
	}
	if out, _, _ := cli("status"); strings.Contains(out, "PAUSED") {
		t.Fatalf("status after resume says PAUSED:\n%s", out)
	}
	if _, errs, code := cli("pause", "--bogus"); code != exitUsage {
		t.Fatalf("pause --bogus: exit %d, %q; want usage", code, errs)
	}
	if _, errs, code := cli("pause", "--reason", strings.Repeat("x", cluster.MaxPauseReason+1)); code != exitUsage || !strings.Contains(errs, "at most") {
		t.Fatalf("pause with a too long reason: exit %d, %q; want usage", code, errs)
	}
	if out, _, _ := cli("status"); strings.Contains(out, "PAUSED") {
		t.Fatalf("a refused pause paused the cluster:\n%s", out)
	}
}
