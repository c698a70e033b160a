#!/usr/bin/env bash
# Starts this node's PostgreSQL the only way a PostgreSQL under failoverd
# may start outside its hooks: as a standby (standby.signal). Its
# primary_conninfo is what the hooks last wrote (a standby's leader, or
# nobody after a promote or demote); follow.sh re-points it once failoverd
# runs. This is what a host's boot does (see systemd/): a primary that
# crashed comes back read-only, never as a second writable primary.
#
# Usage: start.sh [--park-only] NODE_ENV_FILE
#   --park-only  only create standby.signal (a unit's ExecStartPre)
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
case ${BASH_SOURCE[0]} in */*) . "${BASH_SOURCE[0]%/*}/lib.sh" ;; *) . ./lib.sh ;; esac

only=0
if [[ "${1:-}" == --park-only ]]; then
  only=1
  shift
fi
(($# == 1)) || usage "[--park-only] NODE_ENV_FILE"
load_env "$1"
park
((only)) && exit 0
if pm_pid; then
  echo "start: already running (pid $PM_PID)"
  exit 0
fi
start_pg 60 || {
  echo "start: pg_ctl start failed; see $PG_LOG" >&2
  exit 1
}
