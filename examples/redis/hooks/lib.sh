# shellcheck shell=bash
# The variables it sets are read by the hooks that source it:
# shellcheck disable=SC2034
# Sourced by the Redis hooks in this directory (promote.sh, demote.sh,
# fence.sh, follow.sh, health.sh). Every call to Redis goes through redis-cli
# under a hard timeout, and every hook appends one line per run to
# $FAILOVERD_EVENTS_LOG when that is set:
#
#   TIME event=NAME key=value ... result=ok|failed [err="..."]
#
# (TIME is RFC 3339 UTC with nanoseconds; one write(2) per line on an
# O_APPEND file, so the hooks of every node can share one log.)
#
# Environment (all optional):
#   REDIS_CLI       the redis-cli binary                      (redis-cli)
#   REDIS_TIMEOUT   seconds one redis-cli call may take (-t overrides); unset:
#                   no limit of its own, failoverd kills a hook that outlives
#                   its timeout (saves a process per call on a busy host)
#   REDIS_PARK      host:port a Redis that must not follow anyone replicates
#                   from; nothing may listen there           (127.0.0.1:1)
#   REDISCLI_AUTH   the Redis password (redis-cli reads it itself)
#   FAILOVERD_EVENTS_LOG  append the event line there

REDIS_CLI="${REDIS_CLI:-redis-cli}"
REDIS_TIMEOUT="${REDIS_TIMEOUT:-}"
REDIS_PARK="${REDIS_PARK:-127.0.0.1:1}"
# The key promote.sh stores the leadership's epoch in. Replicated like any
# key, so every replica knows the newest epoch it has seen.
EPOCH_KEY="failoverd:epoch"

HOOK="${0##*/}"
HOOK="${HOOK%.sh}"
EV_FIELDS=()

