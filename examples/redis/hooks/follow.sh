#!/usr/bin/env bash
# failoverd service.follow hook for Redis: makes this node's Redis a
# read-only replica of the promoted leader's Redis
# (REPLICAOF <FAILOVERD_LEADER_ADDRESS>).
#
# Usage: follow.sh [-t SECONDS] HOST:PORT      (this node's Redis)
# From failoverd: FAILOVERD_LEADER_ID, FAILOVERD_LEADER_ADDRESS (the
#   leader's node.service_address), FAILOVERD_LEADER_HOST,
#   FAILOVERD_LEADER_EPOCH, FAILOVERD_NODE_ID, FAILOVERD_REASON (startup,
#   leader_changed, demoted, recovered, no_leader).
#
# failoverd runs it only on nodes that are not the leader, only towards a
# leader whose promotion completed, never beside promote or demote, and
# retries it until it succeeds. With no leader (REASON=no_leader, every
# LEADER_* empty) it makes sure the Redis is a read-only replica, as
# demote.sh does. Idempotent: a replica of the right primary is left alone.
# A leader without a service_address is followed at
# FAILOVERD_LEADER_HOST:$REDIS_PORT when REDIS_PORT is set.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_timeout "$@"
shift "$SHIFT"
(($# == 1)) || usage "[-t SECONDS] HOST:PORT"
addr=$1
leader=${FAILOVERD_LEADER_ID:-}
leader_addr=${FAILOVERD_LEADER_ADDRESS:-}
if [[ -n "$leader" && -z "$leader_addr" && -n "${REDIS_PORT:-}" && -n "${FAILOVERD_LEADER_HOST:-}" ]]; then
  leader_addr="$FAILOVERD_LEADER_HOST:$REDIS_PORT"
fi
ev_add cluster "${FAILOVERD_CLUSTER:-}" node "${FAILOVERD_NODE_ID:-}" redis "$addr" \
  leader "$leader" leader_address "$leader_addr" leader_epoch "${FAILOVERD_LEADER_EPOCH:-}" \
  reason "${FAILOVERD_REASON:-}"

if [[ -z "$leader" ]]; then
  # No leader: nobody to follow, but nobody may write here either.
  HOW=''
  make_replica "$addr" || fail "$RCLI_ERR"
  ev_add how "$HOW"
  ok
fi
[[ "$leader" != "${FAILOVERD_NODE_ID:-}" ]] || fail "the leader is this node ($leader): nothing to follow"
[[ -n "$leader_addr" ]] || fail "leader $leader has no node.service_address (set it, or REDIS_PORT)"
split_addr "$leader_addr"
lhost=$HOST lport=$PORT
[[ "$leader_addr" != "$addr" ]] || fail "the leader's address $leader_addr is this node's Redis"

read_role "$addr" || fail "$RCLI_ERR"
if [[ "$ROLE" == slave && "$MASTER_HOST" == "$lhost" && "$MASTER_PORT" == "$lport" ]]; then
  ev_add how already link "$LINK"
  ok
fi
replicaof "$addr" "$leader_addr" || fail "$RCLI_ERR"
rcli "$addr" CONFIG SET replica-read-only yes || fail "$RCLI_ERR"
read_role "$addr" || fail "$RCLI_ERR"
[[ "$ROLE" == slave && "$MASTER_HOST" == "$lhost" && "$MASTER_PORT" == "$lport" ]] ||
  fail "$addr reports $ROLE ${MASTER_HOST:-}:${MASTER_PORT:-} after REPLICAOF $leader_addr"
ev_add how repointed link "$LINK"
ok
