#!/usr/bin/env bash
# make demo-redis: failoverd protecting a Redis primary/replica set on one
# machine, in about a minute.
#
# Starts a local ZooKeeper, three redis-server processes and a failoverd
# beside each (cluster "redis", see examples/redis/README.md), waits for a
# primary with two replicas following it, writes data to the primary, then
# crashes the primary's node (SIGKILL to its Redis and its failoverd) and
# shows the successor fencing it, promoting its own Redis, the surviving
# replica following the new primary, and the data written before the crash
# still there. Then it restarts the crashed node, which comes back as a
# read-only replica of the new primary. Everything runs on 127.0.0.1 and is
# stopped and removed on exit or Ctrl-C.
#
# Exit 0 when all of that happened, 1 when not (or the set-up failed).
#
# Environment (all optional):
#   BACKEND            zookeeper (default) or etcd: the coordination service
#   ETCD_BIN           the etcd server with BACKEND=etcd (default: the one
#                      scripts/deps.sh builds, else /usr/bin/etcd)
#   ETCD_LEASE_TTL     etcd.lease_ttl with BACKEND=etcd   (7s)
#   DEMO_KILL=node     what crashes: node (Redis + failoverd, default),
#                      daemon (only failoverd: its Redis still runs as
#                      primary and must be fenced over the network), or
#                      redis (only Redis: the leader turns unhealthy)
#   DEMO_KEEP=1        keep the work directory (configs, logs, events log)
#   DEMO_PAUSE=1       wait for Enter between the steps
#   DEMO_SKIP_DEPS=1   do not run scripts/deps.sh
#   DEMO_FAILOVERD     a failoverd binary to use instead of building bin/failoverd
#   ZK_PORT            ZooKeeper client port              (default: a free port)
#   REDIS_PORT_BASE    Redis of node N on BASE+N          (free ports)
#   ADMIN_PORT_BASE    failoverd admin APIs on BASE+N     (free ports)
#   ZOOKEEPER_JAR      the ZooKeeper server jar  (/usr/share/java/zookeeper.jar)
#   GO                 the go command (go)
#   NO_COLOR           plain output even on a terminal
#
# The bash -c '...' snippets below expand their own positional arguments:
# shellcheck disable=SC2016
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
# shellcheck source=examples/lib/demo.sh
source "$ROOT/examples/lib/demo.sh"
GO="${GO:-go}"
KEEP="${DEMO_KEEP:-0}"
PAUSE="${DEMO_PAUSE:-0}"
KILL="${DEMO_KILL:-node}"
ETCD_LEASE_TTL="${ETCD_LEASE_TTL:-7s}" # BACKEND=etcd: the example's lease_ttl
NODES=(node-a node-b node-c)
KEYS=100 # keys written before the crash

case "$KILL" in node | daemon | redis) ;; *)
  echo "DEMO_KILL must be node, daemon or redis (not $KILL)" >&2
  exit 2
  ;;
esac

# ---------------------------------------------------------------- output ---


show_logs() {
  [[ -n "${WORK:-}" && -d "${WORK:-}" ]] || return 0
  local f
  for f in $(backend_logs) "$WORK"/events.log "$WORK"/node-*/failoverd.log "$WORK"/node-*/redis.log; do
    [[ -s "$f" ]] || continue
    printf '\n%s--- last lines of %s ---%s\n' "$DIM" "${f#"$WORK"/}" "$RESET"
    tail -n 15 "$f"
  done
}

# ------------------------------------------------------------- processes ---

WORK='' BUILD_TMP=''
declare -A FD_PID=() REDIS_PID=()



cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  local fds=() reds=() p
  [[ -n "$BUILD_TMP" ]] && rm -f "$BUILD_TMP"
  for p in "${FD_PID[@]}"; do alive "$p" && fds+=("$p"); done
  for p in "${REDIS_PID[@]}"; do alive "$p" && reds+=("$p"); done
  if ((${#fds[@]} + ${#reds[@]})) || alive "$ZK_PID"; then
    section "Cleaning up"
    # failoverd first, while the backend and Redis are still up: SIGTERM
    # makes a leader demote its Redis and delete its breadcrumb.
    ((${#fds[@]})) && stop TERM 12 "${fds[@]}" 2>/dev/null
    ((${#reds[@]})) && stop TERM 5 "${reds[@]}" 2>/dev/null
    stop_backend
    ok "stopped the failoverd daemons, the Redis servers and $COORD"
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

# --------------------------------------------------------------- helpers ---

# tcp_open PORT: something accepts connections on 127.0.0.1:PORT.

# logfmt_get KEY LINE: the value of KEY=... in a hook event line.

# json_get KEY: the value of "KEY" in the flat JSON object on stdin.

# json_str KEY: the string value of "KEY" on stdin, escaped quotes allowed.

# pick_ports: a random base with BASE..BASE+23 free (ZooKeeper on BASE,
# Redis on BASE+11.., admin APIs on BASE+21..), below the kernel's
# ephemeral range so the kernel does not hand them out meanwhile.
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
      REDIS_PORT_BASE="${REDIS_PORT_BASE:-$((base + 10))}"
      ADMIN_PORT_BASE="${ADMIN_PORT_BASE:-$((base + 20))}"
      return 0
    fi
  done
  die "no free loopback ports found (set ZK_PORT, REDIS_PORT_BASE, ADMIN_PORT_BASE)"
}

idx_of() { # node-b -> 1
  local i
  for i in 0 1 2; do [[ "${NODES[$i]}" == "$1" ]] && echo "$i" && return 0; done
  return 1
}
redis_port() { echo $((REDIS_PORT_BASE + $(idx_of "$1") + 1)); }
cfg_of() { echo "$WORK/cluster/$1.yaml"; }

# rc NODE ARGS...: redis-cli against that node's Redis (2s at most).
rc() {
  local n=$1
  shift
  timeout -k 1 2 redis-cli -h 127.0.0.1 -p "$(redis_port "$n")" "$@"
}

# role_of NODE: "master", "slave PORT LINK" (the port it replicates from and
# its link state), or "down".
role_of() {
  local out
  out=$(rc "$1" ROLE 2>/dev/null) || {
    echo down
    return 0
  }
  local -a f
  mapfile -t f <<<"$out"
  case "${f[0]:-}" in
    master) echo master ;;
    slave) echo "slave ${f[2]:-} ${f[3]:-}" ;;
    *) echo down ;;
  esac
}

# print_roles: every Redis' ROLE, one line per node.
print_roles() {
  local n r f
  for n in "${NODES[@]}"; do
    r=$(role_of "$n")
    read -r -a f <<<"$r"
    case "${f[0]}" in
      master) printf '     %-7s 127.0.0.1:%s  %sprimary%s\n' "$n" "$(redis_port "$n")" "$BOLD" "$RESET" ;;
      slave) printf '     %-7s 127.0.0.1:%s  replica of 127.0.0.1:%s (%s)%s\n' "$n" "$(redis_port "$n")" "${f[1]}" "${f[2]}" \
        "$([[ "${f[1]}" == 1 ]] && echo ', parked: follows nobody yet')" ;;
      *) printf '     %-7s 127.0.0.1:%s  %sdown%s\n' "$n" "$(redis_port "$n")" "$DIM" "$RESET" ;;
    esac
  done
}

# status_rows: "node state epoch" for every member, from failoverd status.
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

# print_leader: what `failoverd leader` answers, when this build has it.
print_leader() {
  local n out
  "$FAILOVERD" leader --help >/dev/null 2>&1 || return 0
  for n in "${NODES[@]}"; do
    alive "${FD_PID[$n]:-}" || continue
    out=$("$FAILOVERD" leader -c "$(cfg_of "$n")" 2>&1) || true
    say "${BOLD}failoverd leader${RESET} (what clients and tools ask):"
    printf '%s\n' "$out" | indent
    return 0
  done
}

# wait_following LEADER SECONDS NODE...: until every NODE's Redis is a
# replica of LEADER's with its link up.
wait_following() {
  local leader=$1 secs=$2 t0 n want pending
  shift 2
  want="slave $(redis_port "$leader") connected"
  t0=$(date +%s%N)
  while :; do
    pending=()
    for n in "$@"; do [[ "$(role_of "$n")" == "$want" ]] || pending+=("$n"); done
    ((${#pending[@]} == 0)) && return 0
    (($(ms_since "$t0") < secs * 1000)) || die "${pending[*]} did not follow $leader within ${secs}s"
    sleep 0.1
  done
}

# settled_leader SECONDS: the node that leads with its Redis a primary.
settled_leader() {
  local t0 node state cur=''
  t0=$(date +%s%N)
  until [[ -n "$cur" ]]; do
    (($(ms_since "$t0") < $1 * 1000)) || return 1
    while read -r node state _; do
      if [[ "$state" == leader && "$(role_of "$node")" == master ]]; then cur=$node; fi
    done < <(status_rows || true)
    [[ -n "$cur" ]] || sleep 0.2
  done
  echo "$cur"
}

start_redis() {
  local n=$1
  redis-server "$WORK/cluster/redis-${n#node-}.conf" >>"$WORK/$n/redis.log" 2>&1 </dev/null &
  REDIS_PID[$n]=$!
  local t0
  t0=$(date +%s%N)
  until [[ "$(rc "$n" PING 2>/dev/null)" == PONG ]]; do
    alive "${REDIS_PID[$n]}" || die "the Redis of $n exited (see $WORK/$n/redis.log)"
    (($(ms_since "$t0") < 20000)) || die "the Redis of $n does not answer on port $(redis_port "$n")"
    sleep 0.1
  done
}

start_failoverd() {
  local n=$1
  "$FAILOVERD" run -c "$(cfg_of "$n")" >>"$WORK/$n/failoverd.log" 2>&1 </dev/null &
  FD_PID[$n]=$!
}

# count_keys NODE: how many of the demo's keys that node's Redis has.
count_keys() { rc "$1" EVAL "return #redis.call('KEYS', 'demo:[0-9][0-9][0-9]')" 0 2>/dev/null || echo '?'; }

# ------------------------------------------------------------------ demo ---

printf '%sfailoverd + Redis demo%s: a Redis primary and two replicas, a failoverd beside each,\n' "$BOLD" "$RESET"
printf "one $COORD, and a primary that crashes. Everything runs on 127.0.0.1 and is removed at the end.\n"

section "Checking dependencies"
if [[ "${DEMO_SKIP_DEPS:-0}" != 1 ]]; then
  # deps.sh also wants what the test suite needs (sshd, ...): only fail here
  # if what the demo needs is still missing afterwards.
  ./scripts/deps.sh 2>&1 | indent || note "scripts/deps.sh could not install everything (see above)"
fi
missing=()
[[ -n "${DEMO_FAILOVERD:-}" ]] || command -v "$GO" >/dev/null 2>&1 || missing+=("go ($GO)")
command -v timeout >/dev/null 2>&1 || missing+=(timeout)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-cli)
need_backend
((${#missing[@]} == 0)) || die "missing: ${missing[*]}; run 'sudo make deps' (Debian packages zookeeper, default-jre-headless, redis-server, redis-tools)"
ok "go, $BACKEND_FOUND and $(redis-server --version | cut -d' ' -f1-3) are here"

build_failoverd

WORK="$(mktemp -d "${TMPDIR:-/tmp}/failoverd-demo-redis.XXXXXX")"
export FAILOVERD_EVENTS_LOG="$WORK/events.log" # every hook appends one line here
: >"$FAILOVERD_EVENTS_LOG"
say "work directory: $WORK"
pause

section "Starting $COORD"
pick_ports
start_backend

section "Starting three Redis servers and a failoverd beside each"
env "${RENDER_ENV[@]}" REDIS_PORT_BASE="$REDIS_PORT_BASE" ADMIN_PORT_BASE="$ADMIN_PORT_BASE" \
  examples/redis/render.sh "$WORK/cluster" | indent
for n in "${NODES[@]}"; do
  mkdir -p "$WORK/$n"
  out=$("$FAILOVERD" validate -c "$(cfg_of "$n")" 2>&1) || die "failoverd validate $n.yaml: $out"
done
ok "failoverd validate: all three configs ok"
for n in "${NODES[@]}"; do start_redis "$n"; done
ok "redis-server on ports $(redis_port node-a), $(redis_port node-b), $(redis_port node-c)"
say "Each starts as a read-only replica of 127.0.0.1:1, where nothing listens"
say "(\"parked\", from its redis.conf): no Redis takes writes until failoverd promotes it."
print_roles
for n in "${NODES[@]}"; do start_failoverd "$n"; done
ok "failoverd run -c node-a.yaml / node-b.yaml / node-c.yaml (admin APIs on 127.0.0.1:$((ADMIN_PORT_BASE + 1))-$((ADMIN_PORT_BASE + 3)))"
pause

section "Waiting for the election and the replicas"
t0=$(date +%s%N)
leader='' epoch=''
while :; do
  for n in "${NODES[@]}"; do
    alive "${FD_PID[$n]}" || die "failoverd of $n exited (see $WORK/$n/failoverd.log)"
  done
  leader='' standbys=0
  while read -r node state ep; do
    case "$state" in
      leader) leader=$node epoch=$ep ;;
      standby) standbys=$((standbys + 1)) ;;
    esac
  done < <(status_rows || true)
  [[ -n "$leader" && $standbys -eq 2 && "$(role_of "$leader")" == master ]] && break
  (($(ms_since "$t0") < 120000)) || die "no leader with a primary Redis and two standbys within 120s"
  sleep 0.3
done
replicas=()
for n in "${NODES[@]}"; do [[ "$n" == "$leader" ]] || replicas+=("$n"); done
wait_following "$leader" 30 "${replicas[@]}"
ok "$leader leads at epoch $epoch: its promote hook ran REPLICAOF NO ONE"
ok "${replicas[0]} and ${replicas[1]} follow it: their follow hooks ran REPLICAOF 127.0.0.1:$(redis_port "$leader")"
print_roles
echo
say "${BOLD}failoverd status${RESET}"
print_status
print_leader
pause

# Leadership may have moved meanwhile on a busy host: write where it is now.
now=$(settled_leader 30) || die "no leader with a primary Redis"
if [[ "$now" != "$leader" ]]; then
  note "  (the leadership moved on to $now meanwhile: $leader's lease ran out on a busy host)"
  leader=$now epoch=$(status_rows | awk -v n="$now" '$1 == n { print $3 }')
  replicas=()
  for n in "${NODES[@]}"; do [[ "$n" == "$leader" ]] || replicas+=("$n"); done
  wait_following "$leader" 30 "${replicas[@]}"
fi
section "Writing to the primary ($leader)"
for i in $(seq 1 "$KEYS"); do printf 'SET demo:%03d value-%d\n' "$i" "$i"; done |
  timeout 10 redis-cli -h 127.0.0.1 -p "$(redis_port "$leader")" >/dev/null || die "writing to $leader failed"
acked=$(rc "$leader" WAIT 2 5000) || die "WAIT on $leader failed"
[[ "$acked" =~ ^[0-9]+$ ]] || die "WAIT on $leader answered: $acked"
ok "wrote $KEYS keys (demo:001 .. demo:$KEYS) to $leader; WAIT: $acked replicas acknowledged them"
((acked == 2)) || die "only $acked of 2 replicas acknowledged the writes"
say "failoverd:epoch on the primary: $(rc "$leader" GET failoverd:epoch) (the promote hook stores it; it replicates)"
for n in "${replicas[@]}"; do
  r=$(rc "$n" SET demo:probe x 2>&1 || true)
  say "a write to the replica $n answers: $r"
done
pause

old=$leader old_epoch=$epoch
events_before=$(wc -l <"$FAILOVERD_EVENTS_LOG")
case "$KILL" in
  node)
    section "Crash: SIGKILL to $old's Redis and failoverd (the primary's host dies)"
    kill_ns=$(date +%s%N)
    { kill -KILL "${REDIS_PID[$old]}" "${FD_PID[$old]}" && wait "${REDIS_PID[$old]}" "${FD_PID[$old]}"; } 2>/dev/null || true
    ok "killed redis-server and failoverd of $old at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
    say "$(expiry_note 6s)"
    ;;
  daemon)
    section "Crash: SIGKILL to $old's failoverd (its Redis keeps running as primary)"
    say "The dangerous case: nothing stops that Redis taking writes but the next"
    say "leader's fencing."
    kill_ns=$(date +%s%N)
    { kill -KILL "${FD_PID[$old]}" && wait "${FD_PID[$old]}"; } 2>/dev/null || true
    ok "killed failoverd of $old at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
    say "$(expiry_note 6s)"
    ;;
  redis)
    section "Crash: SIGKILL to $old's Redis (its failoverd sees an unhealthy service)"
    kill_ns=$(date +%s%N)
    { kill -KILL "${REDIS_PID[$old]}" && wait "${REDIS_PID[$old]}"; } 2>/dev/null || true
    ok "killed redis-server of $old at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
    say "Its health check (PING) fails twice, 1s apart, and it steps down..."
    ;;
esac

promote_line=''
while [[ -z "$promote_line" ]]; do
  (($(ms_since "$kill_ns") < 60000)) || die "no failover: nobody was promoted within 60s"
  sleep 0.1
  promote_line=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" |
    grep ' event=promote ' | grep ' result=ok' | head -n 1 || true)
done
new=$(logfmt_get node "$promote_line")
new_epoch=$(logfmt_get epoch "$promote_line")
promote_ns=$(date -d "${promote_line%% *}" +%s%N 2>/dev/null || date +%s%N)
failover_ms=$(((promote_ns - kill_ns) / 1000000))
[[ "$new" != "$old" ]] || die "$old was promoted again"
((new_epoch > old_epoch)) || die "new epoch $new_epoch is not above the old epoch $old_epoch"
pause

# Who fenced the old leader: normally $new; on a busy host another node may
# have won first, fenced, and lost its lease before it promoted.
fence_ok=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep ' event=fence ' | grep " target=$old .*result=ok" | tail -n 1 || true)
fencer=$new
[[ -n "$fence_ok" ]] && fencer=$(logfmt_get node "$fence_ok")
section "Fencing: $fencer makes sure $old's Redis cannot take writes"
say "$fencer won the election. The breadcrumb in $COORD said $old led at"
say "epoch $old_epoch, so before promoting, $fencer fenced $old, trying the"
say "methods of fencing.methods in order:"
while IFS= read -r line; do
  m=$(json_get method <<<"$line")
  outcome=$(json_get outcome <<<"$line")
  err=$(json_str err <<<"$line")
  if [[ "$outcome" == success ]]; then
    printf '     %-6s %ssucceeded%s\n' "$m" "$GREEN" "$RESET"
  else
    printf '     %-6s %sfailed%s: %s\n' "$m" "$YELLOW" "$RESET" "${err##*: }"
  fi
