//! Reading the files of the board and parsing what they say.

use std::path::Path;

use super::{Clock, Cooling, Memory, Missing, NpuDriver, RKNPU_DEBUG_DIRS, Snapshot, Zone, under};

/// Reads everything under `root`.
pub(super) fn snapshot(root: &Path) -> Snapshot {
    let mut missing = Vec::new();
    let compatible = read_compatible(root, &mut missing);
    let chip = chip_of(&compatible);
    let (driver, npu_load) = npu(root, &mut missing);
    let mut clocks = devfreq(root, &mut missing);
    clocks.extend(cpufreq(root, &mut missing));
    let (zones, cooling) = thermal(root, &mut missing);
    let memory = match std::fs::read_to_string(under(root, "proc/meminfo")) {
        Ok(text) => parse_meminfo(&text),
        Err(err) => {
            missing.push(Missing {
                source: "memory",
                reason: format!("{}: {err}", under(root, "proc/meminfo").display()),
            });
            None
        }
    };
    Snapshot {
        root: root.to_owned(),
        compatible,
        chip,
        driver,
        npu_load,
        clocks,
        zones,
        cooling,
        memory,
        missing,
    }
}

fn read_compatible(root: &Path, missing: &mut Vec<Missing>) -> Vec<String> {
    let path = under(root, "proc/device-tree/compatible");
    match std::fs::read(&path) {
        Ok(bytes) => bytes
            .split(|&b| b == 0 || b == b'\n')
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).trim().to_owned())
            .collect(),
        Err(err) => {
            missing.push(Missing {
                source: "device tree",
                reason: format!("{}: {err}", path.display()),
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

fn npu(root: &Path, missing: &mut Vec<Missing>) -> (NpuDriver, Option<Vec<u8>>) {
    let rocket = ["sys/bus/platform/drivers/rocket", "sys/module/rocket"]
        .iter()
        .any(|p| under(root, p).exists());
    let rknpu_present = ["sys/bus/platform/drivers/RKNPU", "sys/module/rknpu"]
        .iter()
        .any(|p| under(root, p).exists());
    // The first debugfs directory that can be listed.
    let mut debug_dir = None;
    let mut denied = Vec::new();
    for dir in RKNPU_DEBUG_DIRS {
        let path = under(root, dir);
        match std::fs::read_dir(&path) {
            Ok(_) => {
                debug_dir = Some(path);
                break;
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => denied.push(format!("{}: {err}", path.display())),
        }
    }
    let mut version = None;
    let mut load = None;
    if let Some(dir) = &debug_dir {
        match std::fs::read_to_string(dir.join("version")) {
            Ok(text) => version = parse_version(&text),
            Err(err) => missing.push(Missing {
                source: "rknpu version",
                reason: format!("{}: {err}", dir.join("version").display()),
            }),
        }
        match std::fs::read_to_string(dir.join("load")) {
            Ok(text) => {
                load = parse_load(&text);
                if load.is_none() {
                    missing.push(Missing {
                        source: "npu load",
                        reason: format!(
                            "{}: not in the form `NPU load:  Core0: 12%, …`",
                            dir.join("load").display()
                        ),
                    });
                }
            }
            Err(err) => missing.push(Missing {
                source: "npu load",
                reason: format!("{}: {err}", dir.join("load").display()),
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

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn read_number(path: &Path) -> Option<u64> {
    read_trimmed(path)?.parse().ok()
}

fn sorted_entries(dir: &Path) -> std::io::Result<Vec<(String, std::path::PathBuf)>> {
    let mut entries: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    entries.sort_by_key(|e| natural_key(&e.0));
    Ok(entries)
}

/// Sorts `policy10` after `policy4`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = name.split_at(name.len() - digits);
    (head.to_owned(), tail.parse().unwrap_or(0))
}

fn devfreq(root: &Path, missing: &mut Vec<Missing>) -> Vec<Clock> {
    let dir = under(root, "sys/class/devfreq");
    let entries = match sorted_entries(&dir) {
        Ok(entries) => entries,
        Err(err) => {
            missing.push(Missing {
                source: "devfreq",
                reason: format!("{}: {err}", dir.display()),
            });
            return Vec::new();
        }
    };
    let mut clocks: Vec<Clock> = entries
        .into_iter()
        .map(|(name, path)| {
            // `fdab0000.npu` -> `npu`; `dmc` stays.
            let short = name.rsplit('.').next().unwrap_or(&name).to_owned();
            let freq = |file: &str| {
                read_number(&path.join(file))
                    .or_else(|| read_number(&path.join(format!("{file}uency"))))
            };
            Clock {
                name: short,
                path: path.display().to_string(),
                current_hz: freq("cur_freq"),
                max_hz: freq("max_freq"),
                governor: read_trimmed(&path.join("governor")),
                available_governors: read_trimmed(&path.join("available_governors"))
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
                dir.join("dmc").display()
            ),
        });
    }
    clocks
}

fn cpufreq(root: &Path, missing: &mut Vec<Missing>) -> Vec<Clock> {
    let dir = under(root, "sys/devices/system/cpu/cpufreq");
    let entries = match sorted_entries(&dir) {
        Ok(entries) => entries,
        Err(err) => {
            missing.push(Missing {
                source: "cpufreq",
                reason: format!("{}: {err}", dir.display()),
            });
            return Vec::new();
        }
    };
    entries
        .into_iter()
        .filter(|(name, _)| name.starts_with("policy"))
        .map(|(name, path)| {
            // cpufreq speaks kHz.
            let khz = |file: &str| read_number(&path.join(file)).map(|k| k.saturating_mul(1000));
            Clock {
                name: format!("cpu_{name}"),
                path: path.display().to_string(),
                current_hz: khz("scaling_cur_freq"),
                max_hz: khz("scaling_max_freq"),
                governor: read_trimmed(&path.join("scaling_governor")),
                available_governors: read_trimmed(&path.join("scaling_available_governors"))
                    .map(|s| s.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

fn thermal(root: &Path, missing: &mut Vec<Missing>) -> (Vec<Zone>, Vec<Cooling>) {
    let dir = under(root, "sys/class/thermal");
    let entries = match sorted_entries(&dir) {
        Ok(entries) => entries,
        Err(err) => {
            missing.push(Missing {
                source: "thermal",
                reason: format!("{}: {err}", dir.display()),
            });
            return (Vec::new(), Vec::new());
        }
    };
    let mut zones = Vec::new();
    let mut cooling = Vec::new();
    for (name, path) in entries {
        let kind = read_trimmed(&path.join("type")).unwrap_or_default();
        if name.starts_with("thermal_zone") {
            // Millidegrees Celsius; a zone that cannot be read now is left out.
            if let Some(temp) = read_trimmed(&path.join("temp")).and_then(|t| t.parse::<i64>().ok())
            {
                zones.push(Zone {
                    zone: name,
                    kind,
                    celsius: temp as f64 / 1000.0,
                });
            }
        } else if name.starts_with("cooling_device")
            && let (Some(state), Some(max_state)) = (
                read_number(&path.join("cur_state")),
                read_number(&path.join("max_state")),
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
