package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
	"github.com/failoverd/failoverd/test/pgtest"
)

// Generous bounds: the machine may be shared and loaded. A crashed leader
// is noticed after the 6s session timeout; a rejoin may copy a database.
const (
	pgLeaderWithin = 90 * time.Second
	pgRejoinWithin = 240 * time.Second
	// How long the old primary may stay writable after its failoverd
	// started, when it was started as a primary behind failoverd's back:
	// the startup demote (a fast shutdown of up to 3s, then an immediate
	// one) must end it.
	pgNaiveDemoteWithin = 30 * time.Second
)

// TestPostgresFailovers runs the PostgreSQL example (examples/postgresql:
// the shipped templates rendered by render.sh, the shipped hooks) with
// three real PostgreSQL servers and three failoverd processes on
// ZooKeeper, synchronous replication (ANY 1), and puts it through five
// leadership changes on one cluster:
//
//	host-crash   SIGKILL to the leader's failoverd and PostgreSQL; it comes
//	             back through start.sh (as a standby), then its failoverd
//	pg-crash     SIGKILL to the leader's PostgreSQL only: its failoverd sees
//	             it unhealthy and steps down; its follow hook brings it back
//	sigterm      SIGTERM to the leader's failoverd (a graceful demote)
//	failover     failoverd failover --to a standby
//	naive        a host crash, then its PostgreSQL started by hand as a
//	             primary (no standby.signal) before its failoverd: writable
//	             until that failoverd's startup demote, then rewound
//
// A writer inserts rows into the primary that failoverd leader --watch
// names, and a probe asks every PostgreSQL every 50ms whether it is a
// primary. After each change: the new leader's epoch is higher, its
// promote hook succeeded, every node streams from it on its timeline, and
// no acknowledged row is missing on any node. Two writable primaries at
// once are a failure, except in the naive step, where the window must
// close within pgNaiveDemoteWithin of its failoverd's start. The figures
// (no primary, write outage, rejoin with or without pg_rewind) are logged;
// make bench reports them.
func TestPostgresFailovers(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	pgFailovers(t, nil)
}

// pgFigures are one step's measurements.
type pgFigures struct {
	step      string
	noPrimary time.Duration // probe: no PostgreSQL writable
	outage    time.Duration // writer: the longest gap between two acks
	rejoin    time.Duration // the old leader streams again, from its return
	how       string        // the old leader's follow: how, rewound
}

