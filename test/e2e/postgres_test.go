package e2e

import (
	"testing"

	"github.com/failoverd/failoverd/test/pgtest"
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
//	pg-restart   the same, but PostgreSQL is restarted at once (a standby,
//	             as start.sh starts it) before failoverd's next check: it
//	             must still step down, as health.sh counts a promoted node
//	             in recovery unhealthy
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
// close within 30s of that node's failoverd's start. The figures (no
// primary, write outage, rejoin with or without pg_rewind) are logged;
// make bench reports them (test/bench/postgres_test.go). The driver is
// pgtest.RunFailovers. It runs on ZooKeeper and on etcd (lease_ttl 6s),
// the two clusters side by side.
//
// What it needs: the 3 PostgreSQL servers, ZooKeeper and 3 failoverd,
// about 4 minutes of 2 cores per backend. The bounds of the test itself are generous
// (a leader within 90s, a rejoin within 240s), but follow.sh's own wait
// for streaming is not: PG_FOLLOW_WAIT (10s, 20s after a pg_rewind) is
// the example's figure for a quiet host, and a standby started after a
// rewind on a host loaded by other clusters (a 3-member etcd beside it)
// may take longer to replay and connect; follow.sh then re-clones it, and
// the step fails ("re-cloned: pg_rewind should have done"). The test
// raises it to 25s (50s after a rewind): waits well inside the 120s
// follow timeout. make bench keeps the example's 10s, as its figures are
// the example's.
func TestPostgresFailovers(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	onEachBackendInParallel(t, func(t *testing.T, backend string) {
		figures := pgtest.RunFailoversWith(t, 1, pgtest.Options{Backend: backend, Env: []string{"PG_FOLLOW_WAIT=25"}})
		t.Logf("figures on %s:\n%s", backend, pgtest.Format(figures))
	})
}
