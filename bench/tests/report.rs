//! Runs `rkllm-bench` briefly against the real server and checks that its
//! report covers every transport and part with counted results. Nothing
//! here looks at how fast anything was: speed is the benchmark's output,
//! not a test's assertion.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The server binary of this build (beside the benchmark's own), built
/// first if this test runs on its own.
fn server_binary() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_rkllm-bench"));
    let server = bench.with_file_name("rkllm-server");
    if !server.exists() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "-p", "rkllm-server", "--bin", "rkllm-server"]);
        if bench.parent().and_then(|d| d.file_name()) == Some("release".as_ref()) {
            build.arg("--release");
        }
        assert!(
            build.status().expect("run cargo").success(),
            "cannot build the server"
        );
    }
    server
}

#[test]
fn a_short_run_reports_every_transport_with_tokens_latencies_and_memory() {
    let dir = std::env::temp_dir().join(format!("rkllm-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let markdown = dir.join("report.md");
    let output = Command::new(env!("CARGO_BIN_EXE_rkllm-bench"))
        .arg("--server-bin")
        .arg(server_binary())
        .args(["--streams", "1,3", "--duration", "0.2", "--tokens", "40"])
        .args([
            "--paced-streams",
            "3",
            "--paced-rate",
            "200",
            "--paced-tokens",
            "10",
        ])
        .args([
            "--paced-duration",
            "0.2",
            "--idle-streams",
            "50",
            "--buffered-tokens",
            "3000",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--markdown")
        .arg(&markdown)
        .output()
        .expect("run rkllm-bench");
    assert!(
        output.status.success(),
        "rkllm-bench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    let transports = [
        "ws",
        "poll",
        "long-poll",
        "mcp",
        "openai",
        "anthropic",
        "ollama",
        "stdio",
    ];
    for transport in transports {
        for (part, streams) in [("throughput", 1), ("throughput", 3), ("paced", 3)] {
            let row = results
                .iter()
                .find(|r| {
                    r["part"] == part && r["transport"] == transport && r["streams"] == streams
                })
                .unwrap_or_else(|| panic!("no {part} row for {transport} × {streams}"));
            assert_eq!(row["errors"], 0, "{row}");
            assert!(
                row["streams_completed"].as_u64().unwrap() >= streams,
                "{row}"
            );
            // Every stream generates exactly its length.
            let completed = row["streams_completed"].as_u64().unwrap();
            let per_stream = if part == "paced" { 10 } else { 40 };
            let tokens = row["tokens"].as_u64().unwrap();
            assert_eq!(tokens, completed * per_stream, "{row}");
            // Every stream contributed latencies (production stamps) and a TTFT.
            assert!(
                row["latency"]["count"].as_u64().unwrap() >= completed,
                "{row}"
            );
            assert_eq!(row["ttft"]["count"].as_u64().unwrap(), completed, "{row}");
            assert!(row["cpu_us_per_token"].as_f64().unwrap() > 0.0, "{row}");
            assert!(row["rss_bytes"].as_u64().unwrap() > 0, "{row}");
        }
    }
    let memory = &report["memory"];
    assert!(memory["idle_rss_bytes"].as_u64().unwrap() > 0, "{memory}");
    assert_eq!(memory["idle_streams"], 50);
    assert!(memory["bytes_per_idle_stream"].is_number(), "{memory}");
    let chunks = memory["buffered_chunks"].as_u64().unwrap();
    assert!((2000..=3000).contains(&chunks), "{memory}");
    assert!(
        memory["buffered_text_bytes"].as_u64().unwrap() >= chunks,
        "{memory}"
    );
    let targets = report["targets"].as_array().unwrap();
    assert!(targets.len() >= 12);
    assert!(
        targets.iter().all(|t| t["measured"].is_number()
            || t["name"].as_str().unwrap().contains("100 unthrottled")
            || t["name"].as_str().unwrap().starts_with("Runner ")),
        "every target but the 100-stream and runner ones is measured in this run: {targets:?}"
    );
    assert!(
        memory["idle_rss_with_runner_bytes"].as_u64().unwrap() > 0
            && memory["runner_idle_rss_bytes"].as_u64().unwrap() > 0,
        "{memory}"
    );
    let summary = std::fs::read_to_string(&markdown).unwrap();
    for heading in [
        "### Unthrottled mock",
        "### Paced mock",
        "### Memory",
        "### Targets",
    ] {
        assert!(summary.contains(heading), "{summary}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_runner_path_is_measured_against_the_in_process_one() {
    let dir = std::env::temp_dir().join(format!("rkllm-bench-runner-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let output = Command::new(env!("CARGO_BIN_EXE_rkllm-bench"))
        .arg("--server-bin")
        .arg(server_binary())
        .args(["--transports", "ws", "--runners", "thread,process"])
        .args(["--streams", "1", "--duration", "0.2", "--tokens", "40"])
        .args([
            "--no-paced",
            "--idle-streams",
            "0",
            "--buffered-tokens",
            "0",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run rkllm-bench");
    assert!(
        output.status.success(),
        "rkllm-bench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for runner in ["thread", "process"] {
        let row = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["runner"] == runner)
            .unwrap_or_else(|| panic!("no {runner} row: {report}"));
        assert_eq!(row["errors"], 0, "{row}");
        let completed = row["streams_completed"].as_u64().unwrap();
        assert!(completed >= 1, "{row}");
        assert_eq!(row["tokens"].as_u64().unwrap(), completed * 40, "{row}");
        // In a runner the mock's CPU and memory are counted too.
        assert_eq!(
            row["runner_rss_bytes"].is_u64(),
            runner == "process",
            "{row}"
        );
    }
    let targets = report["targets"].as_array().unwrap();
    for name in [
        "Runner hop: CPU",
        "Runner hop: time to first token",
        "Runner path",
    ] {
        let target = targets
            .iter()
            .find(|t| t["name"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no target {name}"));
        assert!(target["measured"].is_number(), "{target}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
