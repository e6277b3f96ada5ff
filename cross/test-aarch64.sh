#!/usr/bin/env bash
# Runs the whole Rust test suite for aarch64 under qemu-user, without Docker:
# the test binaries, the server they start and the fake runtime (built with
# the aarch64 cross compiler) are all aarch64 code. The benchmark tool
# (rkllm-bench) is left out: it measures the machine it runs on, and its own
# test, which starts servers directly, runs on the host with scripts/test.
set -euo pipefail
cd "$(dirname "$0")/.."
cross/setup-aarch64.sh --with-qemu
runner="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner"
export RKLLM_E2E_RUNNER="$runner"
export RKLLM_FAKE_CC=aarch64-linux-gnu-gcc
cargo test --workspace --exclude rkllm-bench --locked --target aarch64-unknown-linux-gnu "$@"
