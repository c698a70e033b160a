#!/usr/bin/env bash
# Creates the cluster's first data directory, for a node's environment
# file: initdb (data checksums, so that pg_rewind works), the replication
# settings, the failoverd_epoch table, and a parked standby (standby.signal,
# streaming from nobody) that failoverd may elect. The other nodes need
# nothing: their follow hook copies the leader into their empty PGDATA.
#
# Usage: bootstrap.sh NODE_ENV_FILE
#
# postgresql.conf (copied to every node by pg_basebackup and pg_rewind):
#   wal_level replica, wal_log_hints on, wal_keep_size 256MB: a standby
#     that was away can catch up and be rewound without a WAL archive;
#   synchronous_standby_names 'ANY 1 (node_a, node_b, node_c)',
#     synchronous_commit on: a commit is acknowledged once one standby
#     has it (a primary is never its own standby, so every node can use
#     the same list). Writes wait while no standby streams: after a
#     failover, until the first standby has followed (see README.md);
#   include_if_exists 'failoverd.conf': primary_conninfo, owned by the
#     hooks.
# pg_hba: trust on loopback (a demo); use scram-sha-256 and a replication
# user elsewhere.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hooks/lib.sh
. "$here/hooks/lib.sh"
(($# == 1)) || usage "NODE_ENV_FILE"
load_env "$1"
has_data && fail "$PGDATA already holds a cluster"
as_pg "$PG_BINDIR/initdb" -D "$PGDATA" -U "$PG_SUPERUSER" -A trust -k --no-instructions >/dev/null
as_pg sh -c 'cat >>"$1"' sh "$PGDATA/postgresql.conf" <<CONF

# ---- examples/postgresql/bootstrap.sh ----
listen_addresses = '$PG_HOST'
wal_level = replica
wal_log_hints = on
wal_keep_size = 256MB
max_wal_senders = 10
hot_standby = on
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 1s
shared_buffers = 16MB
synchronous_commit = on
synchronous_standby_names = 'ANY 1 (node_a, node_b, node_c)'
include_if_exists = 'failoverd.conf'
CONF
set_conninfo
# Start it once as a primary, with no synchronous standbys, to create the
# epoch table; then stop it and park it.
as_pg "$PG_BINDIR/pg_ctl" start -D "$PGDATA" -l "$PG_LOG" -w -t 60 \
  -o "-p $PG_PORT -c cluster_name=$PG_NAME -c synchronous_standby_names= $PG_START_OPTS" >/dev/null
lsql "CREATE TABLE failoverd_epoch (epoch bigint NOT NULL, node text, at timestamptz); INSERT INTO failoverd_epoch VALUES (0, NULL, now())" ||
  fail "creating failoverd_epoch: $SQL_ERR"
as_pg "$PG_BINDIR/pg_ctl" stop -D "$PGDATA" -m fast -w -t 60 >/dev/null
park
# The first node has followed nobody, but holds everything there is: it
# may be elected.
as_pg sh -c 'printf "%s\n" "leader=none timeline=1" >"$1"' sh "$PG_FOLLOW_STATE"
echo "bootstrapped $PGDATA (a parked standby; start it with hooks/start.sh)"
