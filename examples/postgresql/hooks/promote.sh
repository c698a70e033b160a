#!/usr/bin/env bash
# failoverd service.promote hook for PostgreSQL: promotes this node's
# standby, records the leadership's epoch in the table failoverd_epoch
# (which replicates to every standby), and checkpoints.
#
# Usage: promote.sh NODE_ENV_FILE
# From failoverd: FAILOVERD_EPOCH (required), FAILOVERD_NODE_ID,
#   FAILOVERD_CLUSTER, FAILOVERD_REASON, FAILOVERD_PREVIOUS_LEADER,
#   FAILOVERD_PREVIOUS_EPOCH.
#
# It refuses (exit 1, before promoting) an epoch lower than the newest this
# PostgreSQL has replayed into failoverd_epoch: failoverd's epochs only
# grow, so a lower one is a stale leadership. Idempotent: a primary at the
# same epoch is left as it is.
#
# The epoch is written with synchronous_commit = local: no standby follows
# the new primary yet, and synchronous_standby_names would block the
# write until one does. The CHECKPOINT at the end is what makes this
# primary a source pg_rewind accepts, and what lets this primary itself be
# rewound if it crashes later: a primary that crashed before the first
# checkpoint after its promotion cannot be (pg_rewind: "could not find
# previous WAL record").
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
case ${BASH_SOURCE[0]} in */*) . "${BASH_SOURCE[0]%/*}/lib.sh" ;; *) . ./lib.sh ;; esac

(($# == 1)) || usage "NODE_ENV_FILE"
load_env "$1"
epoch=${FAILOVERD_EPOCH:-}
ev_add cluster "${FAILOVERD_CLUSTER:-}" node "${FAILOVERD_NODE_ID:-}" pg "$PG_HOST:$PG_PORT" epoch "$epoch" \
  prev "${FAILOVERD_PREVIOUS_LEADER:-}" prev_epoch "${FAILOVERD_PREVIOUS_EPOCH:-}" reason "${FAILOVERD_REASON:-}"
[[ "$epoch" =~ ^[0-9]+$ ]] || fail "FAILOVERD_EPOCH \"$epoch\" is not a number"

lsql "SELECT pg_is_in_recovery(), coalesce((SELECT max(epoch) FROM failoverd_epoch), 0)" || fail "$SQL_ERR"
IFS='|' read -r recovery seen <<<"$SQL_OUT"
((seen <= epoch)) || fail "stale epoch $epoch: this PostgreSQL has seen epoch $seen"

how=already-primary
if [[ "$recovery" == t ]]; then
  lsql "SELECT pg_promote(true, 60)" || fail "pg_promote: $SQL_ERR"
  [[ "$SQL_OUT" == t ]] || fail "pg_promote did not finish within 60s"
  how=promoted
fi
# A primary streams from nobody; a restart (always as a standby, see
# start.sh) then waits for follow.sh instead of streaming from the node it
# followed before.
set_conninfo
lsql "SET synchronous_commit = local; UPDATE failoverd_epoch SET epoch = $epoch, node = '${FAILOVERD_NODE_ID:-}', at = now() WHERE epoch <= $epoch" ||
  fail "recording the epoch: $SQL_ERR"
lsql "CHECKPOINT" || fail "CHECKPOINT: $SQL_ERR"
lsql "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int" || fail "$SQL_ERR"
ev_add timeline "$SQL_OUT" how "$how"
# Last: the record of what this node is (see health.sh and follow.sh).
as_pg sh -c 'printf "%s\n" "$2" >"$1"' sh "$PG_FOLLOW_STATE" "primary epoch=$epoch timeline=$SQL_OUT"
ok
