# Shared by the demo scripts (examples/demo/demo.sh, examples/redis/demo.sh),
# sourced after they set PAUSE, WORK, ZK_PORT, ZK_JAR and JAVA_CP_EXTRA:
# the output helpers, process helpers, small parsers, and a standalone
# ZooKeeper. Each script defines its own show_logs (die calls it).
# shellcheck shell=bash
# The bash -c '...' snippets below expand their own positional arguments:
# shellcheck disable=SC2016
# Colours and STARTED_NS are used by the scripts that source this file:
# shellcheck disable=SC2034

# ---------------------------------------------------------------- output ---

if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then
  BOLD=$'\e[1m' DIM=$'\e[2m' RED=$'\e[31m' GREEN=$'\e[32m' YELLOW=$'\e[33m' CYAN=$'\e[36m' RESET=$'\e[0m'
else
  BOLD='' DIM='' RED='' GREEN='' YELLOW='' CYAN='' RESET=''
fi
STEP=0
STARTED_NS=$(date +%s%N)

section() {
  STEP=$((STEP + 1))
  printf '\n%s== %d. %s%s\n' "$BOLD$CYAN" "$STEP" "$*" "$RESET"
}
say() { printf '   %s\n' "$*"; }
ok() { printf '   %s✓%s %s\n' "$GREEN" "$RESET" "$*"; }
note() { printf '   %s%s%s\n' "$DIM" "$*" "$RESET"; }
indent() { sed 's/^/     /'; }
pause() {
  [[ "$PAUSE" == 1 ]] || return 0
  local _
  if { : </dev/tty; } 2>/dev/null; then
    read -r -p "   ${DIM}press Enter to continue...${RESET}" _ </dev/tty || true
  else
    read -r -p "   ${DIM}press Enter to continue...${RESET}" _ || true
  fi
}
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# die prints why, the tails of the logs, and exits 1 (cleanup follows).
die() {
  printf '\n%s✗ demo failed: %s%s\n' "$BOLD$RED" "$*" "$RESET" >&2
  show_logs >&2
  exit 1
}

# ------------------------------------------------------------- processes ---

alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

# stop SIGNAL SECONDS PID...: signal the processes, wait for them, SIGKILL
# whatever is left after SECONDS.
stop() {
  local sig=$1 secs=$2 p deadline
  shift 2
  for p in "$@"; do kill "-$sig" "$p" 2>/dev/null || true; done
  deadline=$(($(date +%s) + secs))
  for p in "$@"; do
    while alive "$p" && (($(date +%s) < deadline)); do sleep 0.05; done
    alive "$p" && kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null || true
  done
}

# --------------------------------------------------------------- helpers ---

tcp_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null; }
json_get() { sed -n 's/.*"'"$1"'":"\{0,1\}\([^",}]*\).*/\1/p' | head -n 1; }
json_str() { sed -n 's/.*"'"$1"'":"\(\([^"\\]\|\\.\)*\)".*/\1/p' | head -n 1 | sed 's/\\"/"/g'; }
logfmt_get() { sed -n 's/.* '"$1"'=\("[^"]*"\|[^ ]*\).*/\1/p' <<<"$2" | head -n 1; }

# start_zookeeper starts a standalone ZooKeeper on 127.0.0.1:$ZK_PORT under
# $WORK/zookeeper (ZK_PID) and waits until it serves. tickTime=200 lets
# clients have short sessions (the minimum is 2 ticks), so a dead leader is
# noticed within the demo's session timeout.
start_zookeeper() {
  local zkdir="$WORK/zookeeper" t0 mode
  mkdir -p "$zkdir/data"
  cat >"$zkdir/zoo.cfg" <<EOF
tickTime=200
initLimit=50
syncLimit=10
minSessionTimeout=400
maxSessionTimeout=60000
dataDir=$zkdir/data
clientPortAddress=127.0.0.1
clientPort=$ZK_PORT
4lw.commands.whitelist=srvr,ruok
admin.enableServer=false
maxClientCnxns=0
forceSync=no
EOF
  cat >"$zkdir/log4j.properties" <<EOF
log4j.rootLogger=INFO, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File=$zkdir/server.log
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
EOF
  java -Xmx192m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k \
    -Dzookeeper.jmx.log4j.disable=true -Dlog4j.configuration="file:$zkdir/log4j.properties" \
    -Dzookeeper.admin.enableServer=false \
    -cp "$ZK_JAR:$zkdir:$JAVA_CP_EXTRA" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$zkdir/zoo.cfg" \
    >"$zkdir/stdout.log" 2>&1 </dev/null &
  ZK_PID=$!
  t0=$(date +%s%N)
  mode=''
  while [[ "$mode" != standalone ]]; do
    alive "$ZK_PID" || die "ZooKeeper exited (see $zkdir/stdout.log)"
    (($(ms_since "$t0") < 60000)) || die "ZooKeeper did not answer 'srvr' within 60s"
    sleep 0.2
    mode=$(timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && cat <&3' _ "$ZK_PORT" 2>/dev/null |
      sed -n 's/^Mode: //p' || true)
  done
  ok "ZooKeeper serves on 127.0.0.1:$ZK_PORT (standalone, tickTime 200ms, up in $(ms_since "$t0") ms)"
}
