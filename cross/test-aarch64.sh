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
run_tests() {
    cargo test --workspace --exclude rkllm-bench --locked --target aarch64-unknown-linux-gnu "$@"
}
# A process forked under qemu-user can deadlock before its exec (a lock of
# the emulator held by another thread at the fork); the suite then never
# ends. A run that outlives the limit is said so and run once more; a run
# that fails is not.
limit="${RKLLM_AARCH64_TEST_TIMEOUT:-2400}"
set +e
timeout --kill-after=30 "$limit" bash -c "$(declare -f run_tests); run_tests \"\$@\"" run_tests "$@"
status=$?
set -e
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "test-aarch64: the tests under qemu-user did not end within $limit s (a process forked under the emulator can deadlock before its exec); running them once more" >&2
    run_tests "$@"
elif [ "$status" != 0 ]; then
    exit "$status"
fi
