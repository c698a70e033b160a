#!/usr/bin/env bash
# failoverd health.exec command for PostgreSQL. Exit 0 (healthy) when
#   - this PostgreSQL is a primary that accepts writes (not in recovery,
#     not read-only), or
#   - it is a standby that is not streaming on an older timeline than the
#     leader's that follow.sh recorded (failoverd.follow: "leader=...
#     timeline=N"): a standby streaming an old timeline diverged;
#     and not one that promote.sh recorded as the primary ("primary
#     epoch=E", until demote.sh): that is the leader's PostgreSQL restarted
#     after a crash (below, or by a supervisor), always as a standby, and
#     its failoverd must hand over, or the cluster keeps a leader without
#     a primary.
# A standby whose leader went away stays healthy: it is what failoverd
# elects next. Which standby may be elected is election.max_lag's business
# (positions), not this check's: a check that refused an old primary
# until it followed again left a cluster whose only copy of the data was
# that old primary without any candidate.
#
# A PostgreSQL that is not running is unhealthy, and this starts it as a
# standby (see below): a supervisor's job, done here because health.sh
# runs every interval.
#
# Usage: health.sh NODE_ENV_FILE   (no event line: it runs every interval)
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
case ${BASH_SOURCE[0]} in */*) . "${BASH_SOURCE[0]%/*}/lib.sh" ;; *) . ./lib.sh ;; esac

(($# == 1)) || usage "NODE_ENV_FILE"
load_env "$1"
# A stopped PostgreSQL is started as a standby (standby.signal first):
# after a demote cut short at its deadline, or a crash of the service
# alone, nothing else would start it while there is no leader to follow.
# Never while a hook holds the node's lock (follow.sh rewinding, copying).
if has_data && ! pm_pid && lock_pg -n; then
  start_pg >/dev/null 2>&1 || true
  echo "health: PostgreSQL was not running; started it as a standby" >&2
  exit 1
fi
if ! lsql "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only'), coalesce((SELECT status || '|' || received_tli FROM pg_stat_wal_receiver), '|')"; then
  echo "health: $SQL_ERR" >&2
  exit 1
fi
IFS='|' read -r recovery ro status rtli <<<"$SQL_OUT"
if [[ "$recovery" == f ]]; then
  [[ "$ro" == off ]] || {
    echo "health: a primary with default_transaction_read_only=$ro" >&2
    exit 1
  }
  exit 0
fi
state=''
if [[ -r "$PG_FOLLOW_STATE" ]]; then read -r state <"$PG_FOLLOW_STATE" || true; fi
if [[ "$state" == primary* ]]; then
  echo "health: in recovery, but this node was promoted (${state%% timeline=*}) and not demoted since: restarted as a standby; failoverd must hand over" >&2
  exit 1
fi
[[ "$state" == leader=* ]] || exit 0
want=${state##*timeline=}
if [[ "$status" == streaming && "$rtli" =~ ^[0-9]+$ && "$want" =~ ^[0-9]+$ ]] && ((rtli < want)); then
  echo "health: streaming on timeline $rtli, older than the leader's $want" >&2
  exit 1
fi
exit 0
