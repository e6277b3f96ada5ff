#!/usr/bin/env bash
# Checks the aarch64 release binary: it asks for no glibc symbol newer
# than the given version (default 2.31), its code is laid out by
# server/hot-text.ld, and it starts under qemu-user,
# loads a test double of the RKLLM runtime (built here with the aarch64
# cross compiler) and generates text with it.
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-2.31}
bin=target/aarch64-unknown-linux-gnu/release/rkllm-server
highest=$(aarch64-linux-gnu-objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)
echo "$bin: highest glibc symbol version $highest (bound $max)"
if [ "$(printf '%s\n%s\n' "$highest" "$max" | sort -V | tail -n1)" != "$max" ]; then
    echo "the aarch64 binary needs glibc $highest, newer than $max" >&2
    exit 1
fi
# The start's functions are laid out together (server/hot-text.ld).
scripts/hot-text check "$bin"
cross/setup-aarch64.sh --with-qemu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
aarch64-linux-gnu-gcc -shared -fPIC -O1 -DFAKE_ABI_V1_3 -I rkllm-sys/include \
    tests/fake-rkllmrt/fake_rkllmrt.c -o "$dir/librkllmrt.so" -lpthread
echo "not a real model" > "$dir/model.rkllm"
# The model runs in a runner process, the same binary: under qemu too.
emu="qemu-aarch64 -L /usr/aarch64-linux-gnu"
run=($emu "$bin" --backend rkllm --runtime "$dir/librkllmrt.so" --model "$dir/model.rkllm" --runner-prefix "$emu")
"${run[@]}" --check-config
reply=$(printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"run","params":{"prompt":"hello","max_tokens":8}}' \
    | "${run[@]}" --stdio --log-level warn)
echo "$reply"
case "$reply" in
    *'"finish_reason"'*'"text"'* | *'"text"'*'"finish_reason"'*) echo "the aarch64 release binary generates text" ;;
    *) echo "no generation from the aarch64 release binary" >&2; exit 1 ;;
esac
