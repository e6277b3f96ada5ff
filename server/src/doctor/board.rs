//! The board's checks: the chip, the NPU driver, its device node and
//! debugfs, the clocks' governors and the DDR clock, temperatures, and the
//! runtime against this chip.

use crate::board::{NpuDriver, Snapshot};

use super::Finding;

/// The rknpu version RKLLM 1.3.0's manual asks for.
const RKNPU_WANTED: (u32, u32, u32) = (0, 9, 8);
/// A zone this hot is close to the kernel's throttling trip points.
const HOT_CELSIUS: f64 = 85.0;

/// The board's findings; `rkllm` says whether the NPU is used (with the
/// mock backend a missing NPU is only a warning). A read of the board given
/// up on past its budget gives one warning instead: what it lacks would
/// read as absent, and findings on it would be wrong.
pub(super) fn check(s: &Snapshot, rkllm: bool) -> Vec<Finding> {
    if !s.finished {
        let why = s
            .missing
            .iter()
            .find(|m| m.source == "board")
            .map_or("the board's read did not finish", |m| m.reason.as_str());
        return vec![Finding::warn(
            "board",
            format!("the board's checks are skipped: {why}"),
            "find what holds that file (a hung filesystem mounted under [board] sys_root, a \
             driver that does not answer)",
        )];
    }
    let mut out = vec![chip(s), driver(s, rkllm)];
    if let Some(found) = device(s, rkllm) {
        out.push(found);
    }
    if matches!(s.driver, NpuDriver::Rknpu { .. }) {
        out.push(load(s));
    }
    out.extend(governors(s));
    out.push(dmc(s));
    out.push(thermal(s));
    out
}

fn chip(s: &Snapshot) -> Finding {
    match &s.chip {
        Some(chip) if chip == "rk3588" || chip == "rk3576" => {
            Finding::ok("chip", format!("{chip} ({})", s.compatible.join(", ")))
        }
        Some(chip) => Finding::warn(
            "chip",
            format!("{chip}: RKLLM runs on RK3588 and RK3576 (and RK3562 with small models)"),
            "run on an RK3588 or RK3576 board",
        ),
        None => Finding::warn(
            "chip",
            if s.compatible.is_empty() {
                "no device tree (proc/device-tree/compatible): not a Rockchip board, or \
                 [board] sys_root does not point at its root"
                    .to_owned()
            } else {
                format!("not a Rockchip SoC ({})", s.compatible.join(", "))
            },
            "run on an RK3588 or RK3576 board; the mock backend runs anywhere",
        ),
    }
}

fn driver(s: &Snapshot, rkllm: bool) -> Finding {
    let severe = |explanation: String, fix: &str| {
        if rkllm && (s.is_rockchip() || matches!(s.driver, NpuDriver::Rocket)) {
            Finding::fail("npu-driver", explanation, fix)
        } else {
            Finding::warn("npu-driver", explanation, fix)
        }
    };
    match &s.driver {
        NpuDriver::Rknpu {
            version: Some(version),
        } => match parse(version) {
            Some(v) if v >= RKNPU_WANTED => {
                Finding::ok("npu-driver", format!("vendor rknpu driver {version}"))
            }
            _ => Finding::warn(
                "npu-driver",
                format!("vendor rknpu driver {version}: RKLLM 1.3.0 asks for 0.9.8 or later"),
                "update the board's vendor kernel (its image or kernel package) to rknpu 0.9.8",
            ),
        },
        NpuDriver::Rknpu { version: None } => Finding::ok(
            "npu-driver",
            "vendor rknpu driver (its version is in debugfs, not readable here)",
        ),
        NpuDriver::Rocket => severe(
            "the mainline accel/rocket NPU driver is loaded: RKLLM needs the vendor kernel's \
             rknpu driver (0.9.x) and cannot run on rocket"
                .to_owned(),
            "boot the board vendor's kernel (Rockchip BSP 5.10/6.1, e.g. the Armbian \
             'vendor' or the board maker's image), which has rknpu",
        ),
        NpuDriver::None => severe(
            "no NPU driver found (neither rknpu nor rocket under sys/bus/platform/drivers)"
                .to_owned(),
            "boot a vendor kernel with the rknpu driver (Rockchip BSP 5.10/6.1)",
        ),
    }
}

/// The NPU's device node, and whether this process may open it.
fn device(s: &Snapshot, rkllm: bool) -> Option<Finding> {
    if !matches!(s.driver, NpuDriver::Rknpu { .. }) {
        return None;
    }
    if s.npu_nodes.is_empty() {
        let explanation = "no NPU device node (dev/dri/renderD* or dev/rknpu)".to_owned();
        let fix = "check that the rknpu driver probed (dmesg | grep -i rknpu)";
        return Some(if rkllm {
            Finding::fail("npu-device", explanation, fix)
        } else {
            Finding::warn("npu-device", explanation, fix)
        });
    }
    let shown = s
        .npu_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let open: Vec<_> = s.npu_nodes.iter().filter(|n| n.opens).collect();
    Some(if open.is_empty() {
        Finding::warn(
            "npu-device",
            format!("{shown}: this user cannot open them for reading and writing"),
            "the service's user needs the nodes' group (render or video: the unit's \
             SupplementaryGroups); for a shell, `sudo usermod -aG render,video $USER`",
        )
    } else {
        Finding::ok("npu-device", format!("{shown} (this user can open them)"))
    })
}

