#!/usr/bin/env bash
# make demo: failoverd on one machine, in about 30 seconds.
#
# Starts a local ZooKeeper (or, with BACKEND=etcd, a local etcd), a shared fenced store, three toy services and a
# failoverd beside each (cluster "toy", see examples/README.md), waits for a
# leader, kills the leader's failoverd with SIGKILL and shows the successor
# fencing it and taking over with a higher epoch. Everything runs on
# 127.0.0.1 and is stopped and removed on exit or Ctrl-C.
#
# Exit 0 when the failover happened, 1 when it did not (or the set-up failed).
#
# Environment (all optional):
#   DEMO_KEEP=1        keep the work directory (configs, logs, events log)
#   DEMO_PAUSE=1       wait for Enter between the steps
#   DEMO_SKIP_DEPS=1   do not run scripts/deps.sh
#   BACKEND            zookeeper (default) or etcd: the coordination service
#   ETCD_BIN           the etcd server with BACKEND=etcd (default: the one
#                      scripts/deps.sh builds, else /usr/bin/etcd)
#   ZK_PORT            ZooKeeper or etcd client port (etcd's peer port is
#                      the next one)                    (default: a free port)
#   TOY_PORT_BASE      store on BASE, toy services on BASE+1..3   (free ports)
#   ADMIN_PORT_BASE    failoverd admin APIs on BASE+1..3          (free ports)
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
NODES=(node-a node-b node-c)
ETCD_LEASE_TTL=3s

# ---------------------------------------------------------------- output ---


show_logs() {
  [[ -n "${WORK:-}" && -d "${WORK:-}" ]] || return 0
  local f
  for f in "$WORK"/zookeeper/server.log "$WORK"/etcd/etcd.log "$WORK"/events.log "$WORK"/node-*/failoverd.log "$WORK"/node-*/toy.log; do
    [[ -s "$f" ]] || continue
    printf '\n%s--- last lines of %s ---%s\n' "$DIM" "${f#"$WORK"/}" "$RESET"
    tail -n 15 "$f"
  done
}

# ------------------------------------------------------------- processes ---

WORK='' BUILD_TMP=''
declare -A FD_PID=() TOY_PID=()
ZK_PID='' STORE_PID='' # ZK_PID: the ZooKeeper or etcd server



cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  local fds=() toys=() p
  [[ -n "$BUILD_TMP" ]] && rm -f "$BUILD_TMP"
  for p in "${FD_PID[@]}"; do alive "$p" && fds+=("$p"); done
  for p in "${TOY_PID[@]}" "$STORE_PID"; do alive "$p" && toys+=("$p"); done
  if ((${#fds[@]} + ${#toys[@]})) || alive "$ZK_PID"; then
    section "Cleaning up"
    # failoverd first, while ZooKeeper (or etcd) is still up: SIGTERM makes a leader
    # demote its service and delete its breadcrumb (a graceful stop).
    ((${#fds[@]})) && stop TERM 12 "${fds[@]}" 2>/dev/null
    ((${#toys[@]})) && stop TERM 3 "${toys[@]}" 2>/dev/null
    stop_backend
    ok "stopped the failoverd daemons, the toy services, the store and $COORD"
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


# json_get KEY: the value of "KEY" in the JSON object on stdin (flat objects
# only; enough for the toy service's answers and failoverd's log lines).

# json_str KEY: the string value of "KEY" on stdin, escaped quotes allowed.

# logfmt_get KEY LINE: the value of KEY=... in a hook event line.

# pick_ports: a random base with BASE..BASE+23 free (ZooKeeper on BASE, the
# store and toy services on BASE+10.., admin APIs on BASE+20..), below the
# kernel's ephemeral range so the kernel does not hand them out meanwhile.
pick_ports() {
  local _ base p busy
  for _ in $(seq 1 50); do
    base=$((20000 + (RANDOM % 1000) * 10))
    busy=0
    for p in "$base" $((base + 1)) $(seq $((base + 10)) $((base + 13))) $(seq $((base + 21)) $((base + 23))); do
      if tcp_open "$p"; then busy=1 && break; fi
    done
    if ((!busy)); then
      ZK_PORT="${ZK_PORT:-$base}"
      TOY_PORT_BASE="${TOY_PORT_BASE:-$((base + 10))}"
      ADMIN_PORT_BASE="${ADMIN_PORT_BASE:-$((base + 20))}"
      return 0
    fi
  done
  die "no free loopback ports found (set ZK_PORT, TOY_PORT_BASE, ADMIN_PORT_BASE)"
}



toy_addr() { echo "127.0.0.1:$((TOY_PORT_BASE + $1 + 1))"; } # by index 0..2
cfg_of() { echo "$WORK/cluster/$1.yaml"; }

# status_rows: "node state epoch" for every member, from failoverd status.
status_rows() {
  "$FAILOVERD" status -c "$(cfg_of node-a)" 2>/dev/null |
    awk '$1 ~ /^node-/ { print $1, $3, $5 }'
}

print_status() {
  "$FAILOVERD" status -c "$(cfg_of node-a)" 2>&1 | indent
}

# ------------------------------------------------------------------ demo ---

printf '%sfailoverd demo%s: three nodes of a primary/standby service, one %s,\n' "$BOLD" "$RESET" "$COORD"
printf 'and a leader that crashes. Everything runs on 127.0.0.1 and is removed at the end.\n'

section "Checking dependencies"
if [[ "${DEMO_SKIP_DEPS:-0}" != 1 ]]; then
  # deps.sh also wants what the test suite needs (sshd, ...): only fail here
  # if what the demo needs is still missing afterwards.
  ./scripts/deps.sh 2>&1 | indent || note "scripts/deps.sh could not install everything (see above)"
fi
missing=()
command -v "$GO" >/dev/null 2>&1 || missing+=("go ($GO)")
command -v timeout >/dev/null 2>&1 || missing+=(timeout)
need_backend
((${#missing[@]} == 0)) || die "missing: ${missing[*]}; run 'sudo make deps' (Debian packages zookeeper, default-jre-headless)"
ok "go and $BACKEND_FOUND are here"

section "Building failoverd and the toy service"
mkdir -p bin
for b in failoverd:./cmd/failoverd toyservice:./examples/toyservice; do
  # Build beside the target and rename: replacing a binary that is running
  # (another demo, a test) must not fail with "text file busy".
  BUILD_TMP="bin/.${b%%:*}.$$"
  "$GO" build -o "$BUILD_TMP" "${b#*:}" || die "go build ${b#*:} failed"
  mv -f "$BUILD_TMP" "bin/${b%%:*}"
done
BUILD_TMP=''
FAILOVERD="$ROOT/bin/failoverd"
export TOYSERVICE="$ROOT/bin/toyservice" # the hook scripts run this
ok "bin/failoverd ($("$FAILOVERD" version)) and bin/toyservice"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/failoverd-demo.XXXXXX")"
export FAILOVERD_EVENTS_LOG="$WORK/events.log" # every hook appends one line here
: >"$FAILOVERD_EVENTS_LOG"
say "work directory: $WORK"
pause

section "Starting $COORD"
pick_ports
start_backend

section "Starting three toy services and a failoverd beside each"
say "The toy service is a stand-in for a database: each node runs one, as"
say "standby until failoverd promotes it. The primary writes to a shared store"
say "every 100ms with its epoch; the store rejects writes from an older epoch."
env "${RENDER_ENV[@]}" TOY_PORT_BASE="$TOY_PORT_BASE" ADMIN_PORT_BASE="$ADMIN_PORT_BASE" \
  examples/cluster/render.sh "$WORK/cluster" | indent
for n in "${NODES[@]}"; do
  out=$("$FAILOVERD" validate -c "$(cfg_of "$n")" 2>&1) || die "failoverd validate $n.yaml: $out"
done
ok "failoverd validate: all three configs ok"

store_addr="127.0.0.1:$TOY_PORT_BASE"
"$TOYSERVICE" store -listen "$store_addr" -dir "$WORK/store" >"$WORK/store.log" 2>&1 </dev/null &
STORE_PID=$!
for i in 0 1 2; do
  n=${NODES[$i]}
  mkdir -p "$WORK/$n"
  "$TOYSERVICE" serve -listen "$(toy_addr "$i")" -state "$WORK/$n/state" -node "$n" \
    -store "http://$store_addr" -write-interval 100ms >"$WORK/$n/toy.log" 2>&1 </dev/null &
  TOY_PID[$n]=$!
done
t0=$(date +%s%N)
for i in 0 1 2; do
  until http GET "$(toy_addr "$i")" /health >/dev/null; do
    alive "${TOY_PID[${NODES[$i]}]}" || die "the toy service of ${NODES[$i]} exited (see $WORK/${NODES[$i]}/toy.log)"
    (($(ms_since "$t0") < 20000)) || die "the toy service of ${NODES[$i]} does not answer on $(toy_addr "$i")"
    sleep 0.1
  done
done
until http GET "$store_addr" /health >/dev/null; do
  alive "$STORE_PID" || die "the store exited (see $WORK/store.log)"
  (($(ms_since "$t0") < 20000)) || die "the store does not answer on $store_addr"
  sleep 0.1
done
ok "store on $store_addr; toy services on $(toy_addr 0), $(toy_addr 1), $(toy_addr 2)"

for n in "${NODES[@]}"; do
  "$FAILOVERD" run -c "$(cfg_of "$n")" >"$WORK/$n/failoverd.log" 2>&1 </dev/null &
  FD_PID[$n]=$!
done
ok "failoverd run -c node-a.yaml / node-b.yaml / node-c.yaml (admin APIs on 127.0.0.1:$((ADMIN_PORT_BASE + 1))-$((ADMIN_PORT_BASE + 3)))"
pause

section "Waiting for the election"
t0=$(date +%s%N)
leader='' epoch='' standbys=0
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
  [[ -n "$leader" && $standbys -eq 2 ]] && break
  (($(ms_since "$t0") < 60000)) || die "no leader with two standbys within 60s"
  sleep 0.3
done
ok "Leader: $leader at epoch $epoch, elected and promoted $(ms_since "$t0") ms after start-up"
say "Each failoverd joined the election once its toy service was healthy. The"
say "winner fenced nobody (there was no previous leader), wrote the breadcrumb"
say "and ran its promote hook with FAILOVERD_EPOCH=$epoch, the fencing token."
if [[ "$BACKEND" == etcd ]]; then
  note "(An epoch is the etcd create revision of the winning election key: it"
  note " only grows, though not one by one.)"
else
  note "(An epoch is the ZooKeeper zxid of the winning election znode: it only"
  note " grows, though not one by one.)"
fi
echo
say "${BOLD}failoverd status${RESET}"
print_status
pause

sleep 1 # let the primary write to the store for a moment
old=$leader old_epoch=$epoch
# Ask again right before the kill, in case leadership moved meanwhile.
while read -r node state ep; do
  if [[ "$state" == leader ]]; then old=$node old_epoch=$ep; fi
done < <(status_rows || true)

section "Crash: SIGKILL to the leader's failoverd ($old, pid ${FD_PID[$old]})"
say "Its toy service keeps running and still believes it is primary: the"
say "dangerous case. Nothing stops it but the next leader's fencing."
events_before=$(wc -l <"$FAILOVERD_EVENTS_LOG")
kill_ns=$(date +%s%N)
{ kill -KILL "${FD_PID[$old]}" && wait "${FD_PID[$old]}"; } 2>/dev/null || true
ok "killed failoverd of $old with SIGKILL at $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
if [[ "$BACKEND" == etcd ]]; then
  say "Waiting for etcd to expire its lease (lease_ttl $ETCD_LEASE_TTL)..."
else
  say "Waiting for ZooKeeper to expire its session (session_timeout 2s)..."
fi

promote_line=''
while [[ -z "$promote_line" ]]; do
  (($(ms_since "$kill_ns") < 30000)) || die "no failover: nobody was promoted within 30s of the kill"
  sleep 0.1
  promote_line=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" |
    grep ' event=promote ' | grep ' result=ok' | head -n 1 || true)
done
detect_ms=$(ms_since "$kill_ns")
new=$(logfmt_get node "$promote_line")
new_epoch=$(logfmt_get epoch "$promote_line")
promote_ns=$(date -d "${promote_line%% *}" +%s%N 2>/dev/null || echo '')
if [[ -n "$promote_ns" ]]; then
  failover_ms=$(((promote_ns - kill_ns) / 1000000))
else
  failover_ms=$detect_ms
fi
[[ "$new" != "$old" ]] || die "$old was promoted again after its failoverd was killed"
((new_epoch > old_epoch)) || die "new epoch $new_epoch is not above the old epoch $old_epoch"
pause

section "Fencing: $new makes sure $old cannot act any more"
say "$new won the election at epoch $new_epoch. The breadcrumb in $COORD said"
say "$old led at epoch $old_epoch, so before promoting, $new fenced $old,"
say "trying the methods of fencing.methods in order:"
while IFS= read -r line; do
  m=$(json_get method <<<"$line")
  outcome=$(json_get outcome <<<"$line")
  err=$(json_str err <<<"$line")
  if [[ "$outcome" == success ]]; then
    printf '     %-6s %ssucceeded%s\n' "$m" "$GREEN" "$RESET"
  else
    printf '     %-6s %sfailed%s: %s\n' "$m" "$YELLOW" "$RESET" "${err##*: }"
  fi
done < <(grep '"msg":"fence attempt' "$WORK/$new/failoverd.log" | grep "\"target\":\"$old\"" || true)
say "(rpc asks $old's failoverd to demote; it is dead, so the shell method,"
say " fence.sh, tells $old's toy service itself to stand down at epoch $old_epoch.)"
echo
say "${BOLD}events log${RESET} (one line per hook run, from every node):"
fence_lines=$(tail -n "+$((events_before + 1))" "$FAILOVERD_EVENTS_LOG" | grep ' event=fence ' || true)
[[ -n "$fence_lines" ]] || die "no fence event in $FAILOVERD_EVENTS_LOG"
printf '%s\n%s\n' "$fence_lines" "$promote_line" | indent
grep -q " target=$old .*result=ok" <<<"$fence_lines" || die "$old was not fenced"
fence_ok=$(grep " target=$old .*result=ok" <<<"$fence_lines" | tail -n 1)
ok "Fenced: $old at epoch $(logfmt_get target_epoch "$fence_ok") by $(logfmt_get node "$fence_ok") (how=$(logfmt_get how "$fence_ok"))"
pause

section "The new leader"
printf '   %s✓ New leader: %s at epoch %s%s (previous: %s at epoch %s)\n' "$BOLD$GREEN" "$new" "$new_epoch" "$RESET" "$old" "$old_epoch"
printf '   %s✓ Failover took %s ms%s from the SIGKILL to the promote hook finishing on %s\n' "$BOLD$GREEN" "$failover_ms" "$RESET" "$new"
if [[ "$BACKEND" == etcd ]]; then
  note "  Most of it is etcd waiting out the dead lease ($ETCD_LEASE_TTL): failoverd on"
  note "  $new is elected the moment $old's election key disappears."
else
  note "  Most of it is ZooKeeper waiting out the dead session (2s): failoverd on"
  note "  $new is elected the moment $old's election znode disappears."
fi
t0=$(date +%s%N)
until [[ "$(status_rows || true)" == *"$new leader "* ]]; do
  (($(ms_since "$t0") < 10000)) || die "failoverd status does not show $new as leader"
  sleep 0.2
done
sleep 0.5 # let the new primary write to the store
echo
say "${BOLD}failoverd status${RESET}"
print_status
note "  ($old has no row: its failoverd is dead, so its member record went with its session.)"
echo
say "${BOLD}the toy services${RESET} (GET /role):"
for i in 0 1 2; do
  n=${NODES[$i]}
  r=$(http GET "$(toy_addr "$i")" /role || echo '{}')
  printf '     %-7s %-8s epoch %s\n' "$n" "$(json_get role <<<"$r")" "$(json_get epoch <<<"$r")"
done
s=$(http GET "$store_addr" /stats || echo '{}')
say "${BOLD}the store${RESET} (GET /stats): $(json_get accepted <<<"$s") writes accepted," \
  "$(json_get rejected_stale <<<"$s") rejected as stale, newest epoch $(json_get max_epoch <<<"$s")"
note "  Exactly one primary, at the newest epoch. Had $old's service kept writing,"
note "  the store would refuse it now: its epoch $old_epoch is older than $new_epoch."
pause

elapsed=$(($(ms_since "$STARTED_NS") / 1000))
printf '\n%sDemo finished OK in %ss:%s %s crashed, %s fenced it and took over at epoch %s in %s ms.\n' \
  "$BOLD$GREEN" "$elapsed" "$RESET" "$old" "$new" "$new_epoch" "$failover_ms"
say "Next: README.md (configuration, CLI, admin API, metrics); examples/README.md;"
say "DEMO_KEEP=1 make demo keeps the configs and logs; DEMO_PAUSE=1 steps through."
