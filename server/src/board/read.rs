//! Reading the files of the board and parsing what they say.

use parking_lot::Mutex;

use super::file::Tree;
use super::{
    Clock, Cooling, Memory, Missing, NpuDriver, NpuNode, RKNPU_DEBUG_DIRS, Scope, Snapshot, Zone,
};

/// Reads every source of `scope` from `tree` into `into`, one source after
/// the other, each put there as soon as it is read (so that a read given
/// up on has what it read); marks it finished at the end.
pub(super) fn snapshot(tree: &Tree<'_>, scope: Scope, into: &Mutex<Snapshot>) {
    let mut missing = Vec::new();
    let compatible = read_compatible(tree, &mut missing);
    let chip = chip_of(&compatible);
    put(into, &mut missing, |s| {
        (s.compatible, s.chip) = (compatible, chip)
    });
    let (driver, load) = npu(tree, &mut missing);
    put(into, &mut missing, |s| {
        (s.driver, s.npu_load) = (driver, load)
    });
    let clocks = devfreq(tree, &mut missing);
    put(into, &mut missing, |s| s.clocks.extend(clocks));
    let clocks = cpufreq(tree, &mut missing);
    put(into, &mut missing, |s| s.clocks.extend(clocks));
    let (zones, cooling) = thermal(tree, &mut missing);
    put(into, &mut missing, |s| {
        (s.zones, s.cooling) = (zones, cooling)
    });
    let memory = match tree.read_text("proc/meminfo") {
        Ok(text) => parse_meminfo(&text),
        Err(err) => {
            missing.push(Missing {
                source: "memory",
                reason: format!("{}: {err}", tree.path("proc/meminfo").display()),
            });
            None
        }
    };
    put(into, &mut missing, |s| s.memory = memory);
    if scope == Scope::Doctor {
        let nodes = npu_nodes(tree);
        put(into, &mut missing, |s| s.npu_nodes = nodes);
        let features = cpu_features(tree);
        put(into, &mut missing, |s| s.cpu_features = features);
    }
    into.lock().finished = true;
}

/// Puts what one source gave into the snapshot, with its missing parts.
fn put(into: &Mutex<Snapshot>, missing: &mut Vec<Missing>, fill: impl FnOnce(&mut Snapshot)) {
    let mut snapshot = into.lock();
    fill(&mut snapshot);
    snapshot.missing.append(missing);
}

fn read_compatible(tree: &Tree<'_>, missing: &mut Vec<Missing>) -> Vec<String> {
    let rel = "proc/device-tree/compatible";
    match tree.read(rel) {
        Ok(bytes) => bytes
            .split(|&b| b == 0 || b == b'\n')
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).trim().to_owned())
            .collect(),
        Err(err) => {
            missing.push(Missing {
                source: "device tree",
                reason: format!("{}: {err}", tree.path(rel).display()),
            });
            Vec::new()
        }
    }
}

/// `rk3588` from `rockchip,rk3588` (the last Rockchip SoC named wins over
/// none; an `s` variant such as `rk3588s` counts as its chip).
fn chip_of(compatible: &[String]) -> Option<String> {
    compatible
        .iter()
        .filter_map(|c| c.strip_prefix("rockchip,"))
        .find(|soc| soc.starts_with("rk") && soc[2..].chars().take(4).all(|c| c.is_ascii_digit()))
        .map(|soc| soc.chars().take(6).collect())
}

fn npu(tree: &Tree<'_>, missing: &mut Vec<Missing>) -> (NpuDriver, Option<Vec<u8>>) {
    let rocket = ["sys/bus/platform/drivers/rocket", "sys/module/rocket"]
        .iter()
        .any(|p| tree.exists(p));
    let rknpu_present = ["sys/bus/platform/drivers/RKNPU", "sys/module/rknpu"]
        .iter()
        .any(|p| tree.exists(p));
    // The first debugfs directory that can be listed.
    let mut debug_dir = None;
    let mut denied = Vec::new();
    for dir in RKNPU_DEBUG_DIRS {
        match tree.list(dir) {
            Ok(_) => {
                debug_dir = Some(dir);
                break;
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => denied.push(format!("{}: {err}", tree.path(dir).display())),
        }
    }
    let mut version = None;
    let mut load = None;
    if let Some(dir) = debug_dir {
        let version_file = format!("{dir}/version");
        match tree.read_text(&version_file) {
            Ok(text) => version = parse_version(&text),
            Err(err) => missing.push(Missing {
                source: "rknpu version",
                reason: format!("{}: {err}", tree.path(&version_file).display()),
            }),
        }
        let load_file = format!("{dir}/load");
        match tree.read_text(&load_file) {
            Ok(text) => {
                load = parse_load(&text);
                if load.is_none() {
                    missing.push(Missing {
                        source: "npu load",
                        reason: format!(
                            "{}: not in the form `NPU load:  Core0: 12%, …`",
                            tree.path(&load_file).display()
                        ),
                    });
                }
            }
            Err(err) => missing.push(Missing {
                source: "npu load",
                reason: format!("{}: {err}", tree.path(&load_file).display()),
            }),
        }
    } else if rknpu_present || !denied.is_empty() {
        let why = if denied.is_empty() {
            format!(
                "no rknpu debugfs directory ({}; debugfs is readable by root only: \
                 the service unit binds it read-only at /run/rkllm-server/rknpu)",
                RKNPU_DEBUG_DIRS.join(", ")
            )
        } else {
            format!(
                "{} (debugfs is readable by root only: the service unit binds it \
                 read-only at /run/rkllm-server/rknpu)",
                denied.join("; ")
            )
        };
        missing.push(Missing {
            source: "npu load",
            reason: why,
        });
    }
    let driver = if debug_dir.is_some() || rknpu_present {
        NpuDriver::Rknpu { version }
    } else if rocket {
        NpuDriver::Rocket
    } else if !denied.is_empty() {
        // Something is there but unreadable: most likely rknpu.
        NpuDriver::Rknpu { version: None }
    } else {
        NpuDriver::None
    };
    (driver, load)
}

/// `0.9.8` from `RKNPU driver: v0.9.8`.
fn parse_version(text: &str) -> Option<String> {
    let word = text.split_whitespace().last()?;
    let version = word.trim_start_matches('v');
    version
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit())
        .then(|| version.to_owned())
}

