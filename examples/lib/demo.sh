# Shared by the three demo scripts (examples/demo, examples/redis,
# examples/postgresql), sourced first: the output helpers, process helpers,
# small parsers, the backend (BACKEND=zookeeper or etcd: a standalone
# ZooKeeper or a one-member etcd), its dependencies, start and stop, and
# the failoverd build. The scripts set PAUSE, WORK and ZK_PORT (the
# backend's client port) before they use them, and define their own
# show_logs (die calls it).
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

# http METHOD HOST:PORT PATH: prints the response body; fails if no answer
# or a status other than 2xx. Plain bash (/dev/tcp), no curl needed.
http() {
  local resp status
  resp=$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/${2%:*}/${2##*:}" || exit 1
    printf "%s %s HTTP/1.0\r\nHost: %s\r\nContent-Length: 0\r\n\r\n" "$1" "$3" "$2" >&3
    cat <&3' _ "$1" "$2" "$3" 2>/dev/null) || return 1
  status=$(printf '%s\n' "$resp" | head -n 1 | cut -d' ' -f2)
  printf '%s\n' "$resp" | sed '1,/^\r\{0,1\}$/d'
  [[ "$status" == 2* ]]
}

# --------------------------------------------------------------- backend ---

ZK_JAR="${ZOOKEEPER_JAR:-/usr/share/java/zookeeper.jar}"
JAVA_CP_EXTRA=/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar
ZK_PID='' # the ZooKeeper or etcd server
BACKEND="${BACKEND:-zookeeper}"
case "$BACKEND" in
  zookeeper) COORD=ZooKeeper ;;
  etcd) COORD=etcd ;;
  *)
    echo "demo: BACKEND must be zookeeper or etcd, got '$BACKEND'" >&2
    exit 2
    ;;
esac

# etcd_bin: the etcd server to run (ETCD_BIN, else the release line that
# scripts/deps.sh builds, else Debian's).
etcd_bin() {
  local cache="${FAILOVERD_CACHE:-$HOME/.cache/failoverd}" f
  for f in "${ETCD_BIN:-}" "$cache"/etcd-v*/etcd /usr/bin/etcd; do
    [[ -n "$f" && -x "$f" ]] && echo "$f" && return 0
  done
  return 1
}

# need_backend: adds what the backend needs and this host lacks to the
# caller's missing array, and names what it found in BACKEND_FOUND.
need_backend() {
  local f
  if [[ "$BACKEND" == etcd ]]; then
    BACKEND_FOUND="etcd ($(etcd_bin || echo none))"
    etcd_bin >/dev/null || missing+=("an etcd server (ETCD_BIN, or make deps)")
  else
    BACKEND_FOUND="java and ZooKeeper ($ZK_JAR)"
    command -v java >/dev/null 2>&1 || missing+=(java)
    for f in "$ZK_JAR" ${JAVA_CP_EXTRA//:/ }; do [[ -f "$f" ]] || missing+=("$f"); done
  fi
  return 0
}

# start_etcd starts a one-member etcd on 127.0.0.1:$ZK_PORT (peers on the
# next port) under $WORK/etcd (ZK_PID) and waits until it serves.
start_etcd() {
  local dir="$WORK/etcd" t0 bin
  bin=$(etcd_bin) || die "no etcd server found (set ETCD_BIN, or run 'make deps')"
  mkdir -p "$dir"
  "$bin" --name demo --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$ZK_PORT" --advertise-client-urls "http://127.0.0.1:$ZK_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ZK_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ZK_PORT + 1))" \
    --initial-cluster "demo=http://127.0.0.1:$((ZK_PORT + 1))" --initial-cluster-state new \
    >"$dir/etcd.log" 2>&1 </dev/null &
  ZK_PID=$!
  t0=$(date +%s%N)
  until http GET "127.0.0.1:$ZK_PORT" /health 2>/dev/null | grep -q '"health":"true"'; do
    alive "$ZK_PID" || die "etcd exited (see $dir/etcd.log)"
    (($(ms_since "$t0") < 60000)) || die "etcd did not answer /health within 60s"
    sleep 0.2
  done
  ok "etcd serves on 127.0.0.1:$ZK_PORT ($("$bin" --version | head -n 1), one member, up in $(ms_since "$t0") ms)"
}

# start_backend starts ZooKeeper or etcd on $ZK_PORT, and sets RENDER_ENV
# to what the examples' render.sh need to write its block (etcd.lease_ttl:
# ETCD_LEASE_TTL).
start_backend() {
  if [[ "$BACKEND" == etcd ]]; then
    start_etcd
    RENDER_ENV=(ETCD_ENDPOINTS="http://127.0.0.1:$ZK_PORT" ETCD_LEASE_TTL="$ETCD_LEASE_TTL")
  else
    start_zookeeper
    RENDER_ENV=(ZK_SERVERS="127.0.0.1:$ZK_PORT")
  fi
}

# stop_backend stops ZooKeeper or etcd (after the daemons: SIGTERM makes a
# leader hand over through it).
stop_backend() {
  if alive "$ZK_PID"; then stop TERM 5 "$ZK_PID" 2>/dev/null; fi
  return 0
}

# backend_logs: the backend's log, for show_logs.
backend_logs() { echo "$WORK/zookeeper/server.log" "$WORK/etcd/etcd.log"; }

# expiry_note: what a crashed leader waits for before a successor can win.
expiry_note() {
  if [[ "$BACKEND" == etcd ]]; then
    echo "Waiting for etcd to expire its lease (lease_ttl $ETCD_LEASE_TTL)..."
  else
    echo "Waiting for ZooKeeper to expire its session (session_timeout $1)..."
  fi
}

# build_failoverd sets FAILOVERD: DEMO_FAILOVERD, else bin/failoverd built
# from this tree.
build_failoverd() {
  if [[ -n "${DEMO_FAILOVERD:-}" ]]; then
    FAILOVERD="$DEMO_FAILOVERD"
    [[ -x "$FAILOVERD" ]] || die "DEMO_FAILOVERD=$FAILOVERD is not an executable"
  else
    section "Building failoverd"
    mkdir -p bin
    # Build beside the target and rename: replacing a binary that is running
    # (another demo, a test) must not fail with "text file busy".
    BUILD_TMP="bin/.failoverd.$$"
    "$GO" build -o "$BUILD_TMP" ./cmd/failoverd || die "go build ./cmd/failoverd failed"
    mv -f "$BUILD_TMP" bin/failoverd
    BUILD_TMP=''
    FAILOVERD="$ROOT/bin/failoverd"
  fi
  ok "failoverd $("$FAILOVERD" version)"
}
