//! What a new user meets first: which configuration is read, what
//! `--check-config` checks, and how mistakes in flags, variables and the
//! file are named.

use std::process::Stdio;

use crate::harness::{Fake, ScratchDir, Server, fake_runtime, server_command, start_failure};

fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let output = server_command()
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn check_config_loads_the_runtime_as_start_up_would() {
    let dir = ScratchDir::new();
    let model = dir.0.join("m.rkllm");
    std::fs::write(&model, "model").unwrap();
    let model = model.to_str().unwrap();
    let v12 = fake_runtime(Fake::V1_2);
    let (ok, stdout, stderr) = run(
        &[
            "--check-config",
            "--backend",
            "rkllm",
            "--runtime",
            v12.to_str().unwrap(),
            "--model",
            model,
        ],
        &[],
    );
    assert!(ok, "{stderr}");
    assert!(stdout.contains("configuration OK"), "{stdout}");
    assert!(stdout.contains("backend rkllm"), "{stdout}");
    assert!(stdout.contains("1.2.3"), "the runtime's version: {stdout}");

    // A configuration that cannot start is not OK.
    let (ok, _, stderr) = run(
        &[
            "--check-config",
            "--backend",
            "rkllm",
            "--runtime",
            "/nonexistent/librkllmrt.so",
            "--model",
            model,
        ],
        &[],
    );
    assert!(!ok);
    assert!(stderr.contains("/nonexistent/librkllmrt.so"), "{stderr}");
    let unknown = fake_runtime(Fake::UnknownVersion);
    let (ok, _, stderr) = run(
        &[
            "--check-config",
            "--backend",
            "rkllm",
            "--runtime",
            unknown.to_str().unwrap(),
            "--model",
            model,
        ],
        &[],
    );
    assert!(!ok);
    assert!(stderr.contains("9.9.9"), "{stderr}");

    // The mock needs nothing more; the summary is in plain words.
    let (ok, stdout, _) = run(&["--check-config"], &[]);
    assert!(ok);
    assert!(stdout.contains("backend mock"), "{stdout}");
}

#[test]
fn a_misspelt_log_level_is_refused() {
    for level in ["verbose", "inf", "info,verbose"] {
        let (code, stderr) = start_failure(&["--log-level", level], &[], None);
        assert_eq!(code, 2, "{level}: {stderr}");
        assert!(stderr.contains("log_level"), "{stderr}");
    }
    // Levels and per-target directives are accepted.
    for level in ["debug", "warn,rkllm_server=debug", "off"] {
        let (ok, _, stderr) = run(&["--log-level", level, "--check-config"], &[]);
        assert!(ok, "{level}: {stderr}");
    }
}

#[test]
fn errors_in_variables_name_the_variable_and_booleans_take_common_spellings() {
    let (code, stderr) = start_failure(&[], &[("RKLLM_SERVER_MOCK_LANES", "many")], None);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("RKLLM_SERVER_MOCK_LANES"), "{stderr}");

    // The same mistake in a flag names the flag.
    let (code, stderr) = start_failure(&["--mock-lanes", "many"], &[], None);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--mock-lanes"), "{stderr}");
    assert!(!stderr.contains("RKLLM_SERVER_MOCK_LANES"), "{stderr}");

    for (value, on) in [
        ("1", true),
        ("yes", true),
        ("true", true),
        ("0", false),
        ("no", false),
    ] {
        let (ok, stdout, stderr) = run(
            &["--print-config"],
            &[("RKLLM_SERVER_BENCH_TIMESTAMPS", value)],
        );
        assert!(ok, "{value}: {stderr}");
        let printed: toml::Table = toml::from_str(&stdout).unwrap();
        assert_eq!(
            printed["bench"]["timestamps"].as_bool(),
            Some(on),
            "{value}"
        );
    }
}

#[test]
fn the_configuration_file_is_named_in_the_log_and_in_errors() {
    let dir = ScratchDir::new();
    let file = dir.0.join("c.toml");
    std::fs::write(&file, "[engine]\nqueue_len = 0\n").unwrap();
    let (code, stderr) = start_failure(&["--config", file.to_str().unwrap()], &[], None);
    assert_eq!(code, 2);
    assert!(stderr.contains("engine.queue_len"), "{stderr}");
    assert!(stderr.contains(file.to_str().unwrap()), "{stderr}");

    let (_, stdout, _) = run(&["--help"], &[]);
    assert!(stdout.contains("/etc/rkllm-server/config.toml"), "{stdout}");

    let server = Server::start("[engine]\nqueue_len = 3\n", &[]);
    let log = server.log().join("\n");
    assert!(
        log.contains("configuration read") && log.contains("rkllm-server.toml"),
        "{log}"
    );
}

#[test]
fn a_host_name_is_accepted_as_the_listen_address() {
    use std::io::{BufRead, BufReader};
    let mut child = server_command()
        .args(["--listen", "localhost:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let listening = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("rkllm-server listening on http://")
                .map(str::to_owned)
        });
    let _ = child.kill();
    let _ = child.wait();
    let addr: std::net::SocketAddr = listening.expect("the server listened").parse().unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");

    // A value that is no HOST:PORT at all is named (no name lookup needed).
    let (code, stderr) = start_failure(&["--listen", "localhost"], &[], None);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("listen") && stderr.contains("HOST:PORT"),
        "{stderr}"
    );
}