done < <(grep '"msg":"fence attempt' "$WORK/$fencer/failoverd.log" | grep "\"target\":\"$old\"" || true)
case "$KILL" in
  node) say "(rpc asks $old's failoverd to demote its Redis: it is dead. fence.sh then finds" &&
    say " nothing listening on $old's Redis port: on one machine, that means it is gone.)" ;;
  daemon) say "(rpc asks $old's failoverd to demote its Redis: it is dead. fence.sh then makes" &&
    say " $old's Redis a read-only replica over the network: how=parked.)" ;;
  redis) say "(rpc asks $old's failoverd, alive, to demote: its demote hook finds no Redis" &&
    say " running, which its redis.conf would restart read-only anyway.)" ;;
esac
echo
say "${BOLD}events log${RESET} (one line per hook run, from every node):"
tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep -E ' event=(fence|demote|promote) ' | indent || true
if [[ "$KILL" != redis ]]; then
  [[ -n "$fence_ok" ]] || die "$old was not fenced"
  ok "Fenced: $old's Redis at epoch $(logfmt_get target_epoch "$fence_ok") by $fencer (how=$(logfmt_get how "$fence_ok"))"
else
  grep '"msg":"fence attempt' "$WORK"/node-*/failoverd.log | grep "\"target\":\"$old\"" | grep -q '"outcome":"success"' ||
    die "$old was not fenced"
  ok "Fenced: $old's failoverd confirmed its demote over rpc"
