# Shared by the examples' render.sh (examples/cluster, examples/redis,
# examples/postgresql), sourced after `set -euo pipefail`.
# shellcheck shell=bash

# esc VALUE: VALUE escaped for the right-hand side of a sed s|||.
esc() { printf '%s' "$1" | sed -e 's/[|&\\]/\\&/g'; }

# to_etcd DEFAULT_TTL NOTE...: a filter. With ETCD_ENDPOINTS (comma-separated
# etcd client URLs) set, the config on stdin with its zookeeper block (up
# to the blank line after it) replaced by the coordination and etcd blocks:
# lease_ttl is ETCD_LEASE_TTL, else DEFAULT_TTL, with each NOTE as a
# comment line above it. Without ETCD_ENDPOINTS, the config as it is.
to_etcd() {
  local ttl="${ETCD_LEASE_TTL:-$1}" eps="${ETCD_ENDPOINTS:-}" note
  shift
  eps="${eps// /}"
  if [[ -z "$eps" ]]; then
    cat
    return
  fi
  note=$(printf '  # %s\n' "$@")
  awk -v eps="${eps//,/, }" -v ttl="$ttl" -v note="$note" '
    /^zookeeper:/ {
      print "coordination:\n  backend: etcd\n\netcd:\n  endpoints: [" eps "]\n  prefix: /failoverd"
      if (note != "") print note
      print "  lease_ttl: " ttl
      skip = 1
      next
    }
    skip && /^$/ { skip = 0 }
    !skip
  '
}

# coordination_name: how render.sh names the backend it rendered for.
coordination_name() {
  if [[ -n "${ETCD_ENDPOINTS:-}" ]]; then
    echo "etcd ${ETCD_ENDPOINTS// /}"
  else
    echo "zookeeper ${ZK_SERVERS:-127.0.0.1:2181}"
  fi
}
