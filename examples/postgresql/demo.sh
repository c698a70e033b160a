#!/usr/bin/env bash
# make demo-postgres: failoverd protecting a PostgreSQL primary and two
# streaming standbys on one machine, in a few minutes.
#
# Starts a local ZooKeeper, bootstraps one PostgreSQL (a parked standby)
# and a failoverd beside each of three nodes (cluster "pg", see
# examples/postgresql/README.md). failoverd elects a leader and promotes
# its PostgreSQL; the other two nodes' follow hooks copy it
# (pg_basebackup) and stream from it. The demo writes rows with
# synchronous replication, crashes the primary's node (SIGKILL to its
# PostgreSQL and its failoverd), and shows the successor fencing it and
# promoting, the other standby following the new primary, and every
# acknowledged row still there. Then the crashed node comes back as a
# standby (start.sh, what the unit drop-in does) and rejoins, with
# pg_rewind when its WAL diverged. Everything runs on 127.0.0.1 and is
# removed on exit or Ctrl-C.
#
# Exit 0 when all of that happened, 1 when not.
#
# Environment (all optional):
#   BACKEND            zookeeper (default) or etcd: the coordination service
#   ETCD_BIN           the etcd server with BACKEND=etcd (default: the one
#                      scripts/deps.sh builds, else /usr/bin/etcd)
#   ETCD_LEASE_TTL     etcd.lease_ttl with BACKEND=etcd   (7s)
#   DEMO_KEEP=1        keep the work directory
#   DEMO_PAUSE=1       wait for Enter between the steps
#   DEMO_SKIP_DEPS=1   do not run scripts/deps.sh
#   DEMO_FAILOVERD     a failoverd binary to use instead of building one
#   ZK_PORT, PG_PORT_BASE, ADMIN_PORT_BASE   ports (default: free ones)
#   ZOOKEEPER_JAR      the ZooKeeper server jar (/usr/share/java/zookeeper.jar)
#   GO                 the go command (go)
#   NO_COLOR           plain output
# shellcheck disable=SC2016
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=examples/lib/demo.sh
source "$ROOT/examples/lib/demo.sh"
GO="${GO:-go}"
KEEP="${DEMO_KEEP:-0}"
PAUSE="${DEMO_PAUSE:-0}"
ETCD_LEASE_TTL="${ETCD_LEASE_TTL:-7s}" # BACKEND=etcd: the example's lease_ttl
NODES=(node-a node-b node-c)
HOOKS="$ROOT/examples/postgresql/hooks"
ROWS=100

show_logs() {
  [[ -n "${WORK:-}" && -d "${WORK:-}" ]] || return 0
  local f
  for f in "$WORK"/events.log "$WORK"/node-*/failoverd.log "$WORK"/cluster/node-*/postgresql.log; do
    [[ -s "$f" ]] || continue
    printf '\n%s--- last lines of %s ---%s\n' "$DIM" "${f#"$WORK"/}" "$RESET"
    tail -n 15 "$f"
  done
}

WORK='' BUILD_TMP=''
declare -A FD_PID=()

