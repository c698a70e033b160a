package pgtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/failoverd/failoverd/controller"
)

// Generous bounds: the machine may be shared and loaded. A crashed leader
// is noticed after the 6s session timeout; a rejoin may copy a database.
const (
	leaderWithin = 90 * time.Second
	rejoinWithin = 240 * time.Second
	// How long the old primary may stay writable after its failoverd
	// started, when it was started as a primary behind failoverd's back:
	// the startup demote (a fast shutdown of up to 3s, then an immediate
	// one) must end it.
	naiveDemoteWithin = 30 * time.Second
)

// Figures are one step's measurements.
type Figures struct {
	Step      string
	NoPrimary time.Duration // probe: no PostgreSQL writable, from the fault
	Outage    time.Duration // writer: the longest gap between two acks
	Rejoin    time.Duration // the old leader's follow hook succeeded, from its return
	How       string        // that follow run: how, rewound
	Rewound   bool
}

// RunFailovers starts a cluster (Start), a writer and a prober, and puts it
// through every Step in order, cycles times. It fails t on any lost
// acknowledged row, a second writable primary (but for the naive step's
// expected window), an epoch that did not grow, a promote or a rejoin that
// did not happen; it returns every step's figures.
func RunFailovers(t testing.TB, cycles int) []Figures {
	t.Helper()
	return RunFailoversWith(t, cycles, Options{})
}