fi
if [[ "$fencer" != "$new" ]]; then
  note "  ($fencer lost its lease before it promoted (a busy host), and $new took over from it.)"
fi
pause

section "The new primary, and the replicas following it"
printf '   %s✓ New leader: %s at epoch %s%s (previous: %s at epoch %s)\n' "$BOLD$GREEN" "$new" "$new_epoch" "$RESET" "$old" "$old_epoch"
printf '   %s✓ Failover took %s ms%s from the SIGKILL to the promote hook finishing on %s\n' "$BOLD$GREEN" "$failover_ms" "$RESET" "$new"
# On a busy host the new leader's lease can run out ($COORD answering too
# late) and the leadership move on once more: go on with whoever leads now.
cur=$(settled_leader 30) || die "no leader with a primary Redis 30s after $new's promotion"
if [[ "$cur" != "$new" ]]; then
  note "  (the leadership has moved on to $cur since: $new's lease ran out, $COORD answering"
  note "   too late on a busy host; $cur fenced $new and took over)"
  new=$cur
  promote_line=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" |
    grep ' event=promote ' | grep " node=$new " | grep ' result=ok' | tail -n 1 || true)
  promote_ns=$(date -d "${promote_line%% *}" +%s%N 2>/dev/null || date +%s%N)
fi
survivors=()
for n in "${NODES[@]}"; do [[ "$n" == "$new" || "$n" == "$old" ]] || survivors+=("$n"); done
[[ "$KILL" == daemon ]] && survivors+=("$old") # its Redis is alive, parked by the fence
if [[ "$KILL" == daemon ]]; then
  # Its failoverd is dead, so nobody points the parked Redis anywhere yet.
  wait_following "$new" 30 "${survivors[0]}"
