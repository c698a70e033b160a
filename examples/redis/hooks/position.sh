#!/usr/bin/env bash
# failoverd service.position command for Redis: prints how much of the
# primary's replication stream this node's Redis holds, the
# master_repl_offset field of INFO replication, and nothing else.
#
# Usage: position.sh [-t SECONDS] HOST:PORT      (this node's Redis)
#
# Why master_repl_offset, on every role: on a primary it is the offset of
# the replication stream it produced; on a replica it is the offset of the
# stream it received from its primary and applied (a replica feeds the
# same stream on to its own backlog and replicas, so the number is the
# primary's numbering), and it carries over when the replica is promoted
# (PSYNC2: the new primary continues from it). So one number compares a
# dead primary's last published position with its replicas'. The other
# fields do not: slave_repl_offset exists only on a replica (and is -1
# when it has no primary, not even a cached one), and
# slave_read_repl_offset (Redis 7) counts bytes read but not yet applied.
# A replica cut off from its primary keeps its offset: it falls behind as
# the primary writes on, which is what election.max_lag measures. Redis
# counts only while it keeps a replication backlog: a primary from its
# first replica on, until repl-backlog-ttl (default 1h) passed without any
# replica; a primary that never had one prints 0 however much it writes.
#
# failoverd runs it every service.position.interval on every node and
# kills it at its timeout: keep -t below that. Anything but the number on
# stdout (an error, no answer) makes the position unknown, so errors go to
# stderr, and no event line is written (it runs every interval).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

parse_timeout "$@"
shift "$SHIFT"
(($# == 1)) || usage "[-t SECONDS] HOST:PORT"
addr=$1

if ! rcli "$addr" INFO replication; then
  echo "position: $RCLI_ERR" >&2
  exit 1
fi
offset=''
while IFS=: read -r key value; do
  [[ "$key" == master_repl_offset ]] && offset=${value%$'\r'}
done <<<"$RCLI_OUT"
if [[ ! "$offset" =~ ^[0-9]+$ ]]; then
  echo "position: $addr: no master_repl_offset in INFO replication (got \"$offset\")" >&2
  exit 1
fi
printf '%s\n' "$offset"
