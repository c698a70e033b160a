#!/usr/bin/env bash
# Installs what failoverd's tests and demo need from Debian's packages, only
# when something is missing. Safe to run again and again.
set -euo pipefail

need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v ss >/dev/null 2>&1 || need+=(iproute2)
command -v fuser >/dev/null 2>&1 || need+=(psmisc)
command -v curl >/dev/null 2>&1 || need+=(curl)
# examples/redis, make demo-redis and test/e2e's Redis tests.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)

# Optional: kazoo, the reference recipe of make bench (test/bench skips it
# when no python3 imports it). Installed along with the rest, or alone when
# we are root; never a reason to fail.
optional=()
python3 -c 'import kazoo' >/dev/null 2>&1 || /usr/bin/python3 -c 'import kazoo' >/dev/null 2>&1 || optional+=(python3-kazoo)

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
if [ ${#optional[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${optional[@]}" ||
    echo "deps: could not install ${optional[*]} (optional: make bench then times only the Go recipe)" >&2
fi
