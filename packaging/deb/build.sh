#!/usr/bin/env bash
# Builds failoverd's Debian package with dpkg-deb alone (no packaging tool
# to install): the binary, the systemd unit, the reference config as a
# conffile, the man page and the bash completion generated from the CLI's
# help, and maintainer scripts that add the failoverd user and its
# directories.
#
#   packaging/deb/build.sh [OUTDIR]      # make package; OUTDIR default dist
#
# Environment: VERSION (default 0.0~gitYYYYMMDD.COMMIT from the last
# commit), ARCH (a Debian architecture; default this machine's), GO,
# MAINTAINER, SOURCE_DATE_EPOCH (default the last commit's time), COMPRESS
# (dpkg-deb's -Z: xz by default, gzip is several times faster).
# Prints the path of the .deb.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
out=${1:-dist}

arch=${ARCH:-$(dpkg --print-architecture)}
case "$arch" in
  amd64) goarch=amd64 ;;
  arm64) goarch=arm64 ;;
  i386) goarch=386 ;;
  armhf) goarch=arm; export GOARM=7 ;;
  ppc64el) goarch=ppc64le ;;
  s390x) goarch=s390x ;;
  riscv64) goarch=riscv64 ;;
  *) echo "build.sh: no Go architecture known for Debian's $arch" >&2; exit 2 ;;
esac
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
version=${VERSION:-0.0~git$(git log -1 --format=%cd --date=format:%Y%m%d).$(git rev-parse --short=12 HEAD)}
if ! [[ $version =~ ^[0-9][A-Za-z0-9.+~-]*$ ]]; then
  echo "build.sh: VERSION $version is not a Debian version (it must start with a digit)" >&2
  exit 2
fi
maintainer=${MAINTAINER:-failoverd developers <failoverd@users.noreply.github.com>}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" \
  "$root/usr/share/man/man1" "$root/usr/share/bash-completion/completions" \
  "$root/usr/share/doc/failoverd"
install -d -m 0750 "$root/etc/failoverd"

echo ">> package: building failoverd $version for $arch" >&2
CGO_ENABLED=0 GOOS=linux GOARCH=$goarch "$GO" build -trimpath -buildvcs=false \
  -ldflags "-s -w -X main.version=$version" -o "$root/usr/bin/failoverd" ./cmd/failoverd
# The man page and completion come from the help of a binary that runs
# here: the packaged one, or the same source built for this machine.
helpbin=$root/usr/bin/failoverd
if [ "$goarch" != "$("$GO" env GOARCH)" ]; then
  helpbin=$work/failoverd-host
  CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false -ldflags "-X main.version=$version" -o "$helpbin" ./cmd/failoverd
fi
"$GO" run ./packaging/gendoc -bin "$helpbin" \
  -man "$work/failoverd.1" -bash "$root/usr/share/bash-completion/completions/failoverd"
gzip -9n -c "$work/failoverd.1" > "$root/usr/share/man/man1/failoverd.1.gz"
chmod 0644 "$root/usr/share/man/man1/failoverd.1.gz" "$root/usr/share/bash-completion/completions/failoverd"

# The unit is configs/failoverd.service with the package's paths: the
# binary in /usr/bin, and the state and log directories writable (and
# created, owned by the failoverd user) despite ProtectSystem=strict. Its
# install instructions, for a manual install, give way to a short header.
awk '
  BEGIN { header = 1 }
  header && /^#/ { next }
  header && /^$/ {
    print "# systemd unit for failoverd, from the failoverd package; see failoverd(1)."
    print "# Edit /etc/failoverd/failoverd.yaml, then: systemctl enable --now failoverd"
    print "# Change settings with `systemctl edit failoverd` (a drop-in), not here."
    print ""
    header = 0
    next
  }
  { gsub("/usr/local/bin/failoverd", "/usr/bin/failoverd") }
  { print }
  /^SyslogIdentifier=failoverd$/ {
    print "# /var/lib/failoverd and /var/log/failoverd, for hooks that keep state or"
    print "# logs (failoverd itself writes nothing): writable here, owned by the"
    print "# failoverd user."
    print "StateDirectory=failoverd"
    print "StateDirectoryMode=0750"
    print "LogsDirectory=failoverd"
    print "LogsDirectoryMode=0750"
    dirs = 1
  }
  END { if (!dirs) exit 1 }
' configs/failoverd.service > "$root/lib/systemd/system/failoverd.service"
if grep -q /usr/local/bin "$root/lib/systemd/system/failoverd.service" ||
  ! grep -q '^ExecStart=/usr/bin/failoverd run' "$root/lib/systemd/system/failoverd.service"; then
  echo "build.sh: configs/failoverd.service no longer has the lines this script adapts" >&2
  exit 1
fi
chmod 0644 "$root/lib/systemd/system/failoverd.service"

install -m 0640 configs/failoverd.yaml "$root/etc/failoverd/failoverd.yaml"
install -m 0644 README.md "$root/usr/share/doc/failoverd/README.md"
# docs/ beside the README, so that the README's links resolve in the package too.
install -d -m 0755 "$root/usr/share/doc/failoverd/docs"
install -m 0644 docs/*.md "$root/usr/share/doc/failoverd/docs/"
gzip -9n -c CHANGELOG.md > "$root/usr/share/doc/failoverd/changelog.gz"
chmod 0644 "$root/usr/share/doc/failoverd/changelog.gz"

for s in postinst prerm postrm; do
  install -m 0755 "packaging/deb/$s" "$root/DEBIAN/$s"
done
echo /etc/failoverd/failoverd.yaml > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: failoverd
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: adduser
Suggests: zookeeper | etcd-server
Section: admin
Priority: optional
Homepage: https://github.com/failoverd/failoverd
Description: failover controller for primary/standby services
 failoverd runs beside each instance of a primary/standby service (a
 database, a cache, a queue). The daemons of a cluster elect one leader
 through ZooKeeper or etcd; the leader fences the previous one, then
 promotes its local service. Health checks, hooks, fencing over the admin
 API, ssh or a command, a Prometheus /metrics endpoint.
 .
 The service is installed but neither enabled nor started: edit
 /etc/failoverd/failoverd.yaml first.
CONTROL

# Every file's time is the commit's, so that the same commit gives the
# same package.
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$out"
deb="$out/failoverd_${version}_${arch}.deb"
dpkg-deb --root-owner-group "-Z${COMPRESS:-xz}" --build "$root" "$deb" >&2
echo "$deb"
