#!/usr/bin/env bash
# Tests the aarch64 build under qemu-user, without Docker, where the
# architecture matters:
#  1. the ABI crates' layout tests (rkllm-sys, rknn-sys: struct sizes and
#     offsets against RKLLM_ABI.md), built for aarch64 and run under qemu;
#  2. the end-to-end tests that touch the FFI, the runner processes and the
#     runtime test double (the tests/e2e modules that start the double or
#     runner processes), run by the host's test binary against the aarch64
#     release binary (cross/build-aarch64.sh) under qemu, with the double
#     built by the aarch64 cross compiler. The server, its runner processes
#     and the double are all aarch64 code; the tests are the client.
# The other tests (the plan's tables, the APIs on the mock, the clients)
# do not depend on the architecture and run natively in scripts/test.
#   cross/test-aarch64.sh            # both
#   cross/test-aarch64.sh TESTNAME   # the end-to-end tests matching a name
set -euo pipefail
cd "$(dirname "$0")/.."
cross/setup-aarch64.sh --with-qemu
runner="qemu-aarch64 -L /usr/aarch64-linux-gnu"
bin=target/aarch64-unknown-linux-gnu/release/rkllm-server
[ -x "$bin" ] || cross/build-aarch64.sh

started=$(date +%s)
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner" \
    cargo test --locked --target aarch64-unknown-linux-gnu -p rkllm-sys -p rknn-sys
echo "test-aarch64: layout tests under qemu-user in $(( $(date +%s) - started )) s"

# The modules that start the runtime test double (or its RKNN one) or runner
# processes: each is listed by name, so a new one is picked up.
if [ $# -gt 0 ]; then
    filters=("$@")
else
    mapfile -t filters < <(grep -l -E 'fake_runtime|Fake::|start_on_fake|fake_rknn_runtime|crash_after|stall_after' tests/e2e/*.rs \
        | xargs -n1 basename | sed 's/\.rs$//' | grep -v '^harness$' | sed 's/$/::/')
fi
echo "test-aarch64: end-to-end modules under qemu-user: ${filters[*]}"

# A process forked under qemu-user can deadlock before its exec (a lock of
# the emulator held by another thread at the fork); the suite then never
# ends. A run that outlives the limit is said so and run once more; a run
# that fails is not.
run_tests() {
    RKLLM_E2E_SERVER="$PWD/$bin" RKLLM_E2E_RUNNER="$runner" RKLLM_FAKE_CC=aarch64-linux-gnu-gcc \
        cargo test --workspace --locked --test e2e -- "$@"
}
limit="${RKLLM_AARCH64_TEST_TIMEOUT:-1500}"
started=$(date +%s)
set +e
timeout --kill-after=30 "$limit" bash -c "$(declare -f run_tests); bin=$bin; runner='$runner'; run_tests \"\$@\"" run_tests "${filters[@]}"
status=$?
set -e
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "test-aarch64: the tests under qemu-user did not end within $limit s (a process forked under the emulator can deadlock before its exec); running them once more" >&2
    run_tests "${filters[@]}"
elif [ "$status" != 0 ]; then
    exit "$status"
fi
echo "test-aarch64: end-to-end tests on the aarch64 binary under qemu-user in $(( $(date +%s) - started )) s"