# ev_add KEY VALUE...: fields for the event line (empty values are left out).
ev_add() {
  while (($# >= 2)); do
    [[ -n "$2" ]] && EV_FIELDS+=("$1=$(ev_quote "$2")")
    shift 2
  done
}

ev_quote() {
  if [[ "$1" =~ [[:space:]\"=] ]]; then
    local v=${1//\\/\\\\}
    v=${v//\"/\\\"}
    v=${v//$'\n'/ }
    printf '"%s"' "$v"
  else
    printf '%s' "$1"
  fi
}

# ev_emit RESULT [ERR]: prints the event line and appends it to the log.
ev_emit() {
  local line
  local now=$EPOCHREALTIME ts # bash builtins only: no fork for the clock
  TZ=UTC0 printf -v ts '%(%Y-%m-%dT%H:%M:%S)T' "${now%.*}"
  line="$ts.${now#*.}Z event=$HOOK ${EV_FIELDS[*]} result=$1"
  [[ -n "${2:-}" ]] && line+=" err=$(ev_quote "$2")"
  printf '%s\n' "$line"
  if [[ -n "${FAILOVERD_EVENTS_LOG:-}" ]]; then
    printf '%s\n' "$line" >>"$FAILOVERD_EVENTS_LOG" || true
  fi
}

ok() {
  ev_emit ok
  exit 0
}

# fail MESSAGE: the hook failed; failoverd logs our output and acts on exit 1.
fail() {
  echo "$HOOK: $*" >&2
  ev_emit failed "$*"
  exit 1
}

usage() {
  echo "usage: $HOOK.sh $*" >&2
  exit 2
}

# parse_timeout "$@": handles a leading "-t SECONDS"; sets SHIFT to the
# number of arguments it used.
parse_timeout() {
  SHIFT=0
  if [[ "${1:-}" == -t ]]; then
    [[ -n "${2:-}" ]] || usage "-t needs seconds"
    REDIS_TIMEOUT=$2
    SHIFT=2
  fi
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

# rcli HOST:PORT ARGS...: runs one Redis command; the reply is in
# RCLI_OUT. Returns 0 only for a reply that is not an error; otherwise the
# reason is in RCLI_ERR, and RCLI_REFUSED=1 when nothing listens there.
# (Not meant for $(...): the variables would stay in the subshell.)
rcli() {
  local addr=$1 rc
  shift
  split_addr "$addr"
  RCLI_OUT='' RCLI_ERR='' RCLI_REFUSED=0
  # -e: an error reply exits 1. Its stderr only ever carries errors
  # (--no-auth-warning), so it joins stdout. redis-cli itself would wait
  # for a hung server forever: timeout bounds it when REDIS_TIMEOUT is set
  # (-k: SIGKILL if SIGTERM is not enough).
  local -a cmd=("$REDIS_CLI" -h "$HOST" -p "$PORT" -e --no-auth-warning "$@")
  [[ -z "$REDIS_TIMEOUT" ]] || cmd=(timeout -k 1 "$REDIS_TIMEOUT" "${cmd[@]}")
  RCLI_OUT=$("${cmd[@]}" 2>&1) && rc=0 || rc=$?
  ((rc != 0)) || return 0
  if ((rc == 124 || rc == 137)); then
    RCLI_ERR="no answer from $addr within ${REDIS_TIMEOUT}s"
  elif [[ "$RCLI_OUT" == *"Connection refused"* ]]; then
    RCLI_REFUSED=1
    RCLI_ERR="connection to $addr refused"
  else
    RCLI_ERR="$addr: $* answered: ${RCLI_OUT//$'\n'/ }"
  fi
  return 1
}

# read_role HOST:PORT: sets ROLE (master, slave, sentinel) and, for a
# replica, MASTER_HOST, MASTER_PORT and LINK (connect, connecting, sync,
# connected). Fails like rcli.
read_role() {
  rcli "$1" ROLE || return 1
  local -a f
  mapfile -t f <<<"$RCLI_OUT"
  ROLE=${f[0]:-} MASTER_HOST='' MASTER_PORT='' LINK=''
  if [[ "$ROLE" == slave ]]; then
    MASTER_HOST=${f[1]:-} MASTER_PORT=${f[2]:-} LINK=${f[3]:-}
  fi
  [[ -n "$ROLE" ]] || {
    RCLI_ERR="$1: empty ROLE reply"
    return 1
  }
}

# replicaof HOST:PORT TARGET_HOST:PORT: REPLICAOF TARGET on that Redis.
replicaof() {
  local addr=$1 th tp
  split_addr "$2"
  th=$HOST tp=$PORT
  rcli "$addr" REPLICAOF "$th" "$tp" || return 1
  # "OK", or "OK Already connected to specified master".
  [[ "$RCLI_OUT" == OK* ]] || {
    RCLI_ERR="$addr: REPLICAOF $2 answered: $RCLI_OUT"
    return 1
  }
}

# make_replica HOST:PORT: makes that Redis a read-only replica. A primary
# is parked (REPLICAOF $REDIS_PARK) until follow.sh points it at the
# leader; a replica keeps the primary it has (re-pointing it would only
# cost it a resync). Sets HOW to what it did. One redis-cli call for a
# replica, three for a primary: demote.sh must be quick on a busy host.
make_replica() {
  local addr=$1
  read_role "$addr" || return 1
  HOW=already-replica
  [[ "$ROLE" != slave ]] || return 0
  # Redis' default, set again in case someone turned it off: a replica
  # that accepts writes would be a second writer.
  rcli "$addr" CONFIG SET replica-read-only yes || return 1
  # An OK means the server is a replica now: it stops accepting writes
  # before it answers.
  replicaof "$addr" "$REDIS_PARK" || return 1
  HOW=parked
}

command -v "$REDIS_CLI" >/dev/null 2>&1 || {
  echo "$HOOK: $REDIS_CLI not found (Debian: apt-get install redis-tools; or set REDIS_CLI)" >&2
  exit 1
}
