//! The board in `/metrics` and `rkllm-server doctor`, over the fake trees
//! of `tests/fake-sys` (`[board] sys_root`), and over copies of them where
//! a file the board is read from is a FIFO, leads to a device, or is huge.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::harness::{
    Fake, LIVENESS, ScratchDir, Server, emulated, fake_runtime, mock_config, server_command,
};

fn tree(layout: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake-sys")
        .join(layout)
}

fn board_section(layout: &str) -> String {
    board_section_at(&tree(layout))
}

fn board_section_at(root: &Path) -> String {
    format!(
        "[board]\nsys_root = {:?}\n",
        root.to_str().expect("a UTF-8 path")
    )
}

/// Copies the tree at `from` (folders and files) to `to`.
fn copy_tree(from: &Path, to: &Path) {
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

/// Puts a FIFO at `path` (in place of the file there), with no writer.
fn make_fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
}

/// The size of the huge file in [`hostile_tree`].
const HUGE: u64 = 512 << 20;

/// A copy of the rk3588 tree under `dir` where the first thermal zone's
/// temperature is a FIFO that no one writes, `proc/meminfo` is a symlink
/// to `/dev/zero` (an endless file, unless the link is resolved inside the
/// tree, where there is none), and the NPU's load file is 512 MiB (sparse:
/// it takes no disk, but reads as 512 MiB of zeros).
fn hostile_tree(dir: &Path) -> PathBuf {
    let root = dir.join("sys-root");
    copy_tree(&tree("rk3588"), &root);
    make_fifo(&root.join("sys/class/thermal/thermal_zone0/temp"));
    std::fs::remove_file(root.join("proc/meminfo")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", root.join("proc/meminfo")).unwrap();
    std::fs::File::create(root.join("sys/kernel/debug/rknpu/load"))
        .unwrap()
        .set_len(HUGE)
        .unwrap();
    root
}

/// Caps the address space of a process started by `command` at 4 GiB, so
/// that a server that reads `/dev/zero` to its end fails instead of taking
/// the machine's memory (not under an emulator, whose own mappings are
/// larger).
fn cap_memory(command: &mut Command) {
    use std::os::unix::process::CommandExt;

    use rustix::process::{Resource, Rlimit, setrlimit};
    if emulated() {
        return;
    }
    let cap = Rlimit {
        current: Some(4 << 30),
        maximum: Some(4 << 30),
    };
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed: it makes one system call
    // (setrlimit) and allocates nothing.
    unsafe {
        command.pre_exec(move || setrlimit(Resource::As, cap).map_err(Into::into));
    }
}

/// A line of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {key} in {status}"))
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// `/metrics`, which must answer within the liveness bound.
async fn scrape(server: &Server) -> String {
    tokio::time::timeout(LIVENESS, server.metrics_text())
        .await
        .unwrap_or_else(|_| panic!("/metrics did not answer within {LIVENESS:?}"))
}

#[tokio::test]
async fn the_server_serves_the_board_metrics_of_its_sys_root() {
    let server = Server::start(&mock_config(0.0, 0, &board_section("rk3588")), &[]);
    let text = server.metrics_text().await;
    for line in [
        "rkllm_npu_load_ratio{core=\"0\"} 0.12\n",
        "rkllm_npu_load_ratio{core=\"2\"} 0\n",
        "rkllm_npu_driver_info{driver=\"rknpu\",version=\"0.9.8\"} 1\n",
        "rkllm_clock_frequency_hertz{clock=\"dmc\"} 2112000000\n",
        "rkllm_clock_frequency_hertz{clock=\"npu\"} 1000000000\n",
        "rkllm_clock_max_frequency_hertz{clock=\"cpu_policy4\"} 2256000000\n",
        "rkllm_clock_governor_info{clock=\"cpu_policy0\",governor=\"performance\"} 1\n",
        "rkllm_thermal_zone_temperature_celsius{zone=\"thermal_zone6\",type=\"npu-thermal\"} 47.125\n",
        "rkllm_cooling_state{device=\"cooling_device4\",type=\"devfreq-fdab0000.npu\"} 0\n",
        "rkllm_memory_available_bytes 14495514624\n",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
}

#[tokio::test]
async fn a_missing_source_has_no_metric_and_its_reason_is_logged_once() {
    let server = Server::start(&mock_config(0.0, 0, &board_section("rk3588-no-dmc")), &[]);
    for _ in 0..3 {
        let text = server.metrics_text().await;
        assert!(!text.contains("clock=\"dmc\""), "{text}");
        assert!(
            text.contains("rkllm_clock_frequency_hertz{clock=\"npu\"}"),
            "{text}"
        );
    }
    let absent: Vec<String> = server
        .log()
        .into_iter()
        .filter(|l| l.contains("a board metric is absent") && l.contains("dmc"))
        .collect();
    assert_eq!(absent.len(), 1, "{absent:#?}");
    assert!(absent[0].contains("DDR frequency scaling"), "{absent:?}");
}

/// Runs `doctor --json` with the rkllm backend on the fake runtime `fake`
/// over `layout`; the exit code and the findings.
fn doctor(layout: &str, fake: Fake) -> (i32, Value) {
    doctor_at(&tree(layout), fake)
}

/// [`doctor`] over the tree at `root`, which must return within the
/// liveness bound (it is killed otherwise, and the test fails).
fn doctor_at(root: &Path, fake: Fake) -> (i32, Value) {
    let dir = ScratchDir::new();
    let config = dir.0.join("config.toml");
    std::fs::write(&config, board_section_at(root)).unwrap();
    let model = dir.0.join("fake-model.rkllm");
    std::fs::write(&model, "a model").unwrap();
    let runtime = fake_runtime(fake);
    let mut command = server_command();
    command
        .arg("--config")
        .arg(&config)
        .args(["--backend", "rkllm", "--runtime"])
        .arg(&runtime)
        .arg("--model")
        .arg(&model)
        .arg("--models-dir")
        .arg(dir.0.join("models"))
        .args(["doctor", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cap_memory(&mut command);
    let mut child = command.spawn().expect("doctor runs");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + LIVENESS;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "doctor did not return within {LIVENESS:?}: {}",
                stderr.join().unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {stdout}\n{}",
            stderr.join().unwrap_or_default()
        )
    });
    (
        status
            .code()
            .unwrap_or_else(|| panic!("doctor was killed by a signal: {status:?}")),
        report,
    )
}

fn verdict(report: &Value, check: &str) -> String {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} in {report:#}"))["verdict"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn doctor_gives_each_layout_its_verdicts_and_exit_status() {
    // (layout, exit status, the checks expected to fail or warn)
    let cases: [(&str, i32, &[&str], &[&str]); 5] = [
        ("rk3588", 0, &[], &[]),
        ("rk3576", 0, &[], &["governors", "thermal"]),
        ("rk3588-no-dmc", 0, &[], &["dmc", "npu-driver"]),
        ("rk3588-rocket", 1, &["npu-driver"], &[]),
        ("rk3588-debugfs-closed", 0, &[], &["npu-load"]),
    ];
    for (layout, code, failing, warning) in cases {
        let (exit, report) = doctor(layout, Fake::V1_2);
        assert_eq!(exit, code, "{layout}: {report:#}");
        assert_eq!(report["ok"], code == 0, "{layout}");
        for f in report["findings"].as_array().unwrap() {
            let check = f["check"].as_str().unwrap();
            let expected = if failing.contains(&check) {
                "fail"
            } else if warning.contains(&check) {
                "warn"
            } else {
                "ok"
            };
            assert_eq!(f["verdict"], expected, "{layout}: {f:#}");
            assert_eq!(f["fix"].is_string(), expected != "ok", "{layout}: {f:#}");
        }
        assert_eq!(verdict(&report, "runtime"), "ok", "{layout}");
        assert_eq!(verdict(&report, "model:fake-model"), "ok", "{layout}");
    }
}

#[test]
fn doctor_names_runtime_1_3_0_on_rk3588_as_the_cause() {
    let (exit, report) = doctor("rk3588", Fake::V1_3);
    assert_eq!(exit, 1, "{report:#}");
    let runtime = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "runtime")
        .unwrap();
    assert_eq!(runtime["verdict"], "fail");
    assert!(
        runtime["explanation"]
            .as_str()
            .unwrap()
            .contains("Illegal instruction"),
        "{runtime:#}"
    );
    // The same runtime on RK3576 is fine.
    let (exit, report) = doctor("rk3576", Fake::V1_3);
    assert_eq!(exit, 0, "{report:#}");
}

