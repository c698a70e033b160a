#!/usr/bin/env bash
# Renders the example cluster configs (node-a/b/c.yaml in this directory)
# into OUTDIR with real addresses and absolute script paths, for make demo,
# the integration tests and the chaos suite.
#
# Usage: render.sh OUTDIR
# Env (all optional):
#   ZK_SERVERS       comma-separated host:port list   (default 127.0.0.1:2181)
#   TOY_PORT_BASE    toy service of node N on base+N  (default 18080)
#   ADMIN_PORT_BASE  failoverd admin API on base+N    (default 19100)
#   SCRIPTS_DIR      hook scripts directory           (default ../scripts, absolute)
#   STATE_DIR        node.state_dir of every node      (default OUTDIR/state)
#   ETCD_ENDPOINTS   comma-separated etcd client URLs: run on etcd instead of
#                    ZooKeeper (the zookeeper block becomes an etcd block)
#   ETCD_LEASE_TTL   etcd.lease_ttl with ETCD_ENDPOINTS   (default 3s)
# Writes OUTDIR/node-{a,b,c}.yaml, OUTDIR/token (a fresh random admin token,
# mode 600, kept if it exists) and OUTDIR/toys.map ("node-id toy-url" lines,
# the format fence.sh also reads).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: render.sh OUTDIR}"
zk="${ZK_SERVERS:-127.0.0.1:2181}"
zk="${zk// /}"
toy_base="${TOY_PORT_BASE:-18080}"
admin_base="${ADMIN_PORT_BASE:-19100}"
scripts="${SCRIPTS_DIR:-$(cd "$here/../scripts" && pwd)}"

# shellcheck source=examples/lib/render.sh
source "$here/../lib/render.sh"

# Two steps through markers, so a new port can never match another pattern.
args=(-e "s|127\.0\.0\.1:2181|@ZK@|g" -e "s|\.\./scripts/|@SCRIPTS@/|g")
for i in 1 2 3; do
  args+=(-e "s|127\.0\.0\.1:1808$i|@TOY$i@|g" -e "s|127\.0\.0\.1:1910$i|@ADMIN$i@|g")
done
args+=(-e "s|@ZK@|$(esc "${zk//,/, }")|g" -e "s|@SCRIPTS@|$(esc "$scripts")|g")
for i in 1 2 3; do
  args+=(-e "s|@TOY$i@|127.0.0.1:$((toy_base + i))|g" -e "s|@ADMIN$i@|127.0.0.1:$((admin_base + i))|g")
done

if ((toy_base + 3 > admin_base && admin_base + 3 > toy_base)); then
  echo "render.sh: TOY_PORT_BASE $toy_base and ADMIN_PORT_BASE $admin_base overlap" >&2
  exit 2
fi

mkdir -p "$out"
state="${STATE_DIR:-$(cd "$out" && pwd)/state}"
args+=(-e "s|state_dir: /var/lib/failoverd|state_dir: $(esc "$state")|")
for n in a b c; do
  {
    echo "# Rendered by examples/cluster/render.sh from node-$n.yaml; edit the template."
    sed '1,/^$/d' "$here/node-$n.yaml" | sed "${args[@]}" | to_etcd 3s 'Whole seconds, at least 2s; 3s keeps the demo quick (validate warns' 'below the 5s etcd advises). The demote budget (1.1s) must fit.' # minus the template's header
  } >"$out/node-$n.yaml"
done
i=0
for n in a b c; do
  i=$((i + 1))
  echo "node-$n http://127.0.0.1:$((toy_base + i))"
done >"$out/toys.map"
if [[ ! -s "$out/token" ]]; then
  (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$out/token")
fi
echo "rendered $out/node-a.yaml node-b.yaml node-c.yaml ($(coordination_name), toy ports $((toy_base + 1))-$((toy_base + 3)), admin ports $((admin_base + 1))-$((admin_base + 3)))"
