//! `doctor`'s verdicts over the fake trees of `tests/fake-sys`.

use std::path::PathBuf;

use super::*;
use crate::board::{Scope, read};

fn fake(layout: &str) -> crate::board::Snapshot {
    read(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fake-sys")
            .join(layout),
        Scope::Doctor,
    )
}

fn verdict_of(findings: &[Finding], check: &str) -> Verdict {
    findings
        .iter()
        .find(|f| f.check == check)
        .unwrap_or_else(|| panic!("no {check} in {findings:#?}"))
        .verdict
}

#[test]
fn a_tuned_rk3588_passes_every_board_check() {
    let findings = board::check(&fake("rk3588"), true);
    for f in &findings {
        assert_eq!(f.verdict, Verdict::Ok, "{f:?}");
        assert!(f.fix.is_none());
    }
    assert_eq!(Report { findings }.exit_code(), 0);
}

#[test]
fn the_rocket_driver_blocks_the_rkllm_backend_and_says_why() {
    let findings = board::check(&fake("rk3588-rocket"), true);
    let driver = findings.iter().find(|f| f.check == "npu-driver").unwrap();
    assert_eq!(driver.verdict, Verdict::Fail);
    assert!(driver.explanation.contains("rocket"), "{driver:?}");
    assert!(
        driver.fix.as_deref().unwrap().contains("vendor"),
        "{driver:?}"
    );
    let report = Report { findings };
    assert_eq!(report.exit_code(), 1);
    assert!(
        report
            .blocking()
            .any(|f| f.line().contains("RKLLM needs the vendor kernel"))
    );
}

#[test]
fn the_rocket_driver_is_only_a_warning_for_the_mock_backend() {
    let findings = board::check(&fake("rk3588-rocket"), false);
    assert_eq!(verdict_of(&findings, "npu-driver"), Verdict::Warn);
    assert_eq!(Report { findings }.exit_code(), 0);
}

#[test]
fn default_governors_and_throttling_on_rk3576_are_warnings() {
    let findings = board::check(&fake("rk3576"), true);
    assert_eq!(verdict_of(&findings, "chip"), Verdict::Ok);
    assert_eq!(verdict_of(&findings, "governors"), Verdict::Warn);
    let governors = findings.iter().find(|f| f.check == "governors").unwrap();
    assert!(
        governors.explanation.contains("npu simple_ondemand"),
        "{governors:?}"
    );
    assert!(governors.fix.as_deref().unwrap().contains("rkllm-freq"));
    assert_eq!(verdict_of(&findings, "thermal"), Verdict::Warn);
    assert_eq!(Report { findings }.exit_code(), 0);
}

#[test]
fn a_board_without_dmc_scaling_is_warned_about() {
    let findings = board::check(&fake("rk3588-no-dmc"), true);
    let dmc = findings.iter().find(|f| f.check == "dmc").unwrap();
    assert_eq!(dmc.verdict, Verdict::Warn);
    assert!(dmc.explanation.contains("#532"), "{dmc:?}");
    // rknpu 0.9.6 is older than what RKLLM 1.3.0 asks for.
    assert_eq!(verdict_of(&findings, "npu-driver"), Verdict::Warn);
    assert_eq!(Report { findings }.exit_code(), 0);
}

#[test]
fn closed_debugfs_is_a_warning_naming_the_bind_mount() {
    let findings = board::check(&fake("rk3588-debugfs-closed"), true);
    assert_eq!(verdict_of(&findings, "npu-driver"), Verdict::Ok);
    let load = findings.iter().find(|f| f.check == "npu-load").unwrap();
    assert_eq!(load.verdict, Verdict::Warn);
    assert!(
        load.fix
            .as_deref()
            .unwrap()
            .contains("/run/rkllm-server/rknpu")
    );
    assert_eq!(Report { findings }.exit_code(), 0);
}

