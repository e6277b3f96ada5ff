#!/bin/sh
# Writes the fake /sys, /proc and /dev trees the board tests read, one
# folder per board layout, in the kernel's own formats (sizes kept small).
# The trees are committed; this script is how they were made and how to
# change them. Usage: tests/fake-sys/make-trees.sh (from anywhere).
set -eu
cd "$(dirname "$0")"
put() { mkdir -p "$(dirname "$1")"; printf '%b' "$2" > "$1"; }
devfreq() { # root name cur max governor available
    d=$1/sys/class/devfreq/$2
    put "$d/cur_freq" "$3\n"; put "$d/max_freq" "$4\n"; put "$d/governor" "$5\n"
    put "$d/available_governors" "$6\n"
}
policy() { # root n cur_khz max_khz governor
    d=$1/sys/devices/system/cpu/cpufreq/policy$2
    put "$d/scaling_cur_freq" "$3\n"; put "$d/scaling_max_freq" "$4\n"
    put "$d/scaling_governor" "$5\n"
    put "$d/scaling_available_governors" "conservative ondemand userspace powersave performance schedutil\n"
}
zone() { # root n type millidegrees
    put "$1/sys/class/thermal/thermal_zone$2/type" "$3\n"
    put "$1/sys/class/thermal/thermal_zone$2/temp" "$4\n"
}
cooling() { # root n type cur max
    put "$1/sys/class/thermal/cooling_device$2/type" "$3\n"
    put "$1/sys/class/thermal/cooling_device$2/cur_state" "$4\n"
    put "$1/sys/class/thermal/cooling_device$2/max_state" "$5\n"
}
meminfo() { # root total_kb available_kb
    put "$1/proc/meminfo" "MemTotal:       $2 kB\nMemFree:         1048576 kB\nMemAvailable:   $3 kB\nBuffers:           20480 kB\nCached:           524288 kB\n"
}
rknpu() { # root version load
    put "$1/sys/kernel/debug/rknpu/version" "RKNPU driver: v$2\n"
    put "$1/sys/kernel/debug/rknpu/load" "$3\n"
    put "$1/sys/bus/platform/drivers/RKNPU/uevent" ""
    put "$1/dev/dri/renderD129" ""
}
rk3588() { # root: an RK3588 board after rkllm-freq.service ran
    r=$1
    rm -rf "$r"
    put "$r/proc/device-tree/compatible" "radxa,rock-5b\0rockchip,rk3588\0"
    put "$r/proc/device-tree/model" "Radxa ROCK 5B\0"
    meminfo "$r" 16303184 14155776
    devfreq "$r" fdab0000.npu 1000000000 1000000000 performance "rknpu_ondemand userspace powersave performance simple_ondemand"
    devfreq "$r" dmc 2112000000 2112000000 performance "dmc_ondemand userspace powersave performance simple_ondemand"
    devfreq "$r" fb000000.gpu 300000000 1000000000 simple_ondemand "userspace powersave performance simple_ondemand"
    policy "$r" 0 1800000 1800000 performance
    policy "$r" 4 2256000 2256000 performance
    policy "$r" 6 2256000 2256000 performance
    zone "$r" 0 soc-thermal 46250; zone "$r" 1 bigcore0-thermal 45375
    zone "$r" 2 bigcore1-thermal 45375; zone "$r" 3 littlecore-thermal 46250
    zone "$r" 4 center-thermal 45375; zone "$r" 5 gpu-thermal 44500
    zone "$r" 6 npu-thermal 47125
    cooling "$r" 0 cpufreq-cpu0 0 12; cooling "$r" 1 cpufreq-cpu4 0 14
    cooling "$r" 2 cpufreq-cpu6 0 14; cooling "$r" 3 devfreq-fb000000.gpu 0 4
    cooling "$r" 4 devfreq-fdab0000.npu 0 4
}
rk3588 rk3588
rknpu rk3588 0.9.8 "NPU load:  Core0: 12%, Core1:  0%, Core2:  0%,"

# RK3576: two CPU clusters, a two-core NPU, the kernel's default governors.
r=rk3576
rm -rf "$r"
put "$r/proc/device-tree/compatible" "armsom,sige5\0rockchip,rk3576\0"
meminfo "$r" 8049620 6815744
devfreq "$r" 27700000.npu 950000000 950000000 simple_ondemand "userspace powersave performance simple_ondemand"
devfreq "$r" dmc 1560000000 2112000000 dmc_ondemand "dmc_ondemand userspace powersave performance simple_ondemand"
policy "$r" 0 1416000 2016000 schedutil
policy "$r" 4 1608000 2208000 schedutil
zone "$r" 0 soc-thermal 51875; zone "$r" 1 bigcore-thermal 50937
zone "$r" 2 littlecore-thermal 51875; zone "$r" 3 gpu-thermal 49062
zone "$r" 4 npu-thermal 52812; zone "$r" 5 ddr-thermal 48125
cooling "$r" 0 cpufreq-cpu0 0 10; cooling "$r" 1 cpufreq-cpu4 3 12
rknpu "$r" 0.9.8 "NPU load:  Core0: 35%, Core1: 33%,"

# RK3588 whose firmware has no DDR frequency scaling (no dmc devfreq).
rk3588 rk3588-no-dmc
rm -rf rk3588-no-dmc/sys/class/devfreq/dmc
rknpu rk3588-no-dmc 0.9.6 "NPU load:  Core0:  0%, Core1:  0%, Core2:  0%,"

# RK3588 on a mainline kernel: the accel/rocket driver, no rknpu.
rk3588 rk3588-rocket
put rk3588-rocket/sys/module/rocket/refcnt "0\n"
put rk3588-rocket/sys/bus/platform/drivers/rocket/uevent ""
put rk3588-rocket/dev/accel/accel0 ""
rm -rf rk3588-rocket/sys/class/devfreq/fdab0000.npu

# RK3588 with rknpu as the unprivileged service sees it without the unit's
# bind mount: the driver is there, its debugfs files are not readable.
rk3588 rk3588-debugfs-closed
put rk3588-debugfs-closed/sys/bus/platform/drivers/RKNPU/uevent ""
put rk3588-debugfs-closed/dev/dri/renderD129 ""
