#!/usr/bin/env bash
# failoverd service.demote hook for Redis: makes this node's Redis a
# read-only replica. A primary is parked (REPLICAOF $REDIS_PARK, an address
# where nothing listens) until the follow hook points it at the new leader;
# a replica keeps the primary it follows.
#
# Usage: demote.sh [-t SECONDS] HOST:PORT      (this node's Redis)
# From failoverd: FAILOVERD_NODE_ID, FAILOVERD_EPOCH, FAILOVERD_REASON.
#
# Runs at every start of failoverd and within service.demote.timeout, so
# keep -t below that timeout. A Redis that refuses the connection is not
# running: that counts as demoted, because the shipped redis-*.conf make a
# (re)started Redis a parked replica (replicaof 127.0.0.1 1); only
# promote.sh ever makes it a primary, and nothing writes REPLICAOF NO ONE
# back into its config file.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_timeout "$@"
shift "$SHIFT"
(($# == 1)) || usage "[-t SECONDS] HOST:PORT"
addr=$1
ev_add cluster "${FAILOVERD_CLUSTER:-}" node "${FAILOVERD_NODE_ID:-}" redis "$addr" \
  epoch "${FAILOVERD_EPOCH:-}" reason "${FAILOVERD_REASON:-}"

HOW=''
if ! make_replica "$addr"; then
  if ((RCLI_REFUSED)); then
    ev_add how not-running
    ok
  fi
  fail "$RCLI_ERR"
fi
ev_add how "$HOW"
ok
