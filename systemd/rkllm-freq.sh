#!/bin/sh
# Sets the frequency governors of the CPU clusters, the NPU and the DDR
# controller on RK3588 and RK3576 boards.
#   rkllm-freq.sh performance   # maximum clocks, for inference
#   rkllm-freq.sh default       # the kernel's usual governors
# Paths: CPU policies under /sys/devices/system/cpu/cpufreq/policy*; the NPU's
# devfreq node is fdab0000.npu on RK3588 and 27700000.npu on RK3576 (matched
# as *.npu); the DDR controller is /sys/class/devfreq/dmc. Files that do not
# exist on a board are skipped.
set -eu
mode=${1:-performance}
case "$mode" in
    performance) cpu=performance; devfreq=performance ;;
    default) cpu=schedutil; devfreq=simple_ondemand ;;
    *) echo "usage: $0 performance|default" >&2; exit 2 ;;
esac
sysfs=${RKLLM_FREQ_SYSFS:-/sys}
soc=$(tr '\0' ' ' < /proc/device-tree/compatible 2>/dev/null || true)
case "$soc" in
    *rk3588*|*rk3576*|"") ;;
    *) echo "rkllm-freq: not an RK3588/RK3576 board ($soc); nothing to do"; exit 0 ;;
esac
set_governor() {
    file=$1 wanted=$2
    [ -w "$file" ] || return 0
    # A devfreq node may not offer the wanted governor (DDR on some kernels).
    available=$(cat "$(dirname "$file")/available_governors" 2>/dev/null || cat "$(dirname "$file")/scaling_available_governors" 2>/dev/null || echo "$wanted")
    case " $available " in
        *" $wanted "*) echo "$wanted" > "$file" && echo "rkllm-freq: $file = $wanted" ;;
        *) echo "rkllm-freq: $file does not offer $wanted (has: $available)" ;;
    esac
}
for policy in "$sysfs"/devices/system/cpu/cpufreq/policy*/scaling_governor; do
    set_governor "$policy" "$cpu"
done
for node in "$sysfs"/class/devfreq/*.npu/governor "$sysfs"/class/devfreq/dmc/governor; do
    set_governor "$node" "$devfreq"
done