#[test]
fn runtime_1_3_0_on_rk3588_fails_and_1_2_3_passes() {
    let s = fake("rk3588");
    let bad = board::runtime(
        &s,
        Some((Some("1.3.0"), "runtime x (version 1.3.0)", "V1_3")),
    );
    assert_eq!(bad.verdict, Verdict::Fail);
    assert!(bad.explanation.contains("#518"), "{bad:?}");
    let good = board::runtime(
        &s,
        Some((Some("1.2.3"), "runtime x (version 1.2.3)", "V1_2")),
    );
    assert_eq!(good.verdict, Verdict::Ok);
    // RK3576 is not affected.
    let rk3576 = board::runtime(&fake("rk3576"), Some((Some("1.3.0"), "r", "V1_3")));
    assert_eq!(rk3576.verdict, Verdict::Ok);
}

#[test]
fn an_rkllm_backend_off_a_rockchip_board_is_not_blocked() {
    let empty = std::env::temp_dir().join(format!("rkllm-doctor-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let findings = board::check(&read(&empty, Scope::Doctor), true);
    assert_eq!(verdict_of(&findings, "chip"), Verdict::Warn);
    assert_eq!(verdict_of(&findings, "npu-driver"), Verdict::Warn);
    assert_eq!(Report { findings }.exit_code(), 0);
    std::fs::remove_dir_all(&empty).unwrap();
}

#[test]
fn a_board_read_given_up_on_skips_the_board_checks_with_one_warning() {
    let mut s = fake("rk3588-rocket");
    s.finished = false;
    s.missing.push(crate::board::Missing {
        source: "board",
        reason: "/x/sys/class/thermal/thermal_zone0/temp: no answer within 2s".into(),
    });
    let findings = board::check(&s, true);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].check, "board");
    assert_eq!(findings[0].verdict, Verdict::Warn);
    assert!(
        findings[0].explanation.contains("thermal_zone0/temp"),
        "{findings:#?}"
    );
    // What was read (a rocket driver, here) blocks nothing it may not have
    // read whole.
    assert_eq!(Report { findings }.exit_code(), 0);
}

fn stored(dir: &std::path::Path, name: &str, file: &str, body: &[u8], sha256: &str) {
    let model_dir = dir.join(name);
    std::fs::create_dir_all(&model_dir).unwrap();
    std::fs::write(model_dir.join(file), body).unwrap();
    let manifest = serde_json::json!({
        "name": name, "file": file, "size": body.len(), "sha256": sha256,
        "sha256_verified": true, "pulled_unix": 0,
        "source": {"spec": "owner/repo", "url": "https://example.invalid/x"},
    });
    std::fs::write(model_dir.join("manifest.json"), manifest.to_string()).unwrap();
}

#[test]
fn stored_models_are_checked_for_chip_and_with_verify_for_their_hash() {
    let dir = std::env::temp_dir().join(format!("rkllm-doctor-models-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // sha256("abc")
    let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    stored(&dir, "good", "Qwen_w8a8_rk3588.rkllm", b"abc", abc);
    stored(&dir, "other-chip", "Qwen_w4a16_rk3576.rkllm", b"abc", abc);
    stored(
        &dir,
        "corrupt",
        "Qwen_w8a8_rk3588_v1.2.3.rkllm",
        b"abd",
        abc,
    );
    let mut config = Config::default();
    config.store.models_dir = Some(dir.clone());
    let s = fake("rk3588");
    let quick = models::check(&config, &s, Some("1.2.3"), Options { verify: false });
    if quick.iter().all(|f| f.check == "models") {
        panic!("the store's manifests were not read: {quick:#?}");
    }
    assert_eq!(verdict_of(&quick, "model:good"), Verdict::Ok, "{quick:#?}");
    assert_eq!(verdict_of(&quick, "model:other-chip"), Verdict::Fail);
    // Without --verify the corrupt file's size still matches.
    assert_eq!(verdict_of(&quick, "model:corrupt"), Verdict::Ok);
    let verified = models::check(&config, &s, Some("1.2.3"), Options { verify: true });
    let corrupt = verified
        .iter()
        .find(|f| f.check == "model:corrupt")
        .unwrap();
    assert_eq!(corrupt.verdict, Verdict::Fail);
    assert!(corrupt.explanation.contains("sha256"), "{corrupt:?}");
    assert_eq!(verdict_of(&verified, "model:good"), Verdict::Ok);
    assert_eq!(verdict_of(&verified, "memory"), Verdict::Ok);
    std::fs::remove_dir_all(&dir).unwrap();
}
