# shellcheck shell=bash
# The variables it sets are read by the hooks that source it:
# shellcheck disable=SC2034
# Sourced by the PostgreSQL hooks in this directory. Every hook takes the
# node's environment file (pg.env, see render.sh) as its last argument and
# sources it; it appends one line per run to $FAILOVERD_EVENTS_LOG when
# that is set (position.sh and health.sh aside: they run every interval):
#
#   TIME event=NAME key=value ... result=ok|failed [err="..."]
#
# The environment file sets (defaults in brackets):
#   PGDATA           the data directory (required)
#   PG_HOST, PG_PORT where this node's PostgreSQL listens (required)
#   PG_NAME          its application_name towards the primary, the name in
#                    synchronous_standby_names        [node id, - becomes _]
#   PG_BINDIR        initdb, pg_ctl, pg_rewind ...  [newest /usr/lib/postgresql/*/bin]
#   PG_OS_USER       the OS user PostgreSQL runs as; a hook run by root runs
#                    every command that touches PGDATA as it  [postgres]
#   PG_SUPERUSER     database user of the hooks' SQL        [postgres]
#   PG_REPL_USER     replication user in primary_conninfo   [postgres]
#   PG_START_OPTS    extra postgres options for pg_ctl start -o  []
#   PG_LOG           pg_ctl start's log file          [$PGDATA/../postgresql.log]
#   PG_ALLOW_RECLONE yes: follow.sh may move PGDATA aside and copy the
#                    leader with pg_basebackup when pg_rewind cannot repair
#                    it (never when the leader does not answer)      [no]
#   PG_FOLLOW_WAIT   seconds follow.sh waits for streaming on the
#                    leader's timeline before it rewinds              [10]

HOOK="${0##*/}"
HOOK="${HOOK%.sh}"
EV_FIELDS=()