func pgFailovers(t *testing.T, report func([]pgFigures)) {
	c := pgtest.Start(t, pgtest.Options{})
	prober := c.StartProber(50 * time.Millisecond)
	writer := c.StartWriter(c.Nodes[2])
	if !writer.WaitAcks(time.Time{}, 20, 120*time.Second) {
		t.Fatalf("the writer got no 20 acknowledged inserts within 120s (%d failed)", writer.InDoubt())
	}

	type step struct {
		name string
		// cause makes old stop leading; back brings it back (nil: its
		// failoverd brings it back by itself).
		cause, back func(old *pgtest.Node)
		target      bool
		// wantRewind: the old primary's rejoin must (yes) or must not (no)
		// rewind; "" when it depends on what reached the standbys.
		wantRewind string
	}
	var naiveDaemonAt time.Time
	steps := []step{
		{
			name:  "host-crash",
			cause: func(old *pgtest.Node) { old.Crash() },
			back: func(old *pgtest.Node) {
				old.StartPG() // what the unit drop-in does: a standby
				if old.Writable() {
					t.Errorf("%s's PostgreSQL, started by start.sh after a crash, is writable", old.ID)
				}
				old.StartDaemon()
			},
		},
		{
			name:  "pg-crash",
			cause: func(old *pgtest.Node) { old.KillPG() },
		},
		{
			name: "sigterm",
			cause: func(old *pgtest.Node) {
				old.SignalDaemon(syscall.SIGTERM)
				if !old.WaitDaemon(60 * time.Second) {
					t.Fatalf("failoverd of %s did not exit within 60s of SIGTERM", old.ID)
				}
				if old.Writable() {
					t.Errorf("after a graceful stop, %s's PostgreSQL is writable", old.ID)
				}
			},
			back:       func(old *pgtest.Node) { old.StartDaemon() },
			wantRewind: "no",
		},
		{name: "failover", target: true, wantRewind: "no"},
		{
			name:  "naive",
			cause: func(old *pgtest.Node) { old.Crash() },
			back: func(old *pgtest.Node) {
				os.Remove(old.PGData + "/standby.signal")
				old.StartPGNaively()
				if !old.Writable() {
					t.Errorf("%s's PostgreSQL, started by hand without standby.signal, is not a primary", old.ID)
				}
				time.Sleep(2 * time.Second)
				naiveDaemonAt = time.Now()
				old.StartDaemon()
			},
			// Started as a primary, it wrote an end-of-recovery checkpoint
			// the new leader's timeline does not have.
			wantRewind: "yes",
		},
	}
	var figures []pgFigures
	for _, s := range steps {
		old := c.WaitSettled("", pgRejoinWithin)
		oldEpoch := pgEpoch(t, old)
		var target *pgtest.Node
		if s.target {
			target = c.Others(old)[0]
			pgWaitCandidate(t, target, pgLeaderWithin)
		}
		t.Logf("%s: %s leads at epoch %d", s.name, old.ID, oldEpoch)
		start := time.Now()
		if target != nil {
			out, code := old.CLI("failover", "--to", target.ID, "--timeout", "60s")
			if code != 0 {
				t.Fatalf("%s: failoverd failover --to %s: exit %d\n%s", s.name, target.ID, code, out)
			}
		} else {
			s.cause(old)
		}
		next := c.WaitLeader(old.ID, pgLeaderWithin)
		if target != nil && next != target {
			t.Errorf("%s: %s leads, want the failover's target %s", s.name, next.ID, target.ID)
		}
		newEpoch := pgEpoch(t, next)
		if newEpoch <= oldEpoch {
			t.Errorf("%s: new epoch %d is not above the old %d", s.name, newEpoch, oldEpoch)
		}
		e := strconv.FormatInt(newEpoch, 10)
		if _, ok := c.WaitEvent("promote", start, 30*time.Second, "node", next.ID, "epoch", e, "result", "ok"); !ok {
			t.Errorf("%s: no successful promote event of %s at epoch %s", s.name, next.ID, e)
		}
		if v, err := next.Query("SELECT max(epoch) FROM failoverd_epoch"); err != nil || v != e {
			t.Errorf("%s: failoverd_epoch on %s = %q (%v), want %s", s.name, next.ID, v, err, e)
		}
		// The surviving standby follows the new primary.
		c.WaitSettled(old.ID, pgRejoinWithin, c.Others(old)...)
		if !writer.WaitAcks(start, 1, pgLeaderWithin) {
			t.Fatalf("%s: no acknowledged insert within %v", s.name, pgLeaderWithin)
		}
		f := pgFigures{step: s.name}
		settled := time.Now()
		f.noPrimary = pgtest.NoPrimary(prober.Samples(), start, settled)
		f.outage = pgtest.Outage(writer.Acks(), start, settled)

		backAt := time.Now()
		if s.back != nil {
			s.back(old)
		}
		ev, ok := c.WaitEvent("follow", backAt, pgRejoinWithin, "node", old.ID, "result", "ok")
		if !ok {
			t.Fatalf("%s: %s did not follow again within %v", s.name, old.ID, pgRejoinWithin)
		}
		now := c.WaitSettled("", pgRejoinWithin)
		f.rejoin = ev.At.Sub(backAt)
		if s.back == nil {
			f.rejoin = ev.At.Sub(start)
		}
		f.how = ev.KV["how"] + " rewound=" + ev.KV["rewound"]
		switch {
		case s.wantRewind == "yes" && ev.KV["rewound"] != "yes":
			t.Errorf("%s: %s rejoined with %s, want a pg_rewind", s.name, old.ID, f.how)
		case s.wantRewind == "no" && ev.KV["rewound"] == "yes":
			t.Errorf("%s: %s rejoined with %s, want no pg_rewind", s.name, old.ID, f.how)
		}
		if ev.KV["how"] == "cloned" {
			t.Errorf("%s: %s was re-cloned (%s): pg_rewind should have done", s.name, old.ID, ev.KV["moved_aside"])
		}
		figures = append(figures, f)
		t.Logf("%s: %s → %s (epoch %d → %d); no primary %.2fs, write outage %.2fs; %s rejoined in %.1fs (%s); %s leads now",
			s.name, old.ID, next.ID, oldEpoch, newEpoch, f.noPrimary.Seconds(), f.outage.Seconds(), old.ID, f.rejoin.Seconds(), f.how, now.ID)

		for _, d := range pgtest.Duals(prober.Samples()) {
			if s.name == "naive" && !naiveDaemonAt.IsZero() && (d.A == old.ID || d.B == old.ID) && d.From.After(start) {
				if d.To.Sub(naiveDaemonAt) > pgNaiveDemoteWithin {
					t.Errorf("naive: %v: still writable %v after its failoverd started", d, d.To.Sub(naiveDaemonAt))
				} else {
					t.Logf("naive: %v (its failoverd started %s; expected: it ran as a primary behind failoverd's back)", d, naiveDaemonAt.Format("15:04:05.000"))
				}
				continue
			}
			if d.From.After(start) {
				t.Errorf("%s: %v", s.name, d)
			}
		}
		pgCheckRows(t, c, writer, s.name)
		if t.Failed() {
			return
		}
	}
	writer.Stop()
	prober.Stop()
	acks := writer.Acks()
	pgCheckRows(t, c, writer, "end")
	t.Logf("%d acknowledged inserts, %d failed (in doubt), %d probe samples", len(acks), writer.InDoubt(), len(prober.Samples()))
	if report != nil {
		report(figures)
	}
}

