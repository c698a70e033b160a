#!/usr/bin/env bash
# Renders the example Redis cluster (node-a/b/c.yaml and redis-a/b/c.conf in
# this directory) into OUTDIR with real ports and absolute paths, for make
# demo-redis and the end-to-end tests.
#
# Usage: render.sh OUTDIR
# Env (all optional):
#   ZK_SERVERS       comma-separated host:port list   (default 127.0.0.1:2181)
#   ETCD_ENDPOINTS    comma-separated etcd client URLs: run on etcd instead of
#                     ZooKeeper (the zookeeper block becomes an etcd block)
#   ETCD_LEASE_TTL    etcd.lease_ttl with ETCD_ENDPOINTS   (7s)
#   STATE_DIR        node.state_dir of every node      (default OUTDIR/state)
#   REDIS_PORT_BASE  Redis of node N on base+N        (default 6380)
#   ADMIN_PORT_BASE  failoverd admin API on base+N    (default 19200)
#   HOOKS_DIR        hook scripts directory           (default ./hooks, absolute)
# Writes OUTDIR/node-{a,b,c}.yaml, OUTDIR/redis-{a,b,c}.conf, the Redis data
# directories OUTDIR/node-{a,b,c}/ and OUTDIR/token (a fresh random admin
# token, mode 600, kept if it exists).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=examples/lib/render.sh
source "$here/../lib/render.sh"
out="${1:?usage: render.sh OUTDIR}"
zk="${ZK_SERVERS:-127.0.0.1:2181}"
zk="${zk// /}"
redis_base="${REDIS_PORT_BASE:-6380}"
admin_base="${ADMIN_PORT_BASE:-19200}"
hooks="${HOOKS_DIR:-$here/hooks}"

if ((redis_base + 3 > admin_base && admin_base + 3 > redis_base)); then
  echo "render.sh: REDIS_PORT_BASE $redis_base and ADMIN_PORT_BASE $admin_base overlap" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
state="${STATE_DIR:-$out/state}"


# Two steps through markers, so a new port can never match another pattern.
args=(-e "s|127\.0\.0\.1:2181|@ZK@|g" -e "s|\[hooks/|[@HOOKS@/|g")
for i in 1 2 3; do
  args+=(-e "s|127\.0\.0\.1:638$i\b|@REDIS$i@|g" -e "s|-p, \"638$i\"|-p, \"@RPORT$i@\"|g" -e "s|127\.0\.0\.1:1920$i\b|@ADMIN$i@|g")
done
args+=(-e "s|@ZK@|$(esc "${zk//,/, }")|g" -e "s|@HOOKS@|$(esc "$hooks")|g")
args+=(-e "s|state_dir: /var/lib/failoverd|state_dir: $(esc "$state")|")
for i in 1 2 3; do
  args+=(-e "s|@REDIS$i@|127.0.0.1:$((redis_base + i))|g" -e "s|@RPORT$i@|$((redis_base + i))|g" -e "s|@ADMIN$i@|127.0.0.1:$((admin_base + i))|g")
done

i=0
for n in a b c; do
  i=$((i + 1))
  {
    echo "# Rendered by examples/redis/render.sh from node-$n.yaml; edit the template."
    sed '1,/^$/d' "$here/node-$n.yaml" | sed "${args[@]}" | to_etcd 7s "7s: the shortest lease that rides out an etcd leader election beside" "the 3s demote hook (failoverd validate warns below it; 5s is the least it accepts)" # minus the template's header
  } >"$out/node-$n.yaml"
  mkdir -p "$out/node-$n"
  {
    echo "# Rendered by examples/redis/render.sh from redis-$n.conf; edit the template."
    sed '1,/^$/d' "$here/redis-$n.conf" |
      sed -e "s|^port 638$i\$|port $((redis_base + i))|" -e "s|^dir \./node-$n\$|dir $(esc "$out/node-$n")|"
  } >"$out/redis-$n.conf"
done
if [[ ! -s "$out/token" ]]; then
  (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$out/token")
fi
echo "rendered $out/node-{a,b,c}.yaml and redis-{a,b,c}.conf ($(coordination_name)," \
  "Redis ports $((redis_base + 1))-$((redis_base + 3)), admin ports $((admin_base + 1))-$((admin_base + 3)))"