/// Each core's percentage from the rknpu driver's `load`:
/// `NPU load:  Core0: 12%, Core1:  0%, Core2:  0%,` (one core: `NPU load:  5%`).
pub fn parse_load(text: &str) -> Option<Vec<u8>> {
    let rest = text.trim().strip_prefix("NPU load:")?;
    let mut cores = Vec::new();
    for part in rest.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let value = part.rsplit(':').next()?.trim().strip_suffix('%')?.trim();
        cores.push(value.parse::<u8>().ok()?.min(100));
    }
    (!cores.is_empty()).then_some(cores)
}

/// `MemTotal` and `MemAvailable` (kB in the file) in bytes.
pub fn parse_meminfo(text: &str) -> Option<Memory> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kb = rest.split_whitespace().next()?.parse::<u64>().ok()?;
            Some(kb.saturating_mul(1024))
        })
    };
    Some(Memory {
        total_bytes: field("MemTotal")?,
        available_bytes: field("MemAvailable")?,
    })
}

fn read_trimmed(tree: &Tree<'_>, rel: &str) -> Option<String> {
    tree.read_text(rel).ok().map(|s| s.trim().to_owned())
}

fn read_number(tree: &Tree<'_>, rel: &str) -> Option<u64> {
    read_trimmed(tree, rel)?.parse().ok()
}

/// The names in the directory `rel`, in natural order.
fn sorted_entries(tree: &Tree<'_>, rel: &str) -> std::io::Result<Vec<String>> {
    let mut names = tree.list(rel)?;
    names.sort_by_key(|name| natural_key(name));
    Ok(names)
}

/// Sorts `policy10` after `policy4`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = name.split_at(name.len() - digits);
    (head.to_owned(), tail.parse().unwrap_or(0))
}

