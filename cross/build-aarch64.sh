#!/usr/bin/env bash
# Builds the aarch64 release binary without Docker, against glibc 2.31 so
# that it runs on Debian 11, Ubuntu 20.04 and every newer board image:
#   cross/build-aarch64.sh   ->  target/aarch64-unknown-linux-gnu/release/rkllm-server
# The linker is zig (cargo-zigbuild), installed from PyPI into
# target/zig-venv on first use; then cross/check-aarch64-release.sh checks
# the result (symbol versions, and a run under qemu-user).
set -euo pipefail
cd "$(dirname "$0")/.."
cross/setup-aarch64.sh
glibc=2.31
venv=target/zig-venv
if ! "$venv/bin/cargo-zigbuild" --version >/dev/null 2>&1 || ! "$venv/bin/python" -m ziglang version >/dev/null 2>&1; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "cargo-zigbuild==0.24.0" "ziglang==0.17.1"
fi
PATH="$PWD/$venv/bin:$PATH" cargo zigbuild --release --locked \
    --target "aarch64-unknown-linux-gnu.$glibc" -p rkllm-server
cross/check-aarch64-release.sh "$glibc"
