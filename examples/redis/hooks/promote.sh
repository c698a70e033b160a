#!/usr/bin/env bash
# failoverd service.promote hook for Redis: makes this node's Redis the
# primary (REPLICAOF NO ONE) and stores the leadership's epoch in the key
# failoverd:epoch, which replicates to every replica.
#
# Usage: promote.sh [-t SECONDS] HOST:PORT      (this node's Redis)
# From failoverd: FAILOVERD_EPOCH (required), FAILOVERD_NODE_ID,
#   FAILOVERD_CLUSTER, FAILOVERD_REASON, FAILOVERD_PREVIOUS_LEADER,
#   FAILOVERD_PREVIOUS_EPOCH. See lib.sh for the optional variables.
#
# Idempotent: run again at the same epoch it changes nothing. It refuses
# (exit 1, before touching the role) an epoch lower than the one this Redis
# already holds in failoverd:epoch: failoverd's epochs only grow, so a lower
# one is a stale leadership, and that Redis has followed a newer primary.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_timeout "$@"
shift "$SHIFT"
(($# == 1)) || usage "[-t SECONDS] HOST:PORT"
addr=$1
epoch=${FAILOVERD_EPOCH:-}
ev_add cluster "${FAILOVERD_CLUSTER:-}" node "${FAILOVERD_NODE_ID:-}" redis "$addr" epoch "$epoch" \
  prev "${FAILOVERD_PREVIOUS_LEADER:-}" prev_epoch "${FAILOVERD_PREVIOUS_EPOCH:-}" reason "${FAILOVERD_REASON:-}"
[[ "$epoch" =~ ^[0-9]+$ ]] || fail "FAILOVERD_EPOCH \"$epoch\" is not a number"

rcli "$addr" GET "$EPOCH_KEY" || fail "reading $EPOCH_KEY: $RCLI_ERR"
seen=$RCLI_OUT
if [[ -n "$seen" ]]; then
  [[ "$seen" =~ ^[0-9]+$ ]] || fail "$EPOCH_KEY holds \"$seen\", not an epoch"
  ((seen <= epoch)) || fail "stale epoch $epoch: this Redis has seen epoch $seen"
fi

rcli "$addr" REPLICAOF NO ONE || fail "REPLICAOF NO ONE: $RCLI_ERR"
[[ "$RCLI_OUT" == OK* ]] || fail "REPLICAOF NO ONE answered: $RCLI_OUT"
rcli "$addr" SET "$EPOCH_KEY" "$epoch" || fail "storing the epoch: $RCLI_ERR"
ok