# ev_quote VALUE: sets QUOTED to VALUE, quoted when it must be. (No
# command substitutions in the hooks' hot paths: each is a fork, and a fork
# takes long on a busy host.)
ev_quote() {
  QUOTED=$1
  if [[ "$1" =~ [[:space:]\"=] ]]; then
    local v=${1//\\/\\\\}
    v=${v//\"/\\\"}
    v=${v//$'\n'/ }
    QUOTED="\"$v\""
  fi
}

# ev_add KEY VALUE...: fields for the event line (empty values left out).
ev_add() {
  while (($# >= 2)); do
    if [[ -n "$2" ]]; then
      ev_quote "$2"
      EV_FIELDS+=("$1=$QUOTED")
    fi
    shift 2
  done
}

ev_emit() {
  local line now=$EPOCHREALTIME ts
  TZ=UTC0 printf -v ts '%(%Y-%m-%dT%H:%M:%S)T' "${now%.*}"
  line="$ts.${now#*.}Z event=$HOOK ${EV_FIELDS[*]} result=$1"
  if [[ -n "${2:-}" ]]; then
    ev_quote "$2"
    line+=" err=$QUOTED"
  fi
  printf '%s\n' "$line"
  if [[ -n "${FAILOVERD_EVENTS_LOG:-}" ]]; then
    printf '%s\n' "$line" >>"$FAILOVERD_EVENTS_LOG" || true
  fi
}

ok() {
  ev_emit ok
  exit 0
}

fail() {
  echo "$HOOK: $*" >&2
  ev_emit failed "$*"
  exit 1
}

usage() {
  echo "usage: $HOOK.sh $*" >&2
  exit 2
}

# now_ms: sets NOW_MS to the milliseconds since the epoch.
now_ms() {
  local t=$EPOCHREALTIME
  NOW_MS=$((${t%.*} * 1000 + 10#${t#*.} / 1000))
}

# load_env FILE: sources a node's environment file and fills in defaults.
load_env() {
  [[ -r "$1" ]] || usage "[options] NODE_ENV_FILE (\"$1\" is not readable)"
  # shellcheck source=/dev/null
  . "$1"
  [[ -n "${PGDATA:-}" && -n "${PG_HOST:-}" && "${PG_PORT:-}" =~ ^[0-9]+$ ]] ||
    fail "$1 must set PGDATA, PG_HOST and PG_PORT"
  PG_NAME=${PG_NAME:-${FAILOVERD_NODE_ID:-pg}}
  PG_NAME=${PG_NAME//-/_}
  if [[ -z "${PG_BINDIR:-}" ]]; then
    local d
    for d in /usr/lib/postgresql/*/bin; do [[ -x "$d/pg_ctl" ]] && PG_BINDIR=$d; done
    [[ -n "${PG_BINDIR:-}" ]] || PG_BINDIR=$(dirname "$(command -v pg_ctl 2>/dev/null || echo /usr/bin/pg_ctl)")
  fi
  PG_OS_USER=${PG_OS_USER:-postgres}
  PG_SUPERUSER=${PG_SUPERUSER:-postgres}
  PG_REPL_USER=${PG_REPL_USER:-postgres}
  PG_START_OPTS=${PG_START_OPTS:-}
  PG_LOG=${PG_LOG:-${PGDATA%/*}/postgresql.log}
  PG_ALLOW_RECLONE=${PG_ALLOW_RECLONE:-no}
  # PG_BINDIR's psql: Debian's /usr/bin/psql is a Perl wrapper that takes
  # long to start on a busy host.
  PSQL=$PG_BINDIR/psql
  [[ -x "$PSQL" ]] || PSQL=psql
  PG_FOLLOW_WAIT=${PG_FOLLOW_WAIT:-10}
  # The file the hooks own, included by postgresql.conf
  # (include_if_exists = 'failoverd.conf'): primary_conninfo.
  PG_HOOK_CONF="$PGDATA/failoverd.conf"
  # Commands run as PG_OS_USER need a working directory it may enter.
  cd "${PGDATA%/*}" 2>/dev/null || cd /
  # "leader=ID ... timeline=N": written by follow.sh when this standby
  # streams from the leader on the leader's timeline; "primary epoch=E ...":
  # written by promote.sh when it succeeded. health.sh calls a standby
  # streaming an older timeline than its record's unhealthy.
  PG_FOLLOW_STATE="$PGDATA/failoverd.follow"
}

# as_pg CMD...: runs CMD as the PostgreSQL OS user (when we are root).
as_pg() {
  if ((EUID == 0)); then
    runuser -u "$PG_OS_USER" -- "$@"
  else
    "$@"
  fi
}

# sql HOST PORT QUERY: runs one query (unaligned, tuples only, fields
# separated by "|"); output in SQL_OUT, error in SQL_ERR. SQL_REFUSED=1
# when the server could not be reached at all.
sql() {
  local h=$1 p=$2 q=$3 rc
  SQL_OUT='' SQL_ERR='' SQL_REFUSED=0
  SQL_OUT=$(PGCONNECT_TIMEOUT=${PGCONNECT_TIMEOUT:-3} "$PSQL" -X -q -A -t -F '|' -v ON_ERROR_STOP=1 \
    -h "$h" -p "$p" -U "$PG_SUPERUSER" -d postgres -c "$q" 2>&1) && rc=0 || rc=$?
  ((rc != 0)) || return 0
  SQL_ERR="${h}:${p}: ${SQL_OUT//$'\n'/ }"
  [[ "$SQL_OUT" == *"Connection refused"* || "$SQL_OUT" == *"could not connect"* || "$SQL_OUT" == *"timeout expired"* ||
    "$SQL_OUT" == *"the database system is"* || "$SQL_OUT" == *"No such file"* ]] && SQL_REFUSED=1
  SQL_OUT=''
  return 1
}

# lsql QUERY: sql against this node's PostgreSQL.
lsql() { sql "$PG_HOST" "$PG_PORT" "$1"; }

# pm_pid: the running postmaster's pid in PM_PID; returns 1 when none.
# Builtins only: the demote hook must be quick on a busy host.
pm_pid() {
  PM_PID=''
  local f="$PGDATA/postmaster.pid" pid comm
  [[ -r "$f" ]] || return 1
  read -r pid <"$f" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  read -r comm <"/proc/$pid/comm" 2>/dev/null || return 1
  [[ "$comm" == postgres* || "$comm" == postmaster* ]] || return 1
  PM_PID=$pid
}

# pm_status: what the running postmaster's postmaster.pid says (call
# after pm_pid): PM_STATUS, its 8th line (starting, standby: a hot standby,
# ready: a primary, stopping; empty while the postmaster has not written
# it yet), and PM_START, its start time (seconds since the epoch, 0 when
# unreadable). Builtins only.
pm_status() {
  local f="$PGDATA/postmaster.pid" line i=0
  PM_STATUS='' PM_START=0
  while IFS= read -r line && ((++i <= 8)); do
    ((i == 3)) && [[ "$line" =~ ^[0-9]+$ ]] && PM_START=$line
    ((i == 8)) && PM_STATUS=${line%%[[:space:]]*}
  done 2>/dev/null <"$f" || true
}

# started_as_standby: the running postmaster (pm_status) started with
# standby.signal, so that it comes up as a standby: the file is there and
# no younger than the postmaster. PostgreSQL reads it only as it starts
# (the same second counts: start.sh parks, then starts at once).
started_as_standby() {
  local f="$PGDATA/standby.signal" m
  [[ -e "$f" ]] && ((PM_START > 0)) || return 1
  m=$(stat -c %Y "$f" 2>/dev/null) || return 1
  ((m <= PM_START))
}

# cluster_state: CLUSTER_STATE from pg_control ("in production", "in
# archive recovery", "shut down", "shut down in recovery", ...), and
# CONTROL_TLI, the timeline of its latest checkpoint.
cluster_state() {
  local out line
  CLUSTER_STATE='' CONTROL_TLI=''
  out=$(LC_ALL=C "$PG_BINDIR/pg_controldata" -D "$PGDATA" 2>&1) || return 1
  while IFS= read -r line; do
    [[ "$line" =~ ^Database\ cluster\ state:\ +(.*)$ ]] && CLUSTER_STATE=${BASH_REMATCH[1]}
    [[ "$line" =~ ^Latest\ checkpoint\'s\ TimeLineID:\ +([0-9]+) ]] && CONTROL_TLI=${BASH_REMATCH[1]}
  done <<<"$out"
  [[ -n "$CLUSTER_STATE" ]]
}

has_data() { [[ -s "$PGDATA/PG_VERSION" ]]; }

# park: a start of this PostgreSQL, by anyone, is a start as a standby.
# (A shell redirection, no process: demote.sh must be quick. Written by
# root it belongs to root; PostgreSQL, which owns the directory, may still
# remove it when it is promoted.)
park() {
  has_data || return 0
  [[ -e "$PGDATA/standby.signal" ]] || : >>"$PGDATA/standby.signal"
}

# not_primary [WHAT]: when the node's record (PG_FOLLOW_STATE, "primary
# epoch=E ..." since promote.sh, or a copy of the leader's that pg_rewind
# or pg_basebackup brought) says primary, it says WHAT ("demoted" by
# default) instead. health.sh counts a PostgreSQL in recovery whose record
# says primary as unhealthy. Never fails: a record it cannot write keeps
# the node unhealthy until the next demote or follow, it does not stop a
# demote.
not_primary() {
  has_data || return 0
  local state=''
  if [[ -r "$PG_FOLLOW_STATE" ]]; then read -r state <"$PG_FOLLOW_STATE" || true; fi
  [[ "$state" == primary* ]] || return 0
  as_pg sh -c 'printf "%s\n" "$2" >"$1"' sh "$PG_FOLLOW_STATE" "${1:-demoted} epoch=${FAILOVERD_EPOCH:-}" || true
}

# set_conninfo [HOST PORT]: writes failoverd.conf: stream from HOST:PORT,
# or (no arguments) from nobody.
set_conninfo() {
  local ci=''
  if (($# == 2)); then
    ci="host=$1 port=$2 user=$PG_REPL_USER application_name=$PG_NAME connect_timeout=3"
  fi
  as_pg sh -c 'umask 077; printf "%s\n" "$2" "$3" >"$1.tmp" && mv "$1.tmp" "$1"' sh "$PG_HOOK_CONF" \
    "# Written by the failoverd hooks (examples/postgresql); do not edit." "primary_conninfo = '$ci'"
}

# lock_pg [-n]: takes the node's hook lock (flock on PGDATA.lock, beside
# the data directory) for the rest of this hook's run; -n: fail at once
# when another hook holds it. follow.sh holds it while it stops, rewinds,
# copies and starts; health.sh starts a stopped PostgreSQL only under it.
lock_pg() {
  exec {LOCK_FD}>>"${PGDATA%/}.lock" || return 1
  flock "$@" "$LOCK_FD"
}

# start_pg [WAIT_SECONDS]: pg_ctl start (as a standby: park first); with
# WAIT_SECONDS, wait until it accepts connections.
start_pg() {
  pm_pid && return 0
  park
  local -a w=(-W)
  [[ -n "${1:-}" ]] && w=(-w -t "$1")
  # pg_ctl makes the postmaster its own session: failoverd's kill of the
  # hook's process group does not reach it.
  # The postmaster must not inherit the hook lock's descriptor: it would
  # hold the lock for as long as it runs.
  if [[ -n "${LOCK_FD:-}" ]]; then
    as_pg "$PG_BINDIR/pg_ctl" start -D "$PGDATA" -l "$PG_LOG" "${w[@]}" \
      -o "-p $PG_PORT -c cluster_name=$PG_NAME $PG_START_OPTS" >/dev/null {LOCK_FD}>&-
  else
    as_pg "$PG_BINDIR/pg_ctl" start -D "$PGDATA" -l "$PG_LOG" "${w[@]}" \
      -o "-p $PG_PORT -c cluster_name=$PG_NAME $PG_START_OPTS" >/dev/null
  fi
}

# secs_ms SECONDS: sets MS to SECONDS (a decimal like 3 or 2.5) in
# milliseconds.
secs_ms() {
  local i=${1%.*} f=''
  [[ "$1" == *.* ]] && f=${1#*.}
  f="${f}000"
  MS=$((10#${i:-0} * 1000 + 10#${f:0:3}))
}

# stop_pg MILLISECONDS: stops the running PostgreSQL: a fast shutdown
# (clients cut off, a shutdown checkpoint) for up to MILLISECONDS, then an
# immediate one (SIGQUIT to the postmaster: no checkpoint, crash recovery at
# the next start). Sets STOPPED to fast, immediate or not-running; returns 1
# when it is still there.
stop_pg() {
  local deadline
  STOPPED=not-running
  pm_pid || return 0
  local pid=$PM_PID
  kill -INT "$pid" 2>/dev/null || true # SIGINT: a fast shutdown
  now_ms
  deadline=$((NOW_MS + $1))
  while kill -0 "$pid" 2>/dev/null && now_ms && ((NOW_MS < deadline)); do sleep 0.05; done
  STOPPED=fast
  kill -0 "$pid" 2>/dev/null || return 0
  STOPPED=immediate
  kill -QUIT "$pid" 2>/dev/null || true
  now_ms
  deadline=$((NOW_MS + 5000))
  while kill -0 "$pid" 2>/dev/null && now_ms && ((NOW_MS < deadline)); do sleep 0.02; done
  ! kill -0 "$pid" 2>/dev/null
}

# leader_info HOST PORT: LEADER_RECOVERY (t/f) and LEADER_TLI, the
# timeline the leader writes on.
leader_info() {
  sql "$1" "$2" "SELECT pg_is_in_recovery(), CASE WHEN pg_is_in_recovery() THEN 0 ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END" || return 1
  IFS='|' read -r LEADER_RECOVERY LEADER_TLI <<<"$SQL_OUT"
}

# split_addr HOST:PORT: sets HOST and PORT ("[v6]:port" allowed).
split_addr() {
  local a=$1
  PORT=${a##*:}
  HOST=${a%:*}
  HOST=${HOST#[}
  HOST=${HOST%]}
  [[ -n "$HOST" && "$PORT" =~ ^[0-9]+$ ]] || fail "bad address \"$a\" (want host:port)"
}

PSQL=${PSQL:-psql}