#[tokio::test]
async fn ready_gives_what_blocks_serving_as_its_reason() {
    let dir = ScratchDir::new();
    let model = dir.0.join("fake-model.rkllm");
    std::fs::write(&model, "a model").unwrap();
    let runtime = fake_runtime(Fake::V1_2);
    let args = [
        "--backend",
        "rkllm",
        "--runtime",
        runtime.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
    ];
    let ready = |server: &Server| {
        let url = format!("http://{}/ready", server.addr);
        let http = server.http.clone();
        async move {
            let answer = http.get(url).send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap())
        }
    };
    let blocked = Server::start(&board_section("rk3588-rocket"), &args);
    let (status, body) = ready(&blocked).await;
    assert_eq!(status, 503, "{body:#}");
    let reason = body["reason"].as_str().unwrap();
    assert!(
        reason.contains("rocket") && reason.contains("vendor kernel"),
        "{body:#}"
    );
    assert_eq!(body["blocking"].as_array().unwrap().len(), 1, "{body:#}");
    assert!(
        blocked
            .log()
            .iter()
            .any(|l| l.contains("doctor:") && l.contains("rocket")),
        "the finding is in the log"
    );
    let fine = Server::start(&board_section("rk3588"), &args);
    let (status, body) = ready(&fine).await;
    assert_eq!(status, 200, "{body:#}");
    assert!(body.get("blocking").is_none(), "{body:#}");
}

