#!/usr/bin/env bash
# Checks the unit files with `systemd-analyze verify` (CI runs it). The units
# name installed paths; this copies them with those paths pointing at the
# repository's files, which is all verify needs to find.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v systemd-analyze >/dev/null; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends systemd
fi
binary=${1:-$PWD/target/debug/rkllm-server}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for unit in systemd/*.service; do
    sed -e "s|/usr/bin/rkllm-server|$binary|" \
        -e "s|/usr/lib/rkllm-server/rkllm-freq.sh|$PWD/systemd/rkllm-freq.sh|" "$unit" > "$tmp/$(basename "$unit")"
done
out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$tmp"/*.service 2>&1 || true)
# Lines about the host's own units are not ours.
ours=$(printf '%s\n' "$out" | grep -F "$tmp" || true)
if [ -n "$ours" ]; then
    printf '%s\n' "$ours" >&2
    exit 1
fi
echo "systemd units verified"
