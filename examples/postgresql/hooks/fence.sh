#!/usr/bin/env bash
# failoverd shell fencing method for PostgreSQL: makes sure the OLD
# leader's PostgreSQL accepts no writes, and that whoever starts it next
# starts a standby.
#
# Usage: fence.sh [NODE_ID=NODE_ENV_FILE...]
#   The pairs map failoverd node ids to their environment files. This
#   method works on the target's data directory, so it must run where that
#   is (the demo: one host; across hosts run it there through the ssh
#   method's command, see README.md). For a node not in the list it can
#   only ask the target's PostgreSQL (FAILOVERD_TARGET_ADDRESS) and succeeds
#   only when that answers as a standby.
# From failoverd: FAILOVERD_TARGET_ID, FAILOVERD_TARGET_ADDRESS,
#   FAILOVERD_TARGET_EPOCH, FAILOVERD_TARGET_HOST, FAILOVERD_CLUSTER,
#   FAILOVERD_NODE_ID.
# Optional: FAILOVERD_FENCE_FAIL_FILE (while that file exists, fail: tests
#   use it).
#
# With the data directory: standby.signal first; then a running primary gets
# an immediate shutdown (SIGQUIT to its postmaster) and must be gone; a
# running standby, one starting with standby.signal and a stopped server
# count as fenced (standby.signal is there, so a start is a standby's).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
case ${BASH_SOURCE[0]} in */*) . "${BASH_SOURCE[0]%/*}/lib.sh" ;; *) . ./lib.sh ;; esac

target=${FAILOVERD_TARGET_ID:-}
ev_add cluster "${FAILOVERD_CLUSTER:-}" node "${FAILOVERD_NODE_ID:-}" target "$target" \
  target_address "${FAILOVERD_TARGET_ADDRESS:-}" target_epoch "${FAILOVERD_TARGET_EPOCH:-}"
[[ -n "$target" ]] || fail "FAILOVERD_TARGET_ID is not set"
if [[ -n "${FAILOVERD_FENCE_FAIL_FILE:-}" && -e "$FAILOVERD_FENCE_FAIL_FILE" ]]; then
  fail "$FAILOVERD_FENCE_FAIL_FILE exists"
fi
envf=''
for pair in "$@"; do
  [[ "$pair" == *=* ]] || usage "[NODE_ID=NODE_ENV_FILE...]"
  if [[ "${pair%%=*}" == "$target" ]]; then envf=${pair#*=}; fi
done

if [[ -z "$envf" ]]; then
  addr=${FAILOVERD_TARGET_ADDRESS:-}
  [[ -n "$addr" ]] || fail "no environment file and no service_address for node $target"
  PG_SUPERUSER=${PG_SUPERUSER:-postgres}
  command -v "$PSQL" >/dev/null 2>&1 || fail "psql not found (Debian: apt-get install postgresql-client)"
  split_addr "$addr"
  sql "$HOST" "$PORT" "SELECT pg_is_in_recovery()" || fail "$addr: $SQL_ERR (without its data directory that is not fenced)"
  [[ "$SQL_OUT" == t ]] || fail "$addr is a primary, and this method cannot stop it without its data directory"
  ev_add how standby-remote
  ok
fi

load_env "$envf"
ev_add pg "$PG_HOST:$PG_PORT"
has_data || {
  ev_add how no-data
  ok
}
# A hot standby, or a server starting with standby.signal (see demote.sh),
# is fenced as it is. Read before park: the signal must predate the start.
standby=0
if pm_pid; then
  pm_status
  if [[ "$PM_STATUS" == standby ]] ||
    { [[ "$PM_STATUS" == starting || -z "$PM_STATUS" ]] && started_as_standby; }; then
    standby=1
  fi
fi
park
if ! pm_pid; then
  ev_add how not-running
  ok
fi
if ((standby)); then
  ev_add how standby
  ok
fi
cluster_state || fail "pg_controldata: cannot read $PGDATA"
if [[ "$CLUSTER_STATE" == "in archive recovery" ]]; then
  ev_add how standby
  ok
fi
stop_pg 0 || fail "PostgreSQL (pid $PM_PID) still runs after an immediate shutdown"
ev_add how stopped
ok
