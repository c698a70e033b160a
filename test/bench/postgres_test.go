package bench

import (
	"testing"

	"github.com/failoverd/failoverd/test/pgtest"
)

const scPostgres = "PostgreSQL example"

// BenchmarkPostgresFailover runs the PostgreSQL example's end-to-end
// scenario (pgtest.RunFailovers: host crash, PostgreSQL-only crash,
// SIGTERM, failover --to, naive restart as a primary; real PostgreSQL,
// synchronous replication, a writer through failoverd leader --watch, a
// probe every 50 ms) BENCH_PG_RUNS times (default 1) and reports:
//
//   - host crash → a writable new primary (probe), the RTO;
//   - the writer's longest gap between two acknowledged inserts, per fault;
//   - the old primary's rejoin (from its return to its successful follow
//     hook), without and with pg_rewind.
//
// The newcomer's trial (same host class, 6s session) measured 6.4-7.4 s
// without a writable primary after a host crash, a write outage of
// 7.2-9.2 s, and a rejoin of 5.9-12.5 s without pg_rewind, 19-33 s with it.
func BenchmarkPostgresFailover(b *testing.B) {
	figs := pgtest.RunFailovers(b, runs("PG", 1))
	s := series{}
	for _, f := range figs {
		switch f.Step {
		case "host-crash", "naive":
			s.add("rto", f.NoPrimary)
			s.add("outage-crash", f.Outage)
		default:
			s.add("outage-"+f.Step, f.Outage)
		}
		if f.Rewound {
			s.add("rejoin-rewind", f.Rejoin)
		} else {
			s.add("rejoin-plain", f.Rejoin)
		}
	}
	b.Logf("figures:\n%s", pgtest.Format(figs))
	row := func(key, name, notes string) {
		if len(s[key]) == 0 {
			return
		}
		r := Result{Scenario: scPostgres, Name: name, Runs: len(s[key]), Notes: notes}
		r.fill(s[key])
		record(b, r)
	}
	row("rto", "host crash: no writable primary", "probe every 50 ms; trial: 6.4-7.4 s")
	row("outage-crash", "host crash: write outage", "writer via leader --watch, sync rep ANY 1; trial: 7.2-9.2 s")
	for _, k := range []string{"pg-crash", "sigterm", "failover"} {
		row("outage-"+k, k+": write outage", "")
	}
	row("rejoin-plain", "old primary rejoins, no pg_rewind", "from its return to its follow hook's success; trial: 5.9-12.5 s")
	row("rejoin-rewind", "old primary rejoins with pg_rewind", "trial: 19-33 s")
}
