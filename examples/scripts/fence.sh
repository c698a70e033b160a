#!/usr/bin/env bash
# failoverd shell fencing method for the example toy service: tells the old
# leader's toy service to stand down at the old leader's epoch
# (POST /demote?epoch=FAILOVERD_TARGET_EPOCH).
#
# Usage: fence.sh [flags] MAPFILE | NODE_ID=TOY_URL...
#   MAPFILE has lines "node-id toy-url"; or give the pairs as arguments:
#   command: [../scripts/fence.sh, node-a=http://127.0.0.1:18081, node-b=...]
#   flags: -timeout D (HTTP call, default 2s), -events FILE, -map FILE.
# From failoverd: FAILOVERD_TARGET_ID, FAILOVERD_TARGET_HOST,
#   FAILOVERD_TARGET_ADMIN_URL, FAILOVERD_TARGET_EPOCH, FAILOVERD_CLUSTER,
#   FAILOVERD_NODE_ID.
# Optional: FAILOVERD_EVENTS_LOG (append "TIME event=fence target=...
#   target_epoch=... how=... result=..." there); FAILOVERD_FENCE_FAIL_FILE
#   (while that file exists, fail: tests use it); TOYSERVICE (the binary).
#
# Exit 0 when the target's toy service answered and is standby (or already
# serves a newer epoch), OR when it refuses connections.
# DEMO ONLY: "connection refused" on one machine means the process is gone.
# Real fencing must prove the old primary cannot act (power it off, cut its
# storage); an unreachable host may just be partitioned away and still be
# writing, so never count "unreachable" as fenced in production.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

exec "$TOYSERVICE" hook fence "$@"
