#!/usr/bin/env bash
# Installs what building and testing for aarch64 without Docker needs:
# rustup's aarch64 target, Debian's cross gcc and, for tests, qemu-user.
# Idempotent: installs only what is missing.
set -euo pipefail
target=aarch64-unknown-linux-gnu
if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi
need=()
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if [ "${1:-}" = "--with-qemu" ]; then
    command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
fi
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
fi
