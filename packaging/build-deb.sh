#!/usr/bin/env bash
# Builds the Debian packages with cargo-deb: amd64 (installed, run and
# removed again, as a check) and arm64 (from the aarch64 release build).
#   packaging/build-deb.sh            # both, into target/debian/
#   packaging/build-deb.sh --no-check # amd64 without installing it
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked --version 3.8.0
cargo deb --locked -p rkllm-server
amd64=$(ls -t target/debian/rkllm-server_*_amd64.deb | head -n1)
echo "built $amd64"
if [ "${1:-}" != "--no-check" ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo dpkg -i "$amd64"
    /usr/bin/rkllm-server --version
    /usr/bin/rkllm-server --check-config          # reads /etc/rkllm-server/config.toml
    getent passwd rkllm >/dev/null
    test -f /lib/systemd/system/rkllm-server.service
    $sudo dpkg --purge rkllm-server
fi
cross/setup-aarch64.sh
if [ ! -x target/aarch64-unknown-linux-gnu/release/rkllm-server ]; then
    cargo build --release --locked --target aarch64-unknown-linux-gnu -p rkllm-server
fi
cargo deb --locked -p rkllm-server --target aarch64-unknown-linux-gnu --no-build
ls -l target/aarch64-unknown-linux-gnu/debian/rkllm-server_*_arm64.deb
