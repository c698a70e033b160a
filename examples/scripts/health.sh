#!/usr/bin/env bash
# Health check of the example toy service, for health.exec in failoverd's
# config (the example configs use health.http on /health instead).
#
# Usage: health.sh [TOY_URL [toyservice-hook-flags...]]    (TOY_URL default $TOY_URL)
# Exit 0 when GET /health answers 200.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

toy="${1:-${TOY_URL:-}}"
if (($#)); then shift; fi
exec "$TOYSERVICE" hook health -toy "$toy" "$@"
