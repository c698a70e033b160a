#!/usr/bin/env bash
# failoverd service.position command for PostgreSQL: prints how much WAL
# this node's PostgreSQL holds, as a byte position (an LSN minus 0/0): the
# flush position on a primary, the greater of the received and the replayed
# position on a standby. LSNs continue across a promotion, so one number
# compares a dead primary's last published position with its standbys'.
#
# Usage: position.sh NODE_ENV_FILE   (no event line: it runs every interval)
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
case ${BASH_SOURCE[0]} in */*) . "${BASH_SOURCE[0]%/*}/lib.sh" ;; *) . ./lib.sh ;; esac

(($# == 1)) || usage "NODE_ENV_FILE"
load_env "$1"
if ! lsql "SELECT (CASE WHEN pg_is_in_recovery() THEN greatest(coalesce(pg_last_wal_receive_lsn(), '0/0'), coalesce(pg_last_wal_replay_lsn(), '0/0')) ELSE pg_current_wal_flush_lsn() END - '0/0'::pg_lsn)::bigint"; then
  echo "position: $SQL_ERR" >&2
  exit 1
fi
[[ "$SQL_OUT" =~ ^[0-9]+$ ]] || {
  echo "position: not a position: \"$SQL_OUT\"" >&2
  exit 1
}
printf '%s\n' "$SQL_OUT"