fn load(s: &Snapshot) -> Finding {
    match &s.npu_load {
        Some(cores) => Finding::ok(
            "npu-load",
            format!(
                "NPU load readable ({} core(s)): rkllm_npu_load_ratio is in /metrics",
                cores.len()
            ),
        ),
        None => Finding::warn(
            "npu-load",
            s.missing
                .iter()
                .find(|m| m.source == "npu load")
                .map_or_else(
                    || "the NPU load cannot be read".to_owned(),
                    |m| format!("the NPU load cannot be read: {}", m.reason),
                ),
            "run the packaged service (its unit binds /sys/kernel/debug/rknpu read-only at \
             /run/rkllm-server/rknpu), or run doctor with sudo",
        ),
    }
}

/// The CPU, NPU and DDR governors: `performance` once rkllm-freq.service ran.
fn governors(s: &Snapshot) -> Vec<Finding> {
    let clocks: Vec<_> = s
        .clocks
        .iter()
        .filter(|c| c.name == "npu" || c.name == "dmc" || c.name.starts_with("cpu_"))
        .filter(|c| c.governor.is_some())
        .collect();
    if clocks.is_empty() {
        return Vec::new();
    }
    let slow: Vec<String> = clocks
        .iter()
        .filter(|c| c.governor.as_deref() != Some("performance"))
        .map(|c| format!("{} {}", c.name, c.governor.as_deref().unwrap_or("?")))
        .collect();
    vec![if slow.is_empty() {
        Finding::ok(
            "governors",
            format!(
                "performance on {} (the clock fix, rkllm-freq.service, ran)",
                clocks
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    } else {
        Finding::warn(
            "governors",
            format!(
                "not at performance: {} (the clock fix has not run): the clocks ramp up late \
                 and decode is slower",
                slow.join(", ")
            ),
            "sudo systemctl enable --now rkllm-freq (or run /usr/lib/rkllm-server/rkllm-freq.sh \
             performance as root)",
        )
    }]
}

fn dmc(s: &Snapshot) -> Finding {
    match s.clock("dmc") {
        Some(c) => Finding::ok(
            "dmc",
            format!(
                "DDR clock (DMC devfreq) {} of {}",
                mhz(c.current_hz),
                mhz(c.max_hz)
            ),
        ),
        None => Finding::warn(
            "dmc",
            "no DDR frequency scaling (no sys/class/devfreq/dmc): decode is memory-bound, and \
             on such firmware runs far below the published speeds (rknn-llm #532)",
            "use a board image whose kernel and firmware have DMC DVFS (the board maker's \
             latest vendor image)",
        ),
    }
}

fn thermal(s: &Snapshot) -> Finding {
    let hottest = s
        .zones
        .iter()
        .max_by(|a, b| a.celsius.total_cmp(&b.celsius));
    let throttling: Vec<String> = s
        .cooling
        .iter()
        .filter(|c| c.state > 0)
        .map(|c| format!("{} at {}/{}", c.kind, c.state, c.max_state))
        .collect();
    let Some(hot) = hottest else {
        return Finding::warn(
            "thermal",
            "no thermal zone readable",
            "check that sys/class/thermal exists under [board] sys_root",
        );
    };
    if !throttling.is_empty() || hot.celsius >= HOT_CELSIUS {
        Finding::warn(
            "thermal",
            format!(
                "hottest {} at {:.1} °C; throttling: {}",
                hot.kind,
                hot.celsius,
                if throttling.is_empty() {
                    "none yet".to_owned()
                } else {
                    throttling.join(", ")
                }
            ),
            "add a heatsink and fan; a throttled NPU or CPU decodes slower",
        )
    } else {
        Finding::ok(
            "thermal",
            format!(
                "hottest {} at {:.1} °C, no throttling",
                hot.kind, hot.celsius
            ),
        )
    }
}

/// The runtime that loaded, against this chip: 1.3.0 as released uses SVE,
/// which RK3588's cores lack (rknn-llm #518).
pub(super) fn runtime(s: &Snapshot, loaded: Option<(Option<&str>, &str, &str)>) -> Finding {
    let Some((version, describe, abi)) = loaded else {
        return Finding::ok("runtime", "no runtime loaded");
    };
    let sve = s.cpu_features.iter().any(|f| f == "sve");
    if version == Some("1.3.0") && s.chip.as_deref() == Some("rk3588") && !sve {
        return Finding::fail(
            "runtime",
            format!(
                "{describe}: the released 1.3.0 library uses SVE instructions, which RK3588's \
                 cores lack: it dies with \"Illegal instruction\" (rknn-llm #518)"
            ),
            "install runtime 1.2.3 (librkllmrt.so from rknn-llm release-v1.2.3) with models \
             converted for it, or a 1.3.x build fixed for RK3588",
        );
    }
    match version {
        Some(_) => Finding::ok("runtime", format!("{describe}, ABI {abi}")),
        None => Finding::warn(
            "runtime",
            format!("{describe}: the library carries no version string; ABI {abi}"),
            "set runtime_abi (--runtime-abi) to the ABI of this library if start-up guessed wrong",
        ),
    }
}

fn parse(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

fn mhz(hz: Option<u64>) -> String {
    hz.map_or_else(|| "?".to_owned(), |hz| format!("{} MHz", hz / 1_000_000))
}
