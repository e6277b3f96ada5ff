//! The board read over the fake trees of `tests/fake-sys`.

use std::path::PathBuf;

use super::*;

pub(crate) fn fake(layout: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake-sys")
        .join(layout)
}

fn read_metrics(root: &std::path::Path) -> Snapshot {
    read(root, Scope::Metrics)
}

fn names(snapshot: &Snapshot) -> Vec<&'static str> {
    samples(snapshot).iter().map(|s| s.name).collect()
}

fn value(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(snapshot)
        .into_iter()
        .find(|s| s.name == name)?
        .samples
        .into_iter()
        .find(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v))
        })
        .map(|s| s.value)
}

#[test]
fn an_rk3588_board_shows_every_family() {
    let s = read_metrics(&fake("rk3588"));
    assert_eq!(s.chip.as_deref(), Some("rk3588"));
    assert_eq!(
        s.driver,
        NpuDriver::Rknpu {
            version: Some("0.9.8".into())
        }
    );
    assert_eq!(s.npu_load, Some(vec![12, 0, 0]));
    assert!(s.missing.is_empty(), "{:?}", s.missing);
    for family in [
        "npu_load_ratio",
        "npu_driver_info",
        "clock_frequency_hertz",
        "clock_max_frequency_hertz",
        "clock_governor_info",
        "thermal_zone_temperature_celsius",
        "cooling_state",
        "cooling_max_state",
        "memory_total_bytes",
        "memory_available_bytes",
    ] {
        assert!(names(&s).contains(&family), "{family} missing");
    }
    assert_eq!(value(&s, "npu_load_ratio", &[("core", "0")]), Some(0.12));
    assert_eq!(
        value(&s, "clock_frequency_hertz", &[("clock", "dmc")]),
        Some(2_112_000_000.0)
    );
    // cpufreq's kHz become Hz.
    assert_eq!(
        value(&s, "clock_max_frequency_hertz", &[("clock", "cpu_policy4")]),
        Some(2_256_000_000.0)
    );
    assert_eq!(
        value(
            &s,
            "thermal_zone_temperature_celsius",
            &[("type", "npu-thermal")]
        ),
        Some(47.125)
    );
    assert_eq!(
        value(
            &s,
            "clock_governor_info",
            &[("clock", "npu"), ("governor", "performance")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&s, "memory_available_bytes", &[]),
        Some(14_155_776.0 * 1024.0)
    );
    let policies: Vec<&str> = s.cpu_clocks().map(|c| c.name.as_str()).collect();
    assert_eq!(policies, ["cpu_policy0", "cpu_policy4", "cpu_policy6"]);
}

#[test]
fn an_rk3576_board_has_two_npu_cores_and_reports_throttling() {
    let s = read_metrics(&fake("rk3576"));
    assert_eq!(s.chip.as_deref(), Some("rk3576"));
    assert_eq!(s.npu_load, Some(vec![35, 33]));
    assert_eq!(s.clock("npu").and_then(|c| c.current_hz), Some(950_000_000));
    assert_eq!(
        value(&s, "cooling_state", &[("type", "cpufreq-cpu4")]),
        Some(3.0)
    );
}

#[test]
fn without_dmc_devfreq_the_ddr_clock_is_absent_and_the_reason_given() {
    let s = read_metrics(&fake("rk3588-no-dmc"));
    assert!(s.clock("dmc").is_none());
    assert!(value(&s, "clock_frequency_hertz", &[("clock", "dmc")]).is_none());
    assert!(value(&s, "clock_frequency_hertz", &[("clock", "npu")]).is_some());
    let reason = s
        .missing
        .iter()
        .find(|m| m.source == "dmc devfreq")
        .unwrap();
    assert!(
        reason.reason.contains("DDR frequency scaling"),
        "{reason:?}"
    );
}

#[test]
fn the_rocket_driver_is_named_and_has_no_load() {
    let s = read_metrics(&fake("rk3588-rocket"));
    assert_eq!(s.driver, NpuDriver::Rocket);
    assert!(s.npu_load.is_none());
    assert!(!names(&s).contains(&"npu_load_ratio"));
    assert_eq!(
        value(&s, "npu_driver_info", &[("driver", "rocket")]),
        Some(1.0)
    );
}

#[test]
fn unreadable_debugfs_leaves_the_load_absent_with_its_reason() {
    let s = read_metrics(&fake("rk3588-debugfs-closed"));
    assert_eq!(s.driver, NpuDriver::Rknpu { version: None });
    assert!(!names(&s).contains(&"npu_load_ratio"));
    // The rest of the board is still there.
    assert!(names(&s).contains(&"thermal_zone_temperature_celsius"));
    let reason = s.missing.iter().find(|m| m.source == "npu load").unwrap();
    assert!(reason.reason.contains("root only"), "{reason:?}");
}

#[test]
fn a_root_with_nothing_gives_no_board_metric() {
    let empty = std::env::temp_dir().join(format!("rkllm-board-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let s = read_metrics(&empty);
    assert!(samples(&s).is_empty());
    assert_eq!(s.driver, NpuDriver::None);
    assert!(s.chip.is_none());
    std::fs::remove_dir_all(&empty).unwrap();
}

/// Copies the tree at `from` (folders and files) to `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn symlinks_are_followed_inside_the_root_and_none_leads_out_of_it() {
    use std::os::unix::fs::symlink;
    let scratch = std::env::temp_dir().join(format!("rkllm-board-links-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let root = scratch.join("root");
    copy_tree(&fake("rk3588"), &root);
    // As sysfs does: the class entry is a relative link into devices/.
    let dmc = root.join("sys/devices/platform/dmc/devfreq/dmc");
    std::fs::create_dir_all(dmc.parent().unwrap()).unwrap();
    std::fs::rename(root.join("sys/class/devfreq/dmc"), &dmc).unwrap();
    symlink(
        "../../devices/platform/dmc/devfreq/dmc",
        root.join("sys/class/devfreq/dmc"),
    )
    .unwrap();
    // As on a board: /proc/device-tree is an absolute link into /sys,
    // which means the root's own sys/.
    let base = root.join("sys/firmware/devicetree/base");
    std::fs::create_dir_all(base.parent().unwrap()).unwrap();
    std::fs::rename(root.join("proc/device-tree"), &base).unwrap();
    symlink(
        "/sys/firmware/devicetree/base",
        root.join("proc/device-tree"),
    )
    .unwrap();
    // Two links to a file outside the root: by its absolute path, and by
    // enough `..` to climb out.
    let outside = scratch.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("temp"), "99000\n").unwrap();
    let zone = |n: u32| root.join(format!("sys/class/thermal/thermal_zone{n}/temp"));
    std::fs::remove_file(zone(1)).unwrap();
    symlink(outside.join("temp"), zone(1)).unwrap();
    std::fs::remove_file(zone(2)).unwrap();
    symlink("../../../../../outside/temp", zone(2)).unwrap();

    let s = read_metrics(&root);
    assert_eq!(
        s.clock("dmc").and_then(|c| c.current_hz),
        Some(2_112_000_000)
    );
    assert_eq!(s.chip.as_deref(), Some("rk3588"), "{:?}", s.missing);
    let zones: Vec<&str> = s.zones.iter().map(|z| z.zone.as_str()).collect();
    assert!(zones.contains(&"thermal_zone0"), "{zones:?}");
    assert!(
        !s.zones.iter().any(|z| z.celsius == 99.0),
        "a file outside the root was read: {:?}",
        s.zones
    );
    std::fs::remove_dir_all(&scratch).unwrap();
}
