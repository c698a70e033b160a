#!/usr/bin/env bash
# failoverd service.follow hook for PostgreSQL: makes this node's
# PostgreSQL a standby streaming from the promoted leader's PostgreSQL, on
# the leader's timeline. It succeeds only once that is seen, and writes
# failoverd.follow, which health.sh requires of a standby.
#
# Usage: follow.sh NODE_ENV_FILE
# From failoverd: FAILOVERD_LEADER_ID, FAILOVERD_LEADER_ADDRESS (the
#   leader's node.service_address: its PostgreSQL), FAILOVERD_LEADER_EPOCH,
#   FAILOVERD_NODE_ID, FAILOVERD_REASON.
#
# In order, each step only when the one before did not get there:
#   1. a running standby is re-pointed by a reload (primary_conninfo is
#      reloadable from PostgreSQL 13), and streams within PG_FOLLOW_WAIT s;
#   2. otherwise (a primary, a standby that diverged from the leader's
#      timeline, one that was not running) it is stopped, the leader is
#      checkpointed (pg_rewind needs the promotion on the source's control
#      file), standby.signal is removed for pg_rewind (whose crash
#      recovery refuses to run in standby mode) and put back at once,
#      pg_rewind runs, and PostgreSQL starts as a standby of the leader;
#   3. when pg_rewind fails while the leader answers, and only when
#      PG_ALLOW_RECLONE=yes, PGDATA is moved aside (PGDATA.reclone-TIME,
#      never deleted) and copied from the leader with pg_basebackup. A
#      leader that does not answer never leads to this: the hook fails and
#      failoverd retries it (1s doubling to 30s).
# An empty or missing PGDATA (a new node) is copied from the leader
# whatever PG_ALLOW_RECLONE says: nothing is moved away.
#
# With no leader (FAILOVERD_REASON=no_leader) it does what demote.sh does
# to a primary, and leaves a standby alone.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
case ${BASH_SOURCE[0]} in */*) . "${BASH_SOURCE[0]%/*}/lib.sh" ;; *) . ./lib.sh ;; esac

(($# == 1)) || usage "NODE_ENV_FILE"
load_env "$1"
leader=${FAILOVERD_LEADER_ID:-}
leader_addr=${FAILOVERD_LEADER_ADDRESS:-}
now_ms
start_ms=$NOW_MS
ev_add cluster "${FAILOVERD_CLUSTER:-}" node "${FAILOVERD_NODE_ID:-}" pg "$PG_HOST:$PG_PORT" \
  leader "$leader" leader_address "$leader_addr" leader_epoch "${FAILOVERD_LEADER_EPOCH:-}" \
  reason "${FAILOVERD_REASON:-}"

done_ok() {
  now_ms
  ev_add how "$1" rewound "${REWOUND:-no}" ms "$((NOW_MS - start_ms))"
  ok
}

# Nothing else stops, rewinds, copies or starts this PostgreSQL meanwhile.
lock_pg || fail "cannot lock ${PGDATA%/}.lock"

if [[ -z "$leader" ]]; then
  # No leader: nobody to follow, but nobody may write here either.
  if pm_pid && cluster_state && [[ "$CLUSTER_STATE" != *recovery* ]]; then
    park
    set_conninfo
    stop_pg 2000 || fail "PostgreSQL still runs after an immediate shutdown"
    start_pg || fail "pg_ctl start as a standby failed (see $PG_LOG)"
    done_ok "parked-$STOPPED"
  fi
  park
  if has_data && ! pm_pid; then
    start_pg || fail "pg_ctl start as a standby failed (see $PG_LOG)"
    done_ok started-standby
  fi
  done_ok already-standby
fi
[[ "$leader" != "${FAILOVERD_NODE_ID:-}" ]] || fail "the leader is this node ($leader): nothing to follow"
[[ -n "$leader_addr" ]] || fail "leader $leader has no node.service_address"
split_addr "$leader_addr"
lhost=$HOST lport=$PORT
[[ "$lhost:$lport" != "$PG_HOST:$PG_PORT" ]] || fail "the leader's address $leader_addr is this node's PostgreSQL"

leader_info "$lhost" "$lport" || fail "the leader does not answer: $SQL_ERR"
[[ "$LEADER_RECOVERY" == f ]] || fail "the leader's PostgreSQL $leader_addr is in recovery, not a primary"
tli=$LEADER_TLI
ev_add leader_timeline "$tli"

# streaming: this standby streams from the leader, on the leader's timeline
# (a standby that diverged shows status=streaming now and then, on its old
# timeline, until the leader refuses it: the timeline is the test).
streaming() {
  lsql "SELECT status, received_tli, sender_host, sender_port FROM pg_stat_wal_receiver" || return 1
  local st rt sh sp
  IFS='|' read -r st rt sh sp <<<"$SQL_OUT"
  [[ "$st" == streaming && "$rt" == "$tli" && "$sh" == "$lhost" && "$sp" == "$lport" ]]
}

# wait_streaming SECONDS
wait_streaming() {
  now_ms
  local until=$((NOW_MS + $1 * 1000))
  while now_ms && ((NOW_MS < until)); do
    streaming && return 0
    sleep 0.2
  done
  return 1
}

followed() {
  as_pg sh -c 'printf "%s\n" "$2" >"$1"' sh "$PG_FOLLOW_STATE" "leader=$leader epoch=${FAILOVERD_LEADER_EPOCH:-} address=$leader_addr timeline=$tli"
  done_ok "$1"
}

# start_following HOW: start as a standby of the leader, wait for streaming.
start_following() {
  set_conninfo "$lhost" "$lport"
  park
  # A rewind or a copy brought the leader's record ("primary ..."): this
  # node is a standby, which health.sh must not take for a restarted
  # primary.
  not_primary following
  if ! start_pg 60; then
    START_ERR="pg_ctl start as a standby failed: $(tail -n 3 "$PG_LOG" 2>/dev/null | tr '\n' ' ')"
    return 1
  fi
  START_ERR="not streaming from $leader_addr on timeline $tli within ${PG_FOLLOW_WAIT}s"
  wait_streaming "$PG_FOLLOW_WAIT" || return 1
  followed "$1"
}

# clone WHY: copies the leader into an empty PGDATA.
clone() {
  as_pg mkdir -p "$PGDATA"
  as_pg chmod 700 "$PGDATA"
  as_pg "$PG_BINDIR/pg_basebackup" -D "$PGDATA" -h "$lhost" -p "$lport" -U "$PG_REPL_USER" \
    -X stream -c fast --no-password >/dev/null 2>"$PGDATA.basebackup.err" || {
    local e
    e=$(tail -c 400 "$PGDATA.basebackup.err")
    # Never leave a partial copy that looks like data.
    as_pg find "$PGDATA" -mindepth 1 -delete 2>/dev/null || true
    fail "pg_basebackup from $leader_addr: $e"
  }
  as_pg rm -f "$PGDATA/postmaster.pid"
  REWOUND=$1
  start_following "cloned" || fail "cloned from $leader_addr, but $START_ERR"
}

if ! has_data; then
  # A new node, or one whose copy failed half-way.
  pm_pid && fail "PostgreSQL runs on $PGDATA, which has no PG_VERSION"
  clone new
fi

# 1. A running standby: re-point it with a reload.
if pm_pid && cluster_state && [[ "$CLUSTER_STATE" == *recovery* ]]; then
  if streaming; then
    followed already
  fi
  set_conninfo "$lhost" "$lport"
  lsql "SELECT pg_reload_conf()" || fail "reload: $SQL_ERR"
  if wait_streaming "$PG_FOLLOW_WAIT"; then
    followed reloaded
  fi
fi

# 2. Stop, rewind, start as a standby of the leader.
park
set_conninfo
stop_pg 5000 || fail "PostgreSQL still runs after an immediate shutdown"
# The leader's control file must show its promotion before pg_rewind can
# use it as a source.
sql "$lhost" "$lport" "CHECKPOINT" || fail "CHECKPOINT on the leader: $SQL_ERR"
# pg_rewind's crash recovery of an unclean target (postgres --single)
# refuses standby mode: no standby.signal while it runs. (A start by anyone
# else meanwhile fails: the single-user postgres holds postmaster.pid; a
# start through start.sh or the unit drop-in creates standby.signal first.)
rm -f "$PGDATA/standby.signal"
rewind_out=$(as_pg "$PG_BINDIR/pg_rewind" -D "$PGDATA" \
  --source-server="host=$lhost port=$lport user=$PG_SUPERUSER dbname=postgres connect_timeout=5" 2>&1) && rc=0 || rc=$?
park
# (pg_rewind copied the leader's files, its failoverd.follow too; followed()
# below writes this node's.)
if ((rc == 0)); then
  if [[ "$rewind_out" == *"no rewind required"* ]]; then REWOUND=no; else REWOUND=yes; fi
  PG_FOLLOW_WAIT=$((PG_FOLLOW_WAIT * 2))
  start_following rewind && true
  # pg_rewind did not repair it: only a copy does (step 3).
  rewind_err="pg_rewind ended (rewound=$REWOUND), but $START_ERR"
  stop_pg 5000 || fail "PostgreSQL still runs after an immediate shutdown"
else
  rewind_err=$(tail -c 600 <<<"$rewind_out")
fi

# 3. pg_rewind failed. Was it the leader?
if ! leader_info "$lhost" "$lport"; then
  fail "pg_rewind failed and the leader no longer answers (not re-cloning): ${rewind_err//$'\n'/ }"
fi
if [[ "$PG_ALLOW_RECLONE" != yes ]]; then
  fail "set PG_ALLOW_RECLONE=yes to let this hook copy the leader: ${rewind_err//$'\n'/ }"
fi
pm_pid && fail "PostgreSQL runs on $PGDATA (pid $PM_PID): not moving it aside"
aside="$PGDATA.reclone-$(date -u +%Y%m%dT%H%M%S)"
as_pg mv "$PGDATA" "$aside" || fail "cannot move $PGDATA aside"
echo "follow: ${rewind_err//$'\n'/ }; moved $PGDATA to $aside" >&2
ev_add moved_aside "$aside"
clone recloned