fn devfreq(tree: &Tree<'_>, missing: &mut Vec<Missing>) -> Vec<Clock> {
    let dir = "sys/class/devfreq";
    let entries = match sorted_entries(tree, dir) {
        Ok(entries) => entries,
        Err(err) => {
            missing.push(Missing {
                source: "devfreq",
                reason: format!("{}: {err}", tree.path(dir).display()),
            });
            return Vec::new();
        }
    };
    let mut clocks: Vec<Clock> = entries
        .into_iter()
        .map(|name| {
            let path = format!("{dir}/{name}");
            // `fdab0000.npu` -> `npu`; `dmc` stays.
            let short = name.rsplit('.').next().unwrap_or(&name).to_owned();
            let freq = |file: &str| {
                read_number(tree, &format!("{path}/{file}"))
                    .or_else(|| read_number(tree, &format!("{path}/{file}uency")))
            };
            Clock {
                name: short,
                path: tree.path(&path).display().to_string(),
                current_hz: freq("cur_freq"),
                max_hz: freq("max_freq"),
                governor: read_trimmed(tree, &format!("{path}/governor")),
                available_governors: read_trimmed(tree, &format!("{path}/available_governors"))
                    .map(|s| s.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default(),
            }
        })
        .collect();
    // Two devices of one kind (two GPUs): keep the names apart.
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for clock in &mut clocks {
        let n = seen.entry(clock.name.clone()).or_default();
        if *n > 0 {
            clock.name = format!("{}{}", clock.name, n);
        }
        *n += 1;
    }
    if !clocks.iter().any(|c| c.name == "dmc") {
        missing.push(Missing {
            source: "dmc devfreq",
            reason: format!(
                "{}: no DDR controller (DMC) devfreq: this firmware has no DDR frequency scaling",
                tree.path(&format!("{dir}/dmc")).display()
            ),
        });
    }
    clocks
}

fn cpufreq(tree: &Tree<'_>, missing: &mut Vec<Missing>) -> Vec<Clock> {
    let dir = "sys/devices/system/cpu/cpufreq";
    let entries = match sorted_entries(tree, dir) {
        Ok(entries) => entries,
        Err(err) => {
            missing.push(Missing {
                source: "cpufreq",
                reason: format!("{}: {err}", tree.path(dir).display()),
            });
            return Vec::new();
        }
    };
    entries
        .into_iter()
        .filter(|name| name.starts_with("policy"))
        .map(|name| {
            let path = format!("{dir}/{name}");
            // cpufreq speaks kHz.
            let khz = |file: &str| {
                read_number(tree, &format!("{path}/{file}")).map(|k| k.saturating_mul(1000))
            };
            Clock {
                name: format!("cpu_{name}"),
                path: tree.path(&path).display().to_string(),
                current_hz: khz("scaling_cur_freq"),
                max_hz: khz("scaling_max_freq"),
                governor: read_trimmed(tree, &format!("{path}/scaling_governor")),
                available_governors: read_trimmed(
                    tree,
                    &format!("{path}/scaling_available_governors"),
                )
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            }
        })
        .collect()
}

fn thermal(tree: &Tree<'_>, missing: &mut Vec<Missing>) -> (Vec<Zone>, Vec<Cooling>) {
    let dir = "sys/class/thermal";
    let entries = match sorted_entries(tree, dir) {
        Ok(entries) => entries,
        Err(err) => {
            missing.push(Missing {
                source: "thermal",
                reason: format!("{}: {err}", tree.path(dir).display()),
            });
            return (Vec::new(), Vec::new());
        }
    };
    let mut zones = Vec::new();
    let mut cooling = Vec::new();
    for name in entries {
        let path = format!("{dir}/{name}");
        let kind = read_trimmed(tree, &format!("{path}/type")).unwrap_or_default();
        if name.starts_with("thermal_zone") {
            // Millidegrees Celsius; a zone that cannot be read now is left out.
            if let Some(temp) =
                read_trimmed(tree, &format!("{path}/temp")).and_then(|t| t.parse::<i64>().ok())
            {
                zones.push(Zone {
                    zone: name,
                    kind,
                    celsius: temp as f64 / 1000.0,
                });
            }
        } else if name.starts_with("cooling_device")
            && let (Some(state), Some(max_state)) = (
                read_number(tree, &format!("{path}/cur_state")),
                read_number(tree, &format!("{path}/max_state")),
            )
        {
            cooling.push(Cooling {
                device: name,
                kind,
                state,
                max_state,
            });
        }
    }
    (zones, cooling)
}

/// The NPU's device nodes (`dev/dri/renderD*`, then `dev/rknpu`), and
/// whether this process opens each for reading and writing.
fn npu_nodes(tree: &Tree<'_>) -> Vec<NpuNode> {
    let mut rels: Vec<String> = tree
        .list("dev/dri")
        .unwrap_or_default()
        .into_iter()
        .filter(|name| name.starts_with("renderD"))
        .map(|name| format!("dev/dri/{name}"))
        .collect();
    rels.sort();
    rels.push("dev/rknpu".to_owned());
    rels.into_iter()
        .filter_map(|rel| {
            tree.node_opens(&rel).map(|opens| NpuNode {
                path: format!("/{rel}"),
                opens,
            })
        })
        .collect()
}

/// The words of `proc/cpuinfo`'s `Features` lines (each once), none when
/// it cannot be read.
fn cpu_features(tree: &Tree<'_>) -> Vec<String> {
    let Ok(text) = tree.read_text("proc/cpuinfo") else {
        return Vec::new();
    };
    let mut features: Vec<String> = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("Features")) {
        let words = line.split_once(':').map_or("", |(_, words)| words);
        for word in words.split_whitespace() {
            if !features.iter().any(|f| f == word) {
                features.push(word.to_owned());
            }
        }
    }
    features
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_of_three_cores_and_of_one_core_is_parsed() {
        assert_eq!(
            parse_load("NPU load:  Core0: 12%, Core1:  0%, Core2: 100%,\n"),
            Some(vec![12, 0, 100])
        );
        assert_eq!(parse_load("NPU load:  5%\n"), Some(vec![5]));
        assert_eq!(parse_load("garbage"), None);
        assert_eq!(parse_load("NPU load:  Core0: x%,"), None);
    }

    #[test]
    fn the_driver_version_is_read_from_its_line() {
        assert_eq!(
            parse_version("RKNPU driver: v0.9.8\n").as_deref(),
            Some("0.9.8")
        );
        assert_eq!(parse_version("nothing here"), None);
    }

    #[test]
    fn the_chip_is_the_rockchip_soc_in_compatible() {
        let c = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            chip_of(&c(&["radxa,rock-5b", "rockchip,rk3588"])).as_deref(),
            Some("rk3588")
        );
        assert_eq!(
            chip_of(&c(&["xunlong,orangepi-5", "rockchip,rk3588s"])).as_deref(),
            Some("rk3588")
        );
        assert_eq!(
            chip_of(&c(&["raspberrypi,5-model-b", "brcm,bcm2712"])),
            None
        );
    }
}
