#!/usr/bin/env bash
# Sets a package's Depends from what its binary actually uses: the shared
# libraries it needs (NEEDED) and the newest glibc symbol version it asks
# for, instead of the version of the C library it was built against.
#   packaging/set-depends.sh PACKAGE.deb BINARY OBJDUMP
set -euo pipefail
deb=$1 bin=$2 objdump=$3
glibc=$("$objdump" -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)
depends="libc6 (>= $glibc)"
for lib in $("$objdump" -p "$bin" | awk '/NEEDED/ { print $2 }'); do
    case "$lib" in
        libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*) ;;
        libgcc_s.so.1) depends="$depends, libgcc-s1" ;;
        *) echo "set-depends: no package known for $lib, needed by $bin" >&2; exit 1 ;;
    esac
done
depends="$depends, adduser"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
dpkg-deb -R "$deb" "$dir/root"
sed -i "s/^Depends: .*/Depends: $depends/" "$dir/root/DEBIAN/control"
grep -q "^Depends: $depends\$" "$dir/root/DEBIAN/control"
dpkg-deb --root-owner-group -Zxz --build "$dir/root" "$deb" >/dev/null
echo "$deb: Depends: $depends"