// pgCheckRows: every acknowledged insert is on every node, once each
// stream from the leader (waits for replay).
func pgCheckRows(t *testing.T, c *pgtest.Cluster, w *pgtest.Writer, when string) {
	t.Helper()
	leader := c.WaitSettled("", pgRejoinWithin)
	acks := w.Acks()
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range c.Nodes {
		for {
			missing, err := pgtest.Missing(n, acks)
			if err == nil && len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				if err != nil {
					t.Errorf("%s: reading the rows on %s: %v", when, n.ID, err)
				} else {
					t.Errorf("%s: %d of %d acknowledged rows missing on %s (leader %s), first %v", when, len(missing), len(acks), n.ID, leader.ID, missing[:min(10, len(missing))])
				}
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func pgEpoch(t *testing.T, n *pgtest.Node) int64 {
	t.Helper()
	s, ok := n.Status()
	if !ok {
		t.Fatalf("%s's admin API does not answer", n.ID)
	}
	return s.Epoch
}

// pgWaitCandidate waits until n's failoverd reports its PostgreSQL healthy
// and itself a standby, as failover --to requires of a target.
func pgWaitCandidate(t *testing.T, n *pgtest.Node, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, ok := n.Status()
		if ok && st.Health == "healthy" && st.State == controller.StateStandby {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not a healthy standby within %v: %+v (answered: %v)", n.ID, timeout, st, ok)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pgFormat renders figures as a table.
func pgFormat(fs []pgFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s %10s %12s %10s  %s\n", "step", "no primary", "write outage", "rejoin", "how")
	for _, f := range fs {
		fmt.Fprintf(&b, "%-11s %9.2fs %11.2fs %9.1fs  %s\n", f.step, f.noPrimary.Seconds(), f.outage.Seconds(), f.rejoin.Seconds(), f.how)
	}
	return b.String()
}
