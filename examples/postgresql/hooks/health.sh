#!/usr/bin/env bash
# failoverd health.exec command for PostgreSQL. Exit 0 (healthy) when
#   - this PostgreSQL is a primary that accepts writes (not in recovery,
#     not read-only), or
#   - it is a standby that follow.sh saw streaming from a leader on that
#     leader's timeline (failoverd.follow says "leader=..."), and it is not
#     streaming on an older timeline than the one recorded there.
# A standby that was a promoted primary since (promote.sh wrote "primary
# ..." when it succeeded; pg_rewind and pg_basebackup copy the leader's)
# is unhealthy until follow.sh has seen it stream from the leader: it may
# hold WAL the leader never had, or lack acknowledged writes the leader
# has, so it must not be elected before. A standby whose leader went away
# stays healthy: it is what failoverd elects next.
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
[[ -r "$PG_FOLLOW_STATE" ]] && read -r state <"$PG_FOLLOW_STATE"
if [[ -z "$state" ]]; then
  echo "health: a standby that has not followed a leader yet (no $PG_FOLLOW_STATE)" >&2
  exit 1
fi
if [[ "$state" == primary* ]]; then
  echo "health: a standby that was a primary ($state) and has not followed a leader since" >&2
  exit 1
fi
want=${state##*timeline=}
if [[ "$status" == streaming && "$rtli" =~ ^[0-9]+$ && "$want" =~ ^[0-9]+$ ]] && ((rtli < want)); then
  echo "health: streaming on timeline $rtli, older than the leader's $want" >&2
  exit 1
fi
exit 0