#[tokio::test]
async fn a_sys_root_of_fifos_devices_and_huge_files_neither_stops_the_server_nor_costs_its_memory()
{
    let dir = ScratchDir::new();
    let root = hostile_tree(&dir.0);
    // Before it listens, the server reads the board once (doctor's checks).
    let server = Server::start_prepared(
        &mock_config(0.0, 0, &board_section_at(&root)),
        &[],
        &[],
        cap_memory,
    );
    let health = server
        .send(reqwest::Method::GET, "/health", None, None)
        .await;
    assert_eq!(health.status(), 200);
    let started = std::time::Instant::now();
    for _ in 0..3 {
        let text = scrape(&server).await;
        // What can be read is there; the FIFO, the link to a device and
        // the huge file are left out.
        for line in [
            "rkllm_clock_frequency_hertz{clock=\"dmc\"} 2112000000\n",
            "rkllm_npu_driver_info{driver=\"rknpu\",version=\"0.9.8\"} 1\n",
            "rkllm_thermal_zone_temperature_celsius{zone=\"thermal_zone6\",type=\"npu-thermal\"} 47.125\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        for absent in [
            "zone=\"thermal_zone0\"",
            "rkllm_npu_load_ratio",
            "rkllm_memory_total_bytes",
        ] {
            assert!(!text.contains(absent), "{absent:?} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
    let took = started.elapsed();
    let (rss, peak) = (
        status_kib(server.pid(), "VmRSS"),
        status_kib(server.pid(), "VmHWM"),
    );
    eprintln!(
        "over the hostile tree: 3 scrapes in {took:?}; server RSS {rss} KiB, peak {peak} KiB \
         (the huge file is {} KiB)",
        HUGE / 1024
    );
    if emulated() {
        eprintln!("the RSS is not checked under emulation: it is the emulator's");
    } else {
        assert!(
            peak < 200 * 1024,
            "the server's peak RSS is {peak} KiB: a file of the board was read whole"
        );
    }
}

#[test]
fn doctor_returns_over_a_sys_root_of_fifos_devices_and_huge_files() {
    let dir = ScratchDir::new();
    let root = hostile_tree(&dir.0);
    let (exit, report) = doctor_at(&root, Fake::V1_2);
    assert_eq!(exit, 0, "{report:#}");
    assert_eq!(verdict(&report, "chip"), "ok", "{report:#}");
    assert_eq!(verdict(&report, "thermal"), "ok", "{report:#}");
    // The load file is too long to be the driver's, and meminfo's link to
    // /dev/zero is followed inside the tree, where there is none: both
    // are warned about.
    assert_eq!(verdict(&report, "npu-load"), "warn", "{report:#}");
    assert_eq!(verdict(&report, "memory"), "warn", "{report:#}");
}

#[tokio::test]
async fn a_fifo_that_appears_after_start_does_not_hang_the_metrics() {
    let dir = ScratchDir::new();
    let root = dir.0.join("sys-root");
    copy_tree(&tree("rk3588"), &root);
    let server = Server::start(&mock_config(0.0, 0, &board_section_at(&root)), &[]);
    let zone0 = "rkllm_thermal_zone_temperature_celsius{zone=\"thermal_zone0\",type=\"soc-thermal\"} 46.25\n";
    let text = scrape(&server).await;
    assert!(text.contains(zone0), "{text}");
    make_fifo(&root.join("sys/class/thermal/thermal_zone0/temp"));
    for _ in 0..3 {
        let text = scrape(&server).await;
        assert!(!text.contains("zone=\"thermal_zone0\""), "{text}");
        assert!(
            text.contains("rkllm_clock_frequency_hertz{clock=\"dmc\"} 2112000000\n"),
            "{text}"
        );
    }
    // The file back, its zone is back.
    std::fs::remove_file(root.join("sys/class/thermal/thermal_zone0/temp")).unwrap();
    std::fs::write(root.join("sys/class/thermal/thermal_zone0/temp"), "46250\n").unwrap();
    let text = scrape(&server).await;
    assert!(text.contains(zone0), "{text}");
}
