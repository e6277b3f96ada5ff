//! The board as the kernel shows it: the NPU driver and its load, the
//! clocks (devfreq and cpufreq) and their governors, the thermal zones and
//! cooling devices, memory, and the chip from the device tree.
//!
//! Everything is read from files under one root (`[board] sys_root`,
//! `/` on a board; a fake tree in tests): `sys/...`, `proc/...` and `dev/...`
//! beneath it. Reads are cheap and done when asked (a scrape, `doctor`);
//! nothing polls. A source that is missing or unreadable is left out of the
//! [`Snapshot`] with its reason, which [`log_missing_once`] logs once per
//! process. Below `transport`, above `metrics`: it uses nothing of the
//! server but the metrics' sample type.
//!
//! The files are outside input, and bounded where they are read
//! (`file.rs`): regular files only, opened without blocking, within the
//! root, 16 KiB at most each. A whole read is bounded in time (`timed.rs`):
//! past [`READ_BUDGET`] what was read is used, and while a read is stuck in
//! the kernel no other starts.

mod file;
mod read;
mod timed;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::metrics::{BoardSample, BoardSeries};

pub use read::{parse_load, parse_meminfo};
pub use timed::{READ_BUDGET, Sampler, read_within};

/// Where the rknpu driver's debugfs files are read, under the root: the
/// debugfs path itself (readable by root), then the read-only copy the
/// service unit binds there for its unprivileged user.
pub const RKNPU_DEBUG_DIRS: [&str; 2] = ["sys/kernel/debug/rknpu", "run/rkllm-server/rknpu"];

/// The NPU's kernel driver.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "driver", rename_all = "lowercase")]
pub enum NpuDriver {
    /// Rockchip's vendor driver, which RKLLM needs; its version when read.
    Rknpu {
        /// `0.9.8`, from its debugfs `version` file.
        version: Option<String>,
    },
    /// The mainline `accel/rocket` driver (Linux 6.18+), which RKLLM cannot use.
    Rocket,
    /// Neither found.
    None,
}

/// One clock: a devfreq device (NPU, DMC, GPU) or a CPU cluster's policy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Clock {
    /// `npu`, `dmc`, `gpu`, `cpu_policy0`, …
    pub name: String,
    /// Its directory under the root, for messages.
    pub path: String,
    /// Current frequency in Hz.
    pub current_hz: Option<u64>,
    /// The upper limit now set, in Hz.
    pub max_hz: Option<u64>,
    /// Its governor.
    pub governor: Option<String>,
    /// The governors it offers.
    pub available_governors: Vec<String>,
}

/// One thermal zone.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Zone {
    /// `thermal_zone0`, …
    pub zone: String,
    /// Its type (`soc-thermal`, `npu-thermal`, …).
    pub kind: String,
    /// Its temperature.
    pub celsius: f64,
}

/// One cooling device; a state above 0 means the kernel is throttling.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cooling {
    /// `cooling_device0`, …
    pub device: String,
    /// Its type (`cpufreq-cpu0`, `fdab0000.npu`, …).
    pub kind: String,
    /// Current state (0: no throttling).
    pub state: u64,
    /// Highest state.
    pub max_state: u64,
}

/// Memory from `/proc/meminfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Memory {
    /// `MemTotal`, bytes.
    pub total_bytes: u64,
    /// `MemAvailable`, bytes.
    pub available_bytes: u64,
}

/// One of the NPU's device nodes, for `doctor`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NpuNode {
    /// `/dev/dri/renderD129`, `/dev/rknpu` (as on the board, under the root).
    pub path: String,
    /// Whether this process opens it for reading and writing.
    pub opens: bool,
}

/// Which sources a read takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// What `/metrics` shows.
    Metrics,
    /// That, the NPU's device nodes (each opened and closed) and the CPU's
    /// features: what `doctor` looks at.
    Doctor,
}

