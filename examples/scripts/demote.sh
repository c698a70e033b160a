#!/usr/bin/env bash
# failoverd service.demote hook for the example toy service: makes it
# standby. Must finish within service.demote.timeout, so the examples pass
# a shorter -timeout to the HTTP call.
#
# Usage: demote.sh [TOY_URL [toyservice-hook-flags...]]    (TOY_URL default $TOY_URL)
#   e.g. command: [../scripts/demote.sh, http://127.0.0.1:18081, -timeout, 500ms]
# From failoverd: FAILOVERD_CLUSTER, FAILOVERD_NODE_ID, FAILOVERD_EPOCH,
#   FAILOVERD_REASON (logged).
# Optional: FAILOVERD_EVENTS_LOG (append "TIME event=demote ..." there),
#   TOYSERVICE (the binary).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

toy="${1:-${TOY_URL:-}}"
if (($#)); then shift; fi
exec "$TOYSERVICE" hook demote -toy "$toy" "$@"
