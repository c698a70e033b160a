#!/usr/bin/env bash
# Renders the example PostgreSQL cluster (node-a/b/c.yaml in this directory)
# into OUTDIR with real ports and absolute paths, and writes each node's
# environment file, for make demo-postgres and the end-to-end tests.
#
# Usage: render.sh OUTDIR
# Env (all optional):
#   ZK_SERVERS        comma-separated host:port list     (127.0.0.1:2181)
#   ETCD_ENDPOINTS    comma-separated etcd client URLs: run on etcd instead of
#                     ZooKeeper (the zookeeper block becomes an etcd block)
#   ETCD_LEASE_TTL    etcd.lease_ttl with ETCD_ENDPOINTS   (7s)
#   STATE_DIR         node.state_dir of every node       (OUTDIR/state)
#   PG_PORT_BASE      PostgreSQL of node N on base+N     (5440)
#   ADMIN_PORT_BASE   failoverd admin API on base+N      (19300)
#   HOOKS_DIR         hook scripts directory             (./hooks, absolute)
#   PG_BINDIR         PostgreSQL's programs  (newest /usr/lib/postgresql/*/bin)
#   PG_OS_USER        the OS user PostgreSQL runs as     (postgres)
#   PG_ALLOW_RECLONE  written into every pg.env          (yes: it is a demo)
# Writes OUTDIR/node-{a,b,c}.yaml, OUTDIR/node-{a,b,c}/pg.env (PGDATA is
# OUTDIR/node-X/data, not created: bootstrap.sh makes the first one, the
# follow hook copies the others) and OUTDIR/token (a fresh random admin
# token, mode 600, kept if it exists). When run as root, the node
# directories belong to PG_OS_USER.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=examples/lib/render.sh
source "$here/../lib/render.sh"
out="${1:?usage: render.sh OUTDIR}"
zk="${ZK_SERVERS:-127.0.0.1:2181}"
zk="${zk// /}"
pg_base="${PG_PORT_BASE:-5440}"
admin_base="${ADMIN_PORT_BASE:-19300}"
hooks="${HOOKS_DIR:-$here/hooks}"
os_user="${PG_OS_USER:-postgres}"
if [[ -z "${PG_BINDIR:-}" ]]; then
  for d in /usr/lib/postgresql/*/bin; do [[ -x "$d/pg_ctl" ]] && PG_BINDIR=$d; done
fi
[[ -x "${PG_BINDIR:-}/pg_ctl" ]] || {
  echo "render.sh: no PostgreSQL programs (set PG_BINDIR; Debian: apt-get install postgresql)" >&2
  exit 1
}

if ((pg_base + 3 > admin_base && admin_base + 3 > pg_base)); then
  echo "render.sh: PG_PORT_BASE $pg_base and ADMIN_PORT_BASE $admin_base overlap" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
state="${STATE_DIR:-$out/state}"
# PostgreSQL's user must reach its node directory.
if ((EUID == 0)); then chmod go+x "$out"; fi


args=(-e "s|127\.0\.0\.1:2181|@ZK@|g" -e "s|\[hooks/|[@HOOKS@/|g" -e "s|\(node-[abc]\)/pg\.env|@OUT@/\1/pg.env|g")
for i in 1 2 3; do
  args+=(-e "s|127\.0\.0\.1:544$i\b|@PG$i@|g" -e "s|127\.0\.0\.1:1930$i\b|@ADMIN$i@|g")
done
args+=(-e "s|@ZK@|$(esc "${zk//,/, }")|g" -e "s|@HOOKS@|$(esc "$hooks")|g" -e "s|@OUT@|$(esc "$out")|g")
args+=(-e "s|state_dir: /var/lib/failoverd|state_dir: $(esc "$state")|")
for i in 1 2 3; do
  args+=(-e "s|@PG$i@|127.0.0.1:$((pg_base + i))|g" -e "s|@ADMIN$i@|127.0.0.1:$((admin_base + i))|g")
done

i=0
for n in a b c; do
  i=$((i + 1))
  {
    echo "# Rendered by examples/postgresql/render.sh from node-$n.yaml; edit the template."
    sed '1,/^$/d' "$here/node-$n.yaml" | sed "${args[@]}" | to_etcd 7s "7s: the shortest lease that rides out an etcd leader election beside" "the 3s demote hook (failoverd validate warns below it; 5s is the least it accepts)"
  } >"$out/node-$n.yaml"
  mkdir -p "$out/node-$n"
  cat >"$out/node-$n/pg.env" <<ENV
# node-$n's PostgreSQL, for the hooks in $hooks (see lib.sh there).
PGDATA=$out/node-$n/data
PG_HOST=127.0.0.1
PG_PORT=$((pg_base + i))
PG_NAME=node_$n
PG_BINDIR=$PG_BINDIR
PG_OS_USER=$os_user
PG_LOG=$out/node-$n/postgresql.log
# Unix sockets in the node's directory: several servers share this host.
PG_START_OPTS="-k $out/node-$n"
PG_ALLOW_RECLONE=${PG_ALLOW_RECLONE:-yes}
ENV
  if ((EUID == 0)); then chown "$os_user:" "$out/node-$n"; fi
done
if [[ ! -s "$out/token" ]]; then
  (umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$out/token")
fi
echo "rendered $out/node-{a,b,c}.yaml and node-{a,b,c}/pg.env ($(coordination_name)," \
  "PostgreSQL ports $((pg_base + 1))-$((pg_base + 3)), admin ports $((admin_base + 1))-$((admin_base + 3)))"
