#!/usr/bin/env bash
# failoverd shell fencing method for Redis: makes the OLD leader's Redis a
# read-only replica over the network, as demote.sh does locally (a primary
# is parked at $REDIS_PARK; a replica keeps its primary), and succeeds once
# ROLE says it is a replica.
#
# Usage: fence.sh [-t SECONDS] [NODE_ID=HOST:PORT...]
#   The pairs map failoverd node ids to their Redis. A node not in the list
#   is reached at FAILOVERD_TARGET_ADDRESS (the service_address the old
#   leader published), else at $FAILOVERD_TARGET_HOST:$REDIS_PORT when
#   REDIS_PORT is set.
# From failoverd: FAILOVERD_TARGET_ID, FAILOVERD_TARGET_HOST,
#   FAILOVERD_TARGET_ADDRESS, FAILOVERD_TARGET_EPOCH, FAILOVERD_CLUSTER,
#   FAILOVERD_NODE_ID.
# Optional: FAILOVERD_FENCE_FAIL_FILE (while that file exists, fail: tests
#   use it), and lib.sh's variables.
#
# A Redis that refuses the connection counts as fenced. DEMO ONLY: on one
# machine "connection refused" means the process is gone, and a restarted
# one comes back as a parked replica (see demote.sh). Across hosts a refused
# or silent port proves nothing (a firewall, a partition): put a method that
# really stops the old primary (power fencing, ssh kill_port) after this one
# and drop the refused rule, or keep Redis' port reachable only this way.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_timeout "$@"
shift "$SHIFT"
target=${FAILOVERD_TARGET_ID:-}
ev_add cluster "${FAILOVERD_CLUSTER:-}" node "${FAILOVERD_NODE_ID:-}" target "$target" \
  target_host "${FAILOVERD_TARGET_HOST:-}" target_epoch "${FAILOVERD_TARGET_EPOCH:-}"
[[ -n "$target" ]] || fail "FAILOVERD_TARGET_ID is not set"

addr=''
for pair in "$@"; do
  [[ "$pair" == *=* ]] || usage "[-t SECONDS] [NODE_ID=HOST:PORT...]"
  if [[ "${pair%%=*}" == "$target" ]]; then addr=${pair#*=}; fi
done
if [[ -z "$addr" ]]; then addr=${FAILOVERD_TARGET_ADDRESS:-}; fi
if [[ -z "$addr" && -n "${REDIS_PORT:-}" && -n "${FAILOVERD_TARGET_HOST:-}" ]]; then
  addr="$FAILOVERD_TARGET_HOST:$REDIS_PORT"
fi
[[ -n "$addr" ]] || fail "no Redis address for node $target (give $target=HOST:PORT, set its node.service_address, or set REDIS_PORT)"
ev_add redis "$addr"
if [[ -n "${FAILOVERD_FENCE_FAIL_FILE:-}" && -e "$FAILOVERD_FENCE_FAIL_FILE" ]]; then
  fail "$FAILOVERD_FENCE_FAIL_FILE exists"
fi

HOW=''
if ! make_replica "$addr"; then
  if ((RCLI_REFUSED)); then
    ev_add how refused
    ok
  fi
  fail "$RCLI_ERR"
fi
ev_add how "$HOW"
ok