/// A source that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Missing {
    /// What it is (`npu load`, `dmc devfreq`, …).
    pub source: &'static str,
    /// Why it is absent, with the path.
    pub reason: String,
}

/// What the board shows at one moment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Snapshot {
    /// The root it was read under.
    pub root: PathBuf,
    /// The device tree's `compatible` strings (`radxa,rock-5b`, `rockchip,rk3588`).
    pub compatible: Vec<String>,
    /// `rk3588`, `rk3576`, … from `compatible`.
    pub chip: Option<String>,
    /// The NPU driver.
    pub driver: NpuDriver,
    /// Each NPU core's load, 0–100 %.
    pub npu_load: Option<Vec<u8>>,
    /// Every devfreq device and CPU policy.
    pub clocks: Vec<Clock>,
    /// Every thermal zone with a temperature.
    pub zones: Vec<Zone>,
    /// Every cooling device.
    pub cooling: Vec<Cooling>,
    /// Memory.
    pub memory: Option<Memory>,
    /// The NPU's device nodes ([`Scope::Doctor`] only).
    pub npu_nodes: Vec<NpuNode>,
    /// The words of `proc/cpuinfo`'s `Features` lines ([`Scope::Doctor`]
    /// only).
    pub cpu_features: Vec<String>,
    /// What could not be read.
    pub missing: Vec<Missing>,
    /// Whether every source was read; not when the read was given up on
    /// past its budget (the reason is in `missing`).
    pub finished: bool,
}

impl Snapshot {
    /// Nothing read yet under `root`.
    pub fn empty(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
            compatible: Vec::new(),
            chip: None,
            driver: NpuDriver::None,
            npu_load: None,
            clocks: Vec::new(),
            zones: Vec::new(),
            cooling: Vec::new(),
            memory: None,
            npu_nodes: Vec::new(),
            cpu_features: Vec::new(),
            missing: Vec::new(),
            finished: false,
        }
    }

    /// The clock named `name`.
    pub fn clock(&self, name: &str) -> Option<&Clock> {
        self.clocks.iter().find(|c| c.name == name)
    }

    /// The CPU policies' clocks.
    pub fn cpu_clocks(&self) -> impl Iterator<Item = &Clock> {
        self.clocks.iter().filter(|c| c.name.starts_with("cpu_"))
    }

    /// Whether the device tree names a Rockchip SoC.
    pub fn is_rockchip(&self) -> bool {
        self.compatible.iter().any(|c| c.starts_with("rockchip,"))
    }
}

/// Reads the board under `root`, in this thread and however long it takes
/// (each file is bounded; the time is not: see [`read_within`] and
/// [`Sampler`]).
pub fn read(root: &Path, scope: Scope) -> Snapshot {
    let snapshot = Mutex::new(Snapshot::empty(root));
    read::snapshot(&file::Tree::new(root), scope, &snapshot);
    snapshot.into_inner()
}

/// The memory under `root` (`proc/meminfo`), read as every board file is
/// (bounded, regular files only); `None` when it cannot be read. The tree
/// starts at `proc`, not at `root`: under qemu-user with a sysroot (`-L`),
/// opening `/` itself as a directory gives the sysroot, which has no
/// `proc`, while `/proc` falls through to the host's.
pub fn memory(root: &Path) -> Option<Memory> {
    file::Tree::new(&root.join("proc"))
        .read_text("meminfo")
        .ok()
        .and_then(|text| read::parse_meminfo(&text))
}

/// Logs each missing source's reason the first time it is seen in this
/// process (at info: a board without a source is normal).
pub fn log_missing_once(snapshot: &Snapshot) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut seen = SEEN.lock();
    let seen = seen.get_or_insert_with(HashSet::new);
    for missing in &snapshot.missing {
        if seen.insert(missing.reason.clone()) {
            tracing::info!(
                source = missing.source,
                reason = %missing.reason,
                "a board metric is absent"
            );
        }
    }
}

