#!/usr/bin/env bash
# Builds the aarch64 release binary without Docker:
#   cross/build-aarch64.sh   ->  target/aarch64-unknown-linux-gnu/release/rkllm-server
set -euo pipefail
cd "$(dirname "$0")/.."
cross/setup-aarch64.sh
cargo build --release --locked --target aarch64-unknown-linux-gnu -p rkllm-server
file target/aarch64-unknown-linux-gnu/release/rkllm-server 2>/dev/null || ls -l target/aarch64-unknown-linux-gnu/release/rkllm-server