pg_pids() {
  local n f pid
  for n in "${NODES[@]}"; do
    f="$WORK/cluster/$n/data/postmaster.pid"
    [[ -r "$f" ]] && read -r pid <"$f" && alive "$pid" && echo "$pid"
  done
  return 0
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  local fds=() pgs=() p
  [[ -n "$BUILD_TMP" ]] && rm -f "$BUILD_TMP"
  for p in "${FD_PID[@]}"; do alive "$p" && fds+=("$p"); done
  [[ -n "$WORK" ]] && mapfile -t pgs < <(pg_pids)
  if ((${#fds[@]} + ${#pgs[@]})) || alive "$ZK_PID"; then
    section "Cleaning up"
    ((${#fds[@]})) && stop TERM 20 "${fds[@]}" 2>/dev/null
    [[ -n "$WORK" ]] && mapfile -t pgs < <(pg_pids)
    ((${#pgs[@]})) && stop INT 10 "${pgs[@]}" 2>/dev/null
    stop_backend
    ok "stopped the failoverd daemons, the PostgreSQL servers and $COORD"
  fi
  if [[ -n "$WORK" && -d "$WORK" ]]; then
    if [[ "$KEEP" == 1 ]]; then
      ok "kept the work directory (DEMO_KEEP=1): $WORK"
    else
      rm -rf "$WORK"
      note "removed $WORK (DEMO_KEEP=1 keeps it)"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'printf "\n   interrupted\n"; exit 130' INT
trap 'exit 143' TERM

pick_ports() {
  local _ base p busy
  for _ in $(seq 1 50); do
    base=$((20000 + (RANDOM % 1000) * 10))
    busy=0
    for p in "$base" $(seq $((base + 11)) $((base + 13))) $(seq $((base + 21)) $((base + 23))); do
      if tcp_open "$p"; then busy=1 && break; fi
    done
    if ((!busy)); then
      ZK_PORT="${ZK_PORT:-$base}"
      PG_PORT_BASE="${PG_PORT_BASE:-$((base + 10))}"
      ADMIN_PORT_BASE="${ADMIN_PORT_BASE:-$((base + 20))}"
      return 0
    fi
  done
  die "no free loopback ports found (set ZK_PORT, PG_PORT_BASE, ADMIN_PORT_BASE)"
}

idx_of() {
  local i
  for i in 0 1 2; do [[ "${NODES[$i]}" == "$1" ]] && echo "$i" && return 0; done
  return 1
}
pg_port() { echo $((PG_PORT_BASE + $(idx_of "$1") + 1)); }
cfg_of() { echo "$WORK/cluster/$1.yaml"; }
env_of() { echo "$WORK/cluster/$1/pg.env"; }

# q NODE SQL: one query, unaligned, tuples only (5s at most).
q() { PGCONNECT_TIMEOUT=3 timeout -k 1 10 psql -X -q -A -t -h 127.0.0.1 -p "$(pg_port "$1")" -U postgres -d postgres -c "$2" 2>/dev/null; }

# role_of NODE: "primary", "standby PORT TLI" (streaming from PORT on
# timeline TLI), "standby" (not streaming) or "down".
role_of() {
  local r
  r=$(q "$1" "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby ' || coalesce((SELECT sender_port || ' ' || received_tli FROM pg_stat_wal_receiver WHERE status = 'streaming'), '') ELSE 'primary' END") || {
    echo down
    return 0
  }
  echo "${r% }"
}

timeline_of() { q "$1" "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"; }

print_roles() {
  local n r f
  for n in "${NODES[@]}"; do
    r=$(role_of "$n")
    read -r -a f <<<"$r"
    case "${f[0]}" in
      primary) printf '     %-7s 127.0.0.1:%s  %sprimary%s (timeline %s)\n' "$n" "$(pg_port "$n")" "$BOLD" "$RESET" "$(timeline_of "$n")" ;;
      standby) if ((${#f[@]} == 3)); then
        printf '     %-7s 127.0.0.1:%s  standby streaming from 127.0.0.1:%s on timeline %s\n' "$n" "$(pg_port "$n")" "${f[1]}" "${f[2]}"
      else printf '     %-7s 127.0.0.1:%s  standby, not streaming\n' "$n" "$(pg_port "$n")"; fi ;;
      *) printf '     %-7s 127.0.0.1:%s  %sdown%s\n' "$n" "$(pg_port "$n")" "$DIM" "$RESET" ;;
    esac
  done
}

status_rows() {
  local n
  for n in "${NODES[@]}"; do
    alive "${FD_PID[$n]:-}" || continue
    "$FAILOVERD" status -c "$(cfg_of "$n")" 2>/dev/null | awk '$1 ~ /^node-/ { print $1, $3, $5 }'
    return 0
  done
}

print_status() {
  local n
  for n in "${NODES[@]}"; do
    alive "${FD_PID[$n]:-}" || continue
    "$FAILOVERD" status -c "$(cfg_of "$n")" 2>&1 | indent
    return 0
  done
}

# wait_streaming LEADER SECONDS NODE...
wait_streaming() {
  local leader=$1 secs=$2 t0 n want pending
  shift 2
  t0=$(date +%s%N)
  while :; do
    want="standby $(pg_port "$leader") $(timeline_of "$leader")"
    pending=()
    for n in "$@"; do [[ "$(role_of "$n")" == "$want" ]] || pending+=("$n"); done
    ((${#pending[@]} == 0)) && return 0
    (($(ms_since "$t0") < secs * 1000)) || die "${pending[*]} do not stream from $leader within ${secs}s"
    sleep 0.3
  done
}

settled_leader() {
  local t0 node state cur=''
  t0=$(date +%s%N)
  until [[ -n "$cur" ]]; do
    (($(ms_since "$t0") < $1 * 1000)) || return 1
    while read -r node state _; do
      if [[ "$state" == leader && "$(role_of "$node")" == primary ]]; then cur=$node; fi
    done < <(status_rows || true)
    [[ -n "$cur" ]] || sleep 0.3
  done
  echo "$cur"
}

start_failoverd() {
  local n=$1
  mkdir -p "$WORK/$n"
  "$FAILOVERD" run -c "$(cfg_of "$n")" >>"$WORK/$n/failoverd.log" 2>&1 </dev/null &
  FD_PID[$n]=$!
}

count_rows() { q "$1" "SELECT count(*) FROM demo_rows" || echo '?'; }

printf '%sfailoverd + PostgreSQL demo%s: a primary and two streaming standbys, a failoverd beside each,\n' "$BOLD" "$RESET"
printf "one $COORD, and a primary that crashes. Everything runs on 127.0.0.1 and is removed at the end.\n"

section "Checking dependencies"
if [[ "${DEMO_SKIP_DEPS:-0}" != 1 ]]; then
  ./scripts/deps.sh 2>&1 | indent || note "scripts/deps.sh could not install everything (see above)"
fi
missing=()
[[ -n "${DEMO_FAILOVERD:-}" ]] || command -v "$GO" >/dev/null 2>&1 || missing+=("go ($GO)")
command -v psql >/dev/null 2>&1 || missing+=(psql)
compgen -G '/usr/lib/postgresql/*/bin/pg_rewind' >/dev/null || missing+=("PostgreSQL server (/usr/lib/postgresql/N/bin)")
if ((EUID == 0)); then id postgres >/dev/null 2>&1 || missing+=("the postgres user"); fi
need_backend
((${#missing[@]} == 0)) || die "missing: ${missing[*]}; run 'sudo make deps' (Debian packages zookeeper, default-jre-headless, postgresql)"
ok "go, $BACKEND_FOUND and $(psql --version) are here"

build_failoverd

WORK="$(mktemp -d "${TMPDIR:-/tmp}/failoverd-demo-postgres.XXXXXX")"
chmod 755 "$WORK" # PostgreSQL runs as postgres when we are root
export FAILOVERD_EVENTS_LOG="$WORK/events.log"
: >"$FAILOVERD_EVENTS_LOG"
chmod 666 "$FAILOVERD_EVENTS_LOG"
say "work directory: $WORK"
pause

section "Starting $COORD"
pick_ports
start_backend

section "Bootstrapping one PostgreSQL, and starting a failoverd beside each node"
env "${RENDER_ENV[@]}" PG_PORT_BASE="$PG_PORT_BASE" ADMIN_PORT_BASE="$ADMIN_PORT_BASE" \
  examples/postgresql/render.sh "$WORK/cluster" | indent
for n in "${NODES[@]}"; do
  out=$("$FAILOVERD" validate -c "$(cfg_of "$n")" 2>&1) || die "failoverd validate $n.yaml: $out"
done
ok "failoverd validate: all three configs ok"
examples/postgresql/bootstrap.sh "$(env_of node-a)" | indent
"$HOOKS/start.sh" "$(env_of node-a)" || die "starting node-a's PostgreSQL failed"
ok "node-a's PostgreSQL runs as a parked standby (standby.signal, streaming from nobody);"
say "node-b and node-c have no data directory yet: their follow hook will copy the leader."
print_roles
for n in "${NODES[@]}"; do start_failoverd "$n"; done
ok "failoverd run -c node-a.yaml / node-b.yaml / node-c.yaml"
pause

section "Waiting for the election, the promotion and two streaming standbys"
t0=$(date +%s%N)
leader=$(settled_leader 180) || die "no leader with a primary PostgreSQL within 180s"
standbys=()
for n in "${NODES[@]}"; do [[ "$n" == "$leader" ]] || standbys+=("$n"); done
wait_streaming "$leader" 240 "${standbys[@]}"
epoch=$(status_rows | awk -v n="$leader" '$1 == n { print $3 }')
ok "$leader leads at epoch $epoch; ${standbys[*]} stream from it ($(ms_since "$t0") ms)"
grep -E ' event=(promote|follow) ' "$FAILOVERD_EVENTS_LOG" | grep 'result=ok' | indent || true
print_roles
echo
say "${BOLD}failoverd status${RESET}"
print_status
pause

leader=$(settled_leader 60) || die "no leader"
section "Writing $ROWS rows to the primary ($leader), synchronous replication"
q "$leader" "CREATE TABLE IF NOT EXISTS demo_rows (id int PRIMARY KEY)" >/dev/null || die "CREATE TABLE on $leader failed"
for i in $(seq 1 "$ROWS"); do echo "INSERT INTO demo_rows VALUES ($i);"; done |
  PGCONNECT_TIMEOUT=3 timeout 60 psql -X -q -h 127.0.0.1 -p "$(pg_port "$leader")" -U postgres -d postgres -v ON_ERROR_STOP=1 >/dev/null ||
  die "writing to $leader failed"
ok "$ROWS rows committed; each commit waited for a standby (synchronous_standby_names = 'ANY 1 (node_a, node_b, node_c)')"
for n in "${standbys[@]}"; do
  r=$(PGCONNECT_TIMEOUT=3 psql -X -q -h 127.0.0.1 -p "$(pg_port "$n")" -U postgres -d postgres -c "INSERT INTO demo_rows VALUES (0)" 2>&1 || true)
  say "a write to the standby $n answers: ${r#*ERROR:  }"
done
pause

old=$leader old_epoch=$epoch
events_before=$(wc -l <"$FAILOVERD_EVENTS_LOG")
section "Crash: SIGKILL to $old's PostgreSQL and failoverd (the primary's host dies)"
kill_ns=$(date +%s%N)
pm=$(head -n 1 "$WORK/cluster/$old/data/postmaster.pid")
{ kill -KILL -- "-$pm" "${FD_PID[$old]}" && wait "${FD_PID[$old]}"; } 2>/dev/null || true
ok "killed PostgreSQL (process group $pm) and failoverd of $old"
say "$(expiry_note 6s)"

promote_line=''
while [[ -z "$promote_line" ]]; do
  (($(ms_since "$kill_ns") < 90000)) || die "no failover: nobody was promoted within 90s"
  sleep 0.2
  promote_line=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep ' event=promote ' | grep ' result=ok' | head -n 1 || true)
done
new=$(logfmt_get node "$promote_line")
new_epoch=$(logfmt_get epoch "$promote_line")
promote_ns=$(date -d "${promote_line%% *}" +%s%N 2>/dev/null || date +%s%N)
failover_ms=$(((promote_ns - kill_ns) / 1000000))
[[ "$new" != "$old" ]] || die "$old was promoted again"
((new_epoch > old_epoch)) || die "new epoch $new_epoch is not above the old epoch $old_epoch"

section "Fencing and promotion"
fence_ok=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep ' event=fence ' | grep " target=$old .*result=ok" | tail -n 1 || true)
[[ -n "$fence_ok" ]] || die "$old was not fenced"
say "The breadcrumb said $old led at epoch $old_epoch: before promoting, the winner fenced it"
say "(rpc: its failoverd is dead; then fence.sh: standby.signal in its data directory, and"
say " an immediate shutdown had it still been running):"
tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep -E ' event=(fence|promote) ' | indent || true
printf '   %s✓ New leader: %s at epoch %s%s (previous: %s at epoch %s)\n' "$BOLD$GREEN" "$new" "$new_epoch" "$RESET" "$old" "$old_epoch"
printf '   %s✓ Failover took %s ms%s from the SIGKILL to the promote hook finishing on %s\n' "$BOLD$GREEN" "$failover_ms" "$RESET" "$new"
cur=$(settled_leader 60) || die "no leader with a primary PostgreSQL after $new's promotion"
if [[ "$cur" != "$new" ]]; then
  note "  (the leadership has moved on to $cur since, on a busy host)"
  new=$cur
fi
survivors=()
for n in "${NODES[@]}"; do [[ "$n" == "$new" || "$n" == "$old" ]] || survivors+=("$n"); done
wait_streaming "$new" 120 "${survivors[@]}"
follow_line=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep ' event=follow ' |
  grep " node=${survivors[0]} .* leader=$new " | grep ' result=ok' | tail -n 1 || true)
ok "${survivors[0]} follows $new: its follow hook re-pointed it (how=$(logfmt_get how "$follow_line"))"
print_roles
for n in "$new" "${survivors[0]}"; do
  c=$(count_rows "$n")
  say "  $n: $c of $ROWS rows"
  [[ "$c" == "$ROWS" ]] || die "$n has $c of the $ROWS rows committed before the crash"
done
ok "every acknowledged write survived the failover"
pause

section "The crashed node comes back"
"$HOOKS/start.sh" "$(env_of "$old")" || die "starting $old's PostgreSQL failed"
r=$(role_of "$old")
say "$old's PostgreSQL starts through start.sh (what the systemd drop-in does at boot): $r,"
say "not a second primary, although it was the primary when it died."
[[ "$r" != primary ]] || die "$old came back as a primary"
back_ns=$(date +%s%N)
start_failoverd "$old"
say "failoverd on $old: its follow hook re-points it at $new, with pg_rewind if its WAL diverged."
wait_streaming "$new" 240 "$old"
rejoin=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep ' event=follow ' | grep " node=$old " | grep ' result=ok' | tail -n 1 || true)
c=$(count_rows "$old")
((c == ROWS)) || die "$old has $c of the $ROWS rows after rejoining"
ok "$old streams from $new $(ms_since "$back_ns") ms after its restart (how=$(logfmt_get how "$rejoin"), rewound=$(logfmt_get rewound "$rejoin")) and has all $ROWS rows"
print_roles
pause

elapsed=$(($(ms_since "$STARTED_NS") / 1000))
printf '\n%sDemo finished OK in %ss:%s %s crashed, %s fenced it and took over at epoch %s in %s ms;\n' \
  "$BOLD$GREEN" "$elapsed" "$RESET" "$old" "$new" "$new_epoch" "$failover_ms"
say "the other standby follows $new, the crashed node rejoined, and no acknowledged write was lost."
say "Next: examples/postgresql/README.md (the hooks, what they handle and what they leave to you)."
