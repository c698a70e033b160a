#!/usr/bin/env bash
# Installs what failoverd's tests and demo need from Debian's packages, only
# when something is missing. Safe to run again and again.
set -euo pipefail

need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
# test/etcdtest: Debian's etcd 3.4 (the release line operators on Debian run).
[ -x /usr/bin/etcd ] || need+=(etcd-server)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v ss >/dev/null 2>&1 || need+=(iproute2)
command -v fuser >/dev/null 2>&1 || need+=(psmisc)
command -v curl >/dev/null 2>&1 || need+=(curl)
# examples/redis, make demo-redis and test/e2e's Redis tests.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
# deploy/: promtool checks and unit-tests the alert rules; Debian ships it
# only in prometheus, whose server deps.sh then keeps from running.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# packaging/: the package test checks the unit with systemd-analyze and
# reads the man page (man, groff).
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v man >/dev/null 2>&1 || need+=(man-db)
command -v groff >/dev/null 2>&1 || need+=(groff-base)
command -v adduser >/dev/null 2>&1 || need+=(adduser)

# Optional: kazoo, the reference recipe of make bench (test/bench skips it
# when no python3 imports it). Installed along with the rest, or alone when
# we are root; never a reason to fail.
optional=()
python3 -c 'import kazoo' >/dev/null 2>&1 || /usr/bin/python3 -c 'import kazoo' >/dev/null 2>&1 || optional+=(python3-kazoo)

# test/etcdtest also runs etcd's current release line, built from the
# server module that scripts/etcd-server pins, into a cache directory
# (about three minutes the first time; nothing when it is there).
build_etcd() {
  local dir="${FAILOVERD_CACHE:-$HOME/.cache/failoverd}"
  local ver
  ver=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" { print $3 }' scripts/etcd-server/go.mod)
  local bin="$dir/etcd-$ver/etcd"
  if [ -x "$bin" ]; then
    return 0
  fi
  echo ">> deps: building etcd $ver into $bin"
  mkdir -p "$dir/etcd-$ver"
  (cd scripts/etcd-server && ${GO:-go} build -trimpath -o "$bin.tmp" .) && mv "$bin.tmp" "$bin"
}
cd "$(dirname "$0")/.."
build_etcd

if [ ${#need[@]} -eq 0 ]; then
  if [ ${#optional[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo ">> deps: installing optional ${optional[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${optional[@]}" ||
        echo "deps: could not install ${optional[*]} (optional: make bench then times only the Go recipe)" >&2
    else
      echo ">> deps: optional ${optional[*]} missing (make bench then times only the Go recipe)"
    fi
  fi
  echo ">> deps: everything present"
  exit 0
fi

echo ">> deps: installing ${need[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${need[*]}; run 'make deps' as root or install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: missing ${need[*]} and there is no apt-get here; install the Debian packages by hand" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
if [[ " ${need[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
  systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
if [ ${#optional[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${optional[@]}" ||
    echo "deps: could not install ${optional[*]} (optional: make bench then times only the Go recipe)" >&2
fi
