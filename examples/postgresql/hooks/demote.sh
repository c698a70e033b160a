#!/usr/bin/env bash
# failoverd service.demote hook for PostgreSQL: a primary cannot turn into
# a standby while it runs, so this stops it and starts it again as a
# standby of nobody (standby.signal, empty primary_conninfo) until
# follow.sh points it at the new leader. A standby is left alone, and so
# is a PostgreSQL that is starting as one: demoting what is not a primary
# succeeds with nothing to do. A PostgreSQL that is not running gets
# standby.signal, so that whoever starts it starts a standby.
#
# Usage: demote.sh [-t SECONDS] NODE_ENV_FILE
#   -t  the hook's deadline: keep it equal to service.demote.timeout (3 by
#       default). A fast shutdown (clients cut off, shutdown checkpoint) may
#       use all of it but the last second; then an immediate one (SIGQUIT to
#       the postmaster) stops it at once.
# From failoverd: FAILOVERD_NODE_ID, FAILOVERD_EPOCH, FAILOVERD_REASON.
#
# When failoverd's own deadline comes first (it sends SIGTERM at the
# hook's timeout, whichever timeout applies), the trap below makes the stop
# immediate before the kill grace ends. Writes stop as soon as the
# shutdown begins: a primary in shutdown accepts no new transactions.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
case ${BASH_SOURCE[0]} in */*) . "${BASH_SOURCE[0]%/*}/lib.sh" ;; *) . ./lib.sh ;; esac

deadline_s=${PG_DEMOTE_TIMEOUT:-3}
if [[ "${1:-}" == -t ]]; then
  [[ "${2:-}" =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage "[-t SECONDS] NODE_ENV_FILE"
  deadline_s=$2
  shift 2
fi
(($# == 1)) || usage "[-t SECONDS] NODE_ENV_FILE"
load_env "$1"
now_ms
start_ms=$NOW_MS
secs_ms "$deadline_s"
# failoverd says this run's own timeout: service.demote.graceful_timeout
# when the leader ends its term on purpose (a clean stop may take long),
# else service.demote.timeout. It wins over -t.
if [[ "${FAILOVERD_TIMEOUT_MS:-}" =~ ^[0-9]+$ ]] && ((FAILOVERD_TIMEOUT_MS > 0)); then
  MS=$FAILOVERD_TIMEOUT_MS
fi
# The fast shutdown may last until one second before the deadline.
fast_until=$((start_ms + MS - 1000))
ev_add cluster "${FAILOVERD_CLUSTER:-}" node "${FAILOVERD_NODE_ID:-}" pg "$PG_HOST:$PG_PORT" \
  epoch "${FAILOVERD_EPOCH:-}" reason "${FAILOVERD_REASON:-}"

# failoverd's deadline: SIGTERM, then SIGKILL after the kill grace.
# Only a primary's stop needs it: anything else is left as it is.
STOPPING=0
on_term() {
  ((STOPPING)) || fail "stopped by failoverd at its deadline"
  if pm_pid; then
    kill -QUIT "$PM_PID" 2>/dev/null || true
  fi
  ev_add how immediate-at-deadline
  fail "stopped by failoverd at its deadline; sent an immediate shutdown"
}
trap on_term TERM

if ! has_data; then
  ev_add how no-data
  ok
fi
if ! pm_pid; then
  park
  not_primary
  ev_add how not-running
  ok
fi
# What the postmaster says it is (postmaster.pid): a hot standby, or a
# server that is starting with standby.signal (a crashed primary restarted
# as a standby replays its WAL in crash recovery first, and pg_control says
# "in production" or "in crash recovery" until then) is not a primary.
pm_status
if [[ "$PM_STATUS" == standby ]]; then
  park
  not_primary
  ev_add how already-standby
  ok
fi
if [[ "$PM_STATUS" == starting || -z "$PM_STATUS" ]] && started_as_standby; then
  park
  not_primary
  ev_add how starting-standby
  ok
fi
cluster_state || fail "pg_controldata: cannot read $PGDATA"
if [[ "$CLUSTER_STATE" == "in archive recovery" ]]; then
  park
  not_primary
  ev_add how already-standby
  ok
fi

# A primary, or one starting up without standby.signal (it comes up as a
# primary). standby.signal first: whatever happens next, the next start is
# a standby's.
STOPPING=1
park
now_ms
left=$((fast_until - NOW_MS))
stop_pg $((left > 0 ? left : 0)) || fail "PostgreSQL (pid $PM_PID) still runs after an immediate shutdown"
not_primary
now_ms
ev_add how "stopped-$STOPPED" stop_ms "$((NOW_MS - start_ms))"
# Back as a standby of nobody; pg_ctl does not wait for it.
set_conninfo
start_pg || fail "pg_ctl start as a standby failed (see $PG_LOG)"
ok
