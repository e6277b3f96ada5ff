#!/usr/bin/env bash
# Installs an amd64 package in a throwaway Debian root (debootstrap, minbase,
# with adduser), checks what it installs, purges it and checks that the
# user, the group and the state are gone; then lintian reads it. Nothing
# touches this machine's own packages or users. Needs root (for chroot) and
# Debian's mirror.
#   packaging/check-deb.sh target/debian/rkllm-server_..._amd64.deb
set -euo pipefail
deb=$(realpath "$1")
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v lintian >/dev/null || need+=(lintian)
if [ ${#need[@]} -gt 0 ]; then
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
fi
root=$(mktemp -d)
trap '$sudo rm -rf "$root"' EXIT
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
echo "check-deb: a throwaway $suite root in $root"
$sudo debootstrap --variant=minbase --include=adduser "$suite" "$root" >/dev/null
$sudo cp "$deb" "$root/tmp/pkg.deb"
in_root() { $sudo chroot "$root" "$@"; }
in_root dpkg -i /tmp/pkg.deb
in_root /usr/bin/rkllm-server --version
in_root /usr/bin/rkllm-server --check-config        # reads /etc/rkllm-server/config.toml
in_root getent passwd rkllm >/dev/null
in_root test -d /var/lib/rkllm-server/models
owner=$(in_root stat -c %U /var/lib/rkllm-server/models)
[ "$owner" = rkllm ] || { echo "check-deb: the model store belongs to $owner, not rkllm" >&2; exit 1; }
snapshots=$(in_root stat -c '%U %a' /var/lib/rkllm-server/snapshots)
[ "$snapshots" = "rkllm 700" ] || { echo "check-deb: the snapshots folder is $snapshots, not rkllm 700" >&2; exit 1; }
for file in /lib/systemd/system/rkllm-server.service \
            /usr/share/doc/rkllm-server/architecture.md \
            /usr/share/doc/rkllm-server/board-setup.md \
            /usr/share/doc/rkllm-server/examples/haproxy.cfg \
            /usr/share/doc/rkllm-server/images/chat-page.png \
            /usr/share/bash-completion/completions/rkllm-server \
            /usr/share/zsh/vendor-completions/_rkllm-server \
            /usr/share/man/man1/rkllm-server.1.gz; do
    in_root test -s "$file" || { echo "check-deb: $file is missing" >&2; exit 1; }
done
in_root dpkg --purge rkllm-server
if in_root getent passwd rkllm >/dev/null || in_root getent group rkllm >/dev/null; then
    echo "check-deb: the rkllm user or group is still there after purge" >&2
    exit 1
fi
if in_root test -e /var/lib/rkllm-server || in_root test -e /etc/rkllm-server/config.toml; then
    echo "check-deb: state or configuration is still there after purge" >&2
    exit 1
fi
echo "check-deb: installed, checked and purged cleanly"
# Errors fail the check; warnings are shown.
lintian --tag-display-limit 0 --fail-on error "$deb"
echo "check-deb: lintian finds no error"