else
  wait_following "$new" 30 "${survivors[@]}"
fi
# ROLE may show the link up a moment before the hook has logged its line.
follow_line='' t0=$(date +%s%N)
while [[ -z "$follow_line" ]]; do
  (($(ms_since "$t0") < 10000)) || die "no follow event towards $new"
  follow_line=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep ' event=follow ' |
    grep " node=${survivors[0]} .* leader=$new " | grep ' result=ok' | head -n 1 || true)
  [[ -n "$follow_line" ]] || sleep 0.1
done
follow_ns=$(date -d "${follow_line%% *}" +%s%N 2>/dev/null || date +%s%N)
ok "${survivors[0]} follows $new: its follow hook (reason $(logfmt_get reason "$follow_line")) ran" \
  "REPLICAOF $(logfmt_get leader_address "$follow_line"), $(((follow_ns - promote_ns) / 1000000)) ms after the promote"
print_roles
echo
say "${BOLD}the data written before the crash${RESET}:"
for n in "$new" "${survivors[0]}"; do
  c=$(count_keys "$n")
  say "  $n: $c of $KEYS keys, demo:042 = $(rc "$n" GET demo:042)"
  [[ "$c" == "$KEYS" ]] || die "$n has $c of the $KEYS keys written before the crash"
done
ok "every acknowledged write survived the failover"
r=$(rc "$new" SET demo:after-failover yes 2>&1) || true
[[ "$r" == OK ]] || die "the new primary $new refused a write: $r"
acked=$(rc "$new" WAIT 1 5000) || true
ok "the new primary takes writes (SET demo:after-failover: $r; WAIT: $acked replica acknowledged)"
echo
say "${BOLD}failoverd status${RESET}"
print_status
print_leader
pause

