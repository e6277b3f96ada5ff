#!/usr/bin/env bash
# Builds the Debian packages with dpkg-deb (packaging/deb.sh, nothing to
# compile), amd64 and arm64 (the arm64 binary from cross/build-aarch64.sh,
# against glibc 2.31), each with the shell completions and the manual page
# generated from the CLI definition and a Depends computed from what its
# binary uses (packaging/set-depends.sh).
#   packaging/build-deb.sh            # both, into target/debian/ and
#                                     # target/aarch64-unknown-linux-gnu/debian/
#   packaging/build-deb.sh --check    # also installs the amd64 package in a
#                                     # throwaway Debian root, checks it and
#                                     # purges it (packaging/check-deb.sh);
#                                     # nothing is installed on this machine
#   packaging/build-deb.sh --check --amd64-binary target/debug/rkllm-server
#                                     # the amd64 package around a binary
#                                     # built already (CI: the tests' own
#                                     # debug build; the package is what is
#                                     # checked, not the optimiser), in
#                                     # target/deb-check/
set -euo pipefail
cd "$(dirname "$0")/.."
check=""
amd64_binary=""
while [ $# -gt 0 ]; do
    case "$1" in
        --check) check=1 ;;
        --amd64-binary) amd64_binary="$2"; shift ;;
        *) echo "build-deb.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ -n "$amd64_binary" ]; then
    server=$amd64_binary
    out=target/deb-check
else
    cargo build --release --locked -p rkllm-server
    server=target/release/rkllm-server
    out=target/debian
fi
assets=target/deb-assets
mkdir -p "$assets"
"$server" --completions bash > "$assets/rkllm-server.bash"
"$server" --completions zsh > "$assets/_rkllm-server"
"$server" --completions fish > "$assets/rkllm-server.fish"
"$server" --man-page | gzip -9n > "$assets/rkllm-server.1.gz"
gzip -9n < CHANGELOG.md > "$assets/changelog.gz"
amd64=$(packaging/deb.sh amd64 "$server" objdump "$out")

cross/setup-aarch64.sh
arm_bin=target/aarch64-unknown-linux-gnu/release/rkllm-server
[ -x "$arm_bin" ] || cross/build-aarch64.sh
arm64=$(packaging/deb.sh arm64 "$arm_bin" aarch64-linux-gnu-objdump target/aarch64-unknown-linux-gnu/debian)
# Board images from Debian 11 and Ubuntu 20.04 on (glibc 2.31) can install it.
dpkg-deb -f "$arm64" Depends | grep -Eq 'libc6 \(>= 2\.(2[0-9]|3[01])(\.[0-9]+)?\)' || {
    echo "the arm64 package asks for a libc6 newer than 2.31: $(dpkg-deb -f "$arm64" Depends)" >&2
    exit 1
}
ls -l "$amd64" "$arm64"

if [ -n "$check" ]; then
    packaging/check-deb.sh "$amd64"
fi
