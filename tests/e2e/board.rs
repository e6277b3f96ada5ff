//! The board in `/metrics` and `rkllm-server doctor`, over the fake trees
//! of `tests/fake-sys` (`[board] sys_root`).

use std::path::PathBuf;

use serde_json::Value;

use crate::harness::{Fake, ScratchDir, Server, fake_runtime, mock_config, server_command};

fn tree(layout: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake-sys")
        .join(layout)
}

fn board_section(layout: &str) -> String {
    format!(
        "[board]\nsys_root = {:?}\n",
        tree(layout).to_str().expect("a UTF-8 path")
    )
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
    let dir = ScratchDir::new();
    let config = dir.0.join("config.toml");
    std::fs::write(&config, board_section(layout)).unwrap();
    let model = dir.0.join("fake-model.rkllm");
    std::fs::write(&model, "a model").unwrap();
    let runtime = fake_runtime(fake);
    let out = server_command()
        .arg("--config")
        .arg(&config)
        .args(["--backend", "rkllm", "--runtime"])
        .arg(&runtime)
        .arg("--model")
        .arg(&model)
        .arg("--models-dir")
        .arg(dir.0.join("models"))
        .args(["doctor", "--json"])
        .output()
        .expect("doctor runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("an exit code"), report)
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