/// The snapshot as metric samples (`rkllm_npu_…`, `rkllm_clock_…`, …); a
/// source that is absent has no sample.
pub fn samples(snapshot: &Snapshot) -> Vec<BoardSeries> {
    let mut out = Vec::new();
    let mut series = |name: &'static str, help: &'static str, samples: Vec<BoardSample>| {
        if !samples.is_empty() {
            out.push(BoardSeries {
                name,
                help,
                samples,
            });
        }
    };
    let label = |pairs: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    };
    series(
        "npu_load_ratio",
        "Load of each NPU core (0-1), from the rknpu driver",
        snapshot
            .npu_load
            .iter()
            .flatten()
            .enumerate()
            .map(|(core, &pct)| BoardSample {
                labels: label(&[("core", &core.to_string())]),
                value: f64::from(pct) / 100.0,
            })
            .collect(),
    );
    series(
        "npu_driver_info",
        "The NPU's kernel driver and its version (1)",
        match &snapshot.driver {
            NpuDriver::Rknpu { version } => vec![BoardSample {
                labels: label(&[
                    ("driver", "rknpu"),
                    ("version", version.as_deref().unwrap_or("")),
                ]),
                value: 1.0,
            }],
            NpuDriver::Rocket => vec![BoardSample {
                labels: label(&[("driver", "rocket"), ("version", "")]),
                value: 1.0,
            }],
            NpuDriver::None => Vec::new(),
        },
    );
    let clock_values = |get: fn(&Clock) -> Option<u64>| {
        snapshot
            .clocks
            .iter()
            .filter_map(|c| {
                get(c).map(|hz| BoardSample {
                    labels: label(&[("clock", &c.name)]),
                    value: hz as f64,
                })
            })
            .collect::<Vec<_>>()
    };
    series(
        "clock_frequency_hertz",
        "Current frequency of each clock (NPU, DMC/DDR, GPU, CPU clusters)",
        clock_values(|c| c.current_hz),
    );
    series(
        "clock_max_frequency_hertz",
        "Upper frequency limit now set on each clock",
        clock_values(|c| c.max_hz),
    );
    series(
        "clock_governor_info",
        "Governor of each clock (1)",
        snapshot
            .clocks
            .iter()
            .filter_map(|c| {
                c.governor.as_ref().map(|g| BoardSample {
                    labels: label(&[("clock", &c.name), ("governor", g)]),
                    value: 1.0,
                })
            })
            .collect(),
    );
    series(
        "thermal_zone_temperature_celsius",
        "Temperature of each thermal zone",
        snapshot
            .zones
            .iter()
            .map(|z| BoardSample {
                labels: label(&[("zone", &z.zone), ("type", &z.kind)]),
                value: z.celsius,
            })
            .collect(),
    );
    let cooling = |get: fn(&Cooling) -> u64| {
        snapshot
            .cooling
            .iter()
            .map(|c| BoardSample {
                labels: label(&[("device", &c.device), ("type", &c.kind)]),
                value: get(c) as f64,
            })
            .collect::<Vec<_>>()
    };
    series(
        "cooling_state",
        "State of each cooling device (above 0: the kernel is throttling)",
        cooling(|c| c.state),
    );
    series(
        "cooling_max_state",
        "Highest state of each cooling device",
        cooling(|c| c.max_state),
    );
    if let Some(memory) = snapshot.memory {
        series(
            "memory_total_bytes",
            "Memory of the board (MemTotal)",
            vec![BoardSample {
                labels: Vec::new(),
                value: memory.total_bytes as f64,
            }],
        );
        series(
            "memory_available_bytes",
            "Memory available to new work (MemAvailable)",
            vec![BoardSample {
                labels: Vec::new(),
                value: memory.available_bytes as f64,
            }],
        );
    }
    out
}

#[cfg(test)]
mod tests;
