#!/usr/bin/env bash
# failoverd service.promote hook for the example toy service: makes it
# primary with the fencing token failoverd hands over.
#
# Usage: promote.sh [TOY_URL [toyservice-hook-flags...]]   (TOY_URL default $TOY_URL)
#   e.g. command: [../scripts/promote.sh, http://127.0.0.1:18081, -timeout, 4s]
# From failoverd: FAILOVERD_EPOCH (required), FAILOVERD_CLUSTER,
#   FAILOVERD_NODE_ID, FAILOVERD_REASON, FAILOVERD_PREVIOUS_LEADER,
#   FAILOVERD_PREVIOUS_EPOCH.
# Optional: FAILOVERD_EVENTS_LOG (append "TIME event=promote ..." there),
#   TOYSERVICE (the binary).
# Exit 0 once the toy service is primary at FAILOVERD_EPOCH; it refuses
# (exit 1) an epoch older than one it has seen.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

toy="${1:-${TOY_URL:-}}"
if (($#)); then shift; fi
exec "$TOYSERVICE" hook promote -toy "$toy" "$@"