// RunFailoversWith is RunFailovers on a cluster started with o.
func RunFailoversWith(t testing.TB, cycles int, o Options) []Figures {
	t.Helper()
	c := Start(t, o)
	if cycles < 1 {
		cycles = 1
	}
	prober := c.StartProber(50 * time.Millisecond)
	writer := c.StartWriter(c.Nodes[2])
	if !writer.WaitAcks(time.Time{}, 20, 120*time.Second) {
		t.Fatalf("the writer got no 20 acknowledged inserts within 120s (%d failed)", writer.InDoubt())
	}

	type step struct {
		name string
		// cause makes old stop leading; back brings it back (nil: its
		// failoverd brings it back by itself).
		cause, back func(old *Node)
		target      bool
		// wantRewind: the old primary's rejoin must (yes) or must not (no)
		// rewind; "" when it depends on what reached the standbys.
		wantRewind string
	}
	var naiveDaemonAt time.Time
	steps := []step{
		{
			name:  "host-crash",
			cause: func(old *Node) { old.Crash() },
			back: func(old *Node) {
				old.StartService() // what the unit drop-in does: a standby
				if Writable(old) {
					t.Errorf("%s's PostgreSQL, started by start.sh after a crash, is writable", old.ID)
				}
				old.Start()
			},
		},
		{
			name:  "pg-crash",
			cause: func(old *Node) { old.CrashService() },
		},
		{
			// A supervisor restarts the crashed PostgreSQL at once (as
			// start.sh does: a standby), before a second failed health
			// check: health.sh must still count it unhealthy, or the
			// leader keeps its term with no primary anywhere.
			name: "pg-restart",
			cause: func(old *Node) {
				at := time.Now()
				old.CrashService()
				if err := TryStart(old); err != nil {
					// On a loaded host failoverd's health check may see
					// PostgreSQL down first: its demote hook then stops
					// the server start.sh is starting, and start.sh
					// fails. The leader steps down all the same (the
					// step's check of health.sh is not exercised in that
					// run); any other failure of start.sh fails the test.
					if _, ok := c.WaitEvent("demote", at, 30*time.Second, "node", old.ID, "reason", "unhealthy"); !ok {
						t.Fatal(err)
					}
					t.Logf("pg-restart: %s's demote hook (unhealthy) stopped the PostgreSQL start.sh was starting, on a slow host: %v", old.ID, err)
				}
			},
		},
		{
			name: "sigterm",
			cause: func(old *Node) {
				old.Signal(syscall.SIGTERM)
				if _, ok := old.Wait(60 * time.Second); !ok {
					t.Fatalf("failoverd of %s did not exit within 60s of SIGTERM", old.ID)
				}
				if Writable(old) {
					t.Errorf("after a graceful stop, %s's PostgreSQL is writable", old.ID)
				}
			},
			back:       func(old *Node) { old.Start() },
			wantRewind: "no",
		},
		{name: "failover", target: true, wantRewind: "no"},
		{
			name:  "naive",
			cause: func(old *Node) { old.Crash() },
			back: func(old *Node) {
				os.Remove(PGData(old) + "/standby.signal")
				StartNaively(old)
				if !Writable(old) {
					t.Errorf("%s's PostgreSQL, started by hand without standby.signal, is not a primary", old.ID)
				}
				time.Sleep(2 * time.Second)
				naiveDaemonAt = time.Now()
				old.Start()
			},
			// Started as a primary, it wrote an end-of-recovery checkpoint
			// the new leader's timeline does not have.
			wantRewind: "yes",
		},
	}
	var figures []Figures
	var all []step
	for i := 0; i < cycles; i++ {
		all = append(all, steps...)
	}
	for _, s := range all {
		old := c.WaitSettled("", rejoinWithin)
		oldEpoch := epochOf(t, old)
		var target *Node
		if s.target {
			target = c.Others(old)[0]
			waitCandidate(t, target, leaderWithin)
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
		next := c.WaitLeader(old.ID, leaderWithin)
		if target != nil && next != target {
			t.Errorf("%s: %s leads, want the failover's target %s", s.name, next.ID, target.ID)
		}
		newEpoch := epochOf(t, next)
		if newEpoch <= oldEpoch {
			t.Errorf("%s: new epoch %d is not above the old %d", s.name, newEpoch, oldEpoch)
		}
		e := strconv.FormatInt(newEpoch, 10)
		if _, ok := c.WaitEvent("promote", start, 30*time.Second, "node", next.ID, "epoch", e, "result", "ok"); !ok {
			t.Errorf("%s: no successful promote event of %s at epoch %s", s.name, next.ID, e)
		}
		if v, err := Query(next, "SELECT max(epoch) FROM failoverd_epoch"); err != nil || v != e {
			t.Errorf("%s: failoverd_epoch on %s = %q (%v), want %s", s.name, next.ID, v, err, e)
		}
		// The surviving standby follows the new primary.
		c.WaitSettled(old.ID, rejoinWithin, c.Others(old)...)
		// An insert acknowledged by the new primary: the old one may have
		// acknowledged some after start, before it went.
		if !writer.WaitAcks(start, 1, leaderWithin, next.ServiceAddr) {
			t.Fatalf("%s: no acknowledged insert within %v", s.name, leaderWithin)
		}
		f := Figures{Step: s.name}
		settled := time.Now()
		f.NoPrimary = NoPrimary(prober.Samples(), start, settled)
		f.Outage = Outage(writer.Acks(), start, settled)

		backAt := time.Now()
		if s.back != nil {
			s.back(old)
		}
		// Without a back step the old leader's own failoverd rejoins it,
		// maybe before the new leader's standbys settled: look from start.
		since := backAt
		if s.back == nil {
			since = start
		}
		ev, ok := c.WaitEvent("follow", since, rejoinWithin, "node", old.ID, "result", "ok")
		if !ok {
			t.Fatalf("%s: %s did not follow again within %v", s.name, old.ID, rejoinWithin)
		}
		now := c.WaitSettled("", rejoinWithin)
		f.Rejoin = ev.At.Sub(backAt)
		if s.back == nil {
			f.Rejoin = ev.At.Sub(start)
		}
		f.How = ev.KV["how"] + " rewound=" + ev.KV["rewound"]
		f.Rewound = ev.KV["rewound"] == "yes"
		switch {
		case s.wantRewind == "yes" && ev.KV["rewound"] != "yes":
			t.Errorf("%s: %s rejoined with %s, want a pg_rewind", s.name, old.ID, f.How)
		case s.wantRewind == "no" && ev.KV["rewound"] == "yes":
			t.Errorf("%s: %s rejoined with %s, want no pg_rewind", s.name, old.ID, f.How)
		}
		if ev.KV["how"] == "cloned" {
			t.Errorf("%s: %s was re-cloned (%s): pg_rewind should have done", s.name, old.ID, ev.KV["moved_aside"])
		}
		figures = append(figures, f)
		t.Logf("%s: %s → %s (epoch %d → %d); no primary %.2fs, write outage %.2fs; %s rejoined in %.1fs (%s); %s leads now",
			s.name, old.ID, next.ID, oldEpoch, newEpoch, f.NoPrimary.Seconds(), f.Outage.Seconds(), old.ID, f.Rejoin.Seconds(), f.How, now.ID)

		for _, d := range Duals(prober.Samples()) {
			if s.name == "naive" && !naiveDaemonAt.IsZero() && (d.A == old.ID || d.B == old.ID) && d.From.After(start) {
				if d.To.Sub(naiveDaemonAt) > naiveDemoteWithin {
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
		checkRows(t, c, writer, s.name)
		if t.Failed() {
			return figures
		}
	}
	writer.Stop()
	prober.Stop()
	acks := writer.Acks()
	checkRows(t, c, writer, "end")
	t.Logf("%d acknowledged inserts, %d failed (in doubt), %d probe samples", len(acks), writer.InDoubt(), len(prober.Samples()))
	return figures
}

// checkRows: every acknowledged insert is on every node, once each
// stream from the leader (waits for replay).
func checkRows(t testing.TB, c *Cluster, w *Writer, when string) {
	t.Helper()
	leader := c.WaitSettled("", rejoinWithin)
	acks := w.Acks()
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range c.Nodes {
		for {
			missing, err := Missing(n, acks)
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

func epochOf(t testing.TB, n *Node) int64 {
	t.Helper()
	s, ok := n.Status()
	if !ok {
		t.Fatalf("%s's admin API does not answer", n.ID)
	}
	return s.Epoch
}

// waitCandidate waits until n's failoverd reports its PostgreSQL healthy
// and itself a standby, as failover --to requires of a target.
func waitCandidate(t testing.TB, n *Node, timeout time.Duration) {
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

// Format renders figures as a table.
func Format(fs []Figures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-11s %10s %12s %10s  %s\n", "step", "no primary", "write outage", "rejoin", "how")
	for _, f := range fs {
		fmt.Fprintf(&b, "%-11s %9.2fs %11.2fs %9.1fs  %s\n", f.Step, f.NoPrimary.Seconds(), f.Outage.Seconds(), f.Rejoin.Seconds(), f.How)
	}
	return b.String()
}
