#!/usr/bin/env bash
# Makes the Debian package of one architecture around a binary built
# already, with dpkg-deb (no tool to compile): the binary, the units, the
# documented config as a conffile, the frequency script, the docs, the
# completions and the manual page (target/deb-assets, written by
# packaging/build-deb.sh), the maintainer scripts of packaging/debian/; the
# Depends from what the binary uses (packaging/set-depends.sh).
#   packaging/deb.sh ARCH BINARY OBJDUMP OUT_DIR   # prints the .deb's path
set -euo pipefail
cd "$(dirname "$0")/.."
arch=$1 bin=$2 objdump=$3 out=$4
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
package=rkllm-server
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
# SOURCE DEST MODE
put() {
    install -D -m "$3" "$1" "$root/$2"
}
put "$bin" usr/bin/rkllm-server 755
# Without its debugging information, as a packaged binary is shipped (the
# strip of the objdump's toolchain: the binary's architecture).
"${objdump%objdump}strip" --strip-unneeded "$root/usr/bin/rkllm-server"
put config/rkllm-server.toml etc/rkllm-server/config.toml 644
put systemd/rkllm-server.service lib/systemd/system/rkllm-server.service 644
put systemd/rkllm-freq.service lib/systemd/system/rkllm-freq.service 644
put systemd/rkllm-freq.sh usr/lib/rkllm-server/rkllm-freq.sh 755
doc=usr/share/doc/$package
for page in docs/*.md; do
    put "$page" "$doc/$(basename "$page")" 644
done
put docs/images/chat-page.png "$doc/images/chat-page.png" 644
put deploy/haproxy/haproxy.cfg "$doc/examples/haproxy.cfg" 644
put README.md "$doc/README.md" 644
put target/deb-assets/changelog.gz "$doc/changelog.gz" 644
put LICENSE-MIT "$doc/LICENSE-MIT" 644
put LICENSE-APACHE "$doc/LICENSE-APACHE" 644
gzip -9n < packaging/debian/changelog > "$root/changelog.Debian.gz"
put "$root/changelog.Debian.gz" "$doc/changelog.Debian.gz" 644
rm "$root/changelog.Debian.gz"
cat > "$root/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: $package
Source: https://github.com/rkllm-server/rkllm-server
Copyright: 2026, rkllm-server developers <rkllm-server@example.org>
License: MIT OR Apache-2.0
COPYRIGHT
put "$root/copyright" "$doc/copyright" 644
rm "$root/copyright"
put target/deb-assets/rkllm-server.bash usr/share/bash-completion/completions/rkllm-server 644
put target/deb-assets/_rkllm-server usr/share/zsh/vendor-completions/_rkllm-server 644
put target/deb-assets/rkllm-server.fish usr/share/fish/vendor_completions.d/rkllm-server.fish 644
put target/deb-assets/rkllm-server.1.gz usr/share/man/man1/rkllm-server.1.gz 644
mkdir -p "$root/DEBIAN"
install -m 755 packaging/debian/postinst packaging/debian/postrm "$root/DEBIAN/"
echo /etc/rkllm-server/config.toml > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: $package
Version: $version-1
Architecture: $arch
Homepage: https://github.com/rkllm-server/rkllm-server
Section: net
Priority: optional
Maintainer: rkllm-server developers <rkllm-server@example.org>
Installed-Size: $size
Depends: adduser
Description: Streaming token-generation server for Rockchip RK3588/RK3576 NPUs (RKLLM
 runtime)
 A streaming token-generation server for Rockchip RK3588/RK3576 NPUs (RKLLM
 runtime): JSON-RPC over HTTP, WebSocket and stdio, MCP, and the OpenAI and
 Ollama APIs.
CONTROL
mkdir -p "$out"
deb="$out/${package}_${version}-1_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
packaging/set-depends.sh "$deb" "$bin" "$objdump" >&2
echo "$deb"