section "The crashed node comes back"
case "$KILL" in
  node)
    start_redis "$old"
    say "$old's Redis restarts from its redis.conf: a parked read-only replica, not a"
    say "second primary, although it was the primary when it died."
    print_roles | grep " $old " || true
    start_failoverd "$old"
    ;;
  daemon) start_failoverd "$old" ;;
  redis) start_redis "$old" ;;
esac
say "failoverd on $old demotes (a no-op: it is a replica) and its follow hook points it at $new."
wait_following "$new" 120 "$old"
c=$(count_keys "$old")
((c == KEYS)) || die "$old has $c of the $KEYS keys after resyncing"
r=$(rc "$old" SET demo:late x 2>&1 || true)
ok "$old follows $new and has all $KEYS keys; a write to it answers: $r"
print_roles
pause

elapsed=$(($(ms_since "$STARTED_NS") / 1000))
printf '\n%sDemo finished OK in %ss:%s %s crashed, %s fenced it and took over at epoch %s in %s ms;\n' \
  "$BOLD$GREEN" "$elapsed" "$RESET" "$old" "$new" "$new_epoch" "$failover_ms"
say "the other replicas follow $new and no acknowledged write was lost."
say "Next: examples/redis/README.md (the hooks and why they are safe);"
say "DEMO_KILL=daemon or DEMO_KILL=redis make demo-redis for the other crashes."
