# shellcheck shell=bash
# Sourced by the hook scripts in this directory: sets TOYSERVICE to the
# toyservice binary that does the real work. Looked up as: $TOYSERVICE if
# set, else toyservice on $PATH, else bin/toyservice at the repository root
# (go build -o bin/toyservice ./examples/toyservice).

if [[ -z "${TOYSERVICE:-}" ]]; then
  if command -v toyservice >/dev/null 2>&1; then
    TOYSERVICE="$(command -v toyservice)"
  else
    TOYSERVICE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bin/toyservice"
  fi
fi
if ! command -v "$TOYSERVICE" >/dev/null 2>&1; then
  echo "${0##*/}: toyservice binary not found at $TOYSERVICE;" \
    "set TOYSERVICE, put it on PATH, or run: go build -o bin/toyservice ./examples/toyservice" >&2
  exit 1
fi
