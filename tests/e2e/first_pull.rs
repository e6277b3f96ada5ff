//! A first pull on a board: its errors name their cause (a repository
//! that does not exist is not "gated"; a host that cannot be reached is
//! named, with the setting that fits), a `.rkllm` copied into the store
//! becomes a model, and `--models-dir` is taken before or after the
//! subcommand.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::{ScratchDir, Server, closed_port, mock_config, server_command};
use crate::store::FakeHf;

const PROXY_VARS: [&str; 6] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Runs `rkllm-server --models-dir DIR/models ARGS` with `HF_ENDPOINT` at
/// `endpoint`, no token and no proxy unless `env` sets them; returns
/// (success, stdout, stderr).
fn pull_cli(
    dir: &Path,
    endpoint: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (bool, String, String) {
    let config = dir.join("cli.toml");
    std::fs::write(&config, "[store]\nplatform = \"rk3588\"\n").unwrap();
    let mut command = server_command();
    command
        .arg("--config")
        .arg(&config)
        .arg("--models-dir")
        .arg(dir.join("models"))
        .args(args)
        .env("HF_ENDPOINT", endpoint)
        .env_remove("HF_TOKEN");
    for var in PROXY_VARS {
        command.env_remove(var);
    }
    let output = command.envs(env.iter().copied()).output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_missing_repository_is_not_found_and_a_gated_one_asks_for_a_token() {
    let hf = FakeHf::start(&json!({
        "token": "secret",
        "repos": {
            "acme/gated": {"gated": true, "files": {"gated.rkllm": {"text": "g"}}},
            "acme/secret": {"private": true, "files": {"secret.rkllm": {"text": "s"}}},
        }
    }));
    let dir = ScratchDir::new();
    let endpoint = hf.endpoint();

    // Hugging Face answers an anonymous request for a missing repository
    // with 401 and `X-Error-Code: RepoNotFound`.
    let (ok, _, err) = pull_cli(&dir.0, &endpoint, &["pull", "acme/typo"], &[]);
    assert!(!ok);
    assert!(
        err.contains("not found") && err.contains("acme/typo"),
        "{err}"
    );
    assert!(err.contains("spelling"), "{err}");
    assert!(!err.contains("gated"), "{err}");
    assert!(
        hf.requests()
            .iter()
            .any(|r| r["path"].as_str().is_some_and(|p| p.contains("acme/typo"))),
        "the hub was asked"
    );

    // A private repository reads the same, and says a token may read it.
    let (ok, _, err) = pull_cli(&dir.0, &endpoint, &["pull", "acme/secret"], &[]);
    assert!(!ok);
    assert!(
        err.contains("not found") && err.contains("HF_TOKEN"),
        "{err}"
    );
    let (ok, out, err) = pull_cli(
        &dir.0,
        &endpoint,
        &["pull", "acme/secret"],
        &[("HF_TOKEN", "secret")],
    );
    assert!(ok, "{out}{err}");

    // A gated repository: a 401 (anonymous) or 403 (a token without
    // access) with `GatedRepo`.
    for token in [None, Some("another")] {
        let env: Vec<(&str, &str)> = token.map(|t| ("HF_TOKEN", t)).into_iter().collect();
        let (ok, _, err) = pull_cli(&dir.0, &endpoint, &["pull", "acme/gated"], &env);
        assert!(!ok);
        assert!(
            err.contains("gated") && err.contains("HF_TOKEN") && !err.contains("not found"),
            "{token:?}: {err}"
        );
    }
}

#[test]
fn a_pull_without_a_reachable_hub_names_the_host_and_the_cause() {
    let dir = ScratchDir::new();
    let port = closed_port();

    let endpoint = format!("http://127.0.0.1:{port}");
    let (ok, _, err) = pull_cli(&dir.0, &endpoint, &["pull", "acme/tiny"], &[]);
    assert!(!ok);
    assert!(
        err.contains(&format!("127.0.0.1:{port} refused the connection")),
        "{err}"
    );
    assert!(
        err.contains("HF_ENDPOINT") && err.contains("HTTPS_PROXY"),
        "{err}"
    );
    assert!(!err.contains("error sending request"), "{err}");

    let (ok, _, err) = pull_cli(
        &dir.0,
        "https://nohost.invalid",
        &["pull", "acme/tiny"],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("nohost.invalid does not resolve") && err.contains("DNS"),
        "{err}"
    );
    assert!(err.contains("HF_ENDPOINT"), "{err}");

    // Through a proxy that is not there: the proxy and its variable are named.
    let proxy = format!("http://127.0.0.1:{port}");
    let (ok, _, err) = pull_cli(
        &dir.0,
        "https://nohost.invalid",
        &["pull", "acme/tiny"],
        &[("HTTPS_PROXY", &proxy)],
    );
    assert!(!ok);
    assert!(
        err.contains(&format!("the proxy {proxy} (from HTTPS_PROXY)")),
        "{err}"
    );
    assert!(err.contains("nohost.invalid"), "{err}");
}

/// `GET /v1/models`'s model names.
async fn served(server: &Server) -> Vec<String> {
    let body: Value = server
        .send(reqwest::Method::GET, "/v1/models", None, None)
        .await
        .json()
        .await
        .unwrap();
    body["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_model_file_copied_into_the_store_is_served_without_a_restart() {
    let dir = ScratchDir::new();
    let models = dir.0.join("models");
    std::fs::create_dir_all(&models).unwrap();
    // A configured model's file in the store's folder stays where it is.
    let configured = models.join("configured.rkllm");
    std::fs::write(&configured, "configured").unwrap();
    let config = mock_config(
        1000.0,
        0,
        &format!(
            "[store]\nmodels_dir = \"{}\"\n\n[[models]]\nname = \"mine\"\npath = \"{}\"\n",
            models.display(),
            configured.display()
        ),
    );
    let server = Server::start(&config, &[]);
    assert!(!served(&server).await.contains(&"dropped_rk3588".to_owned()));

    let content = "a model copied by hand ".repeat(1000);
    std::fs::write(models.join("Dropped_rk3588.rkllm"), &content).unwrap();
    let mut found = false;
    for _ in 0..120 {
        if served(&server).await.contains(&"dropped_rk3588".to_owned()) {
            found = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert!(found, "never served: {:?}", server.log());
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(models.join("dropped_rk3588/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["file"], "Dropped_rk3588.rkllm");
    assert_eq!(manifest["size"], content.len());
    assert_eq!(manifest["sha256_verified"], false);
    let out = std::process::Command::new("sha256sum")
        .arg(models.join("dropped_rk3588/Dropped_rk3588.rkllm"))
        .output()
        .unwrap();
    let sha = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        manifest["sha256"].as_str(),
        sha.split_whitespace().next(),
        "{manifest}"
    );
    assert!(!models.join("Dropped_rk3588.rkllm").exists());
    assert!(configured.exists(), "the configured file was left alone");

    // It answers, and a broken manifest elsewhere is warned about once.
    let answer = server
        .send(
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(json!({"model": "dropped_rk3588",
                        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})),
            None,
        )
        .await;
    assert_eq!(answer.status(), 200);
    std::fs::create_dir_all(models.join("broken")).unwrap();
    std::fs::write(models.join("broken/manifest.json"), "{").unwrap();
    let warned = |log: &[String]| {
        log.iter()
            .filter(|l| l.contains("manifest refused") && l.contains("broken"))
            .count()
    };
    for _ in 0..120 {
        if warned(&server.log()) > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    // Several more rounds of the store's scan (every 2 s).
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let log = server.log();
    assert_eq!(warned(&log), 1, "{log:?}");
    let adopted = log.iter().filter(|l| l.contains("is now a model")).count();
    assert_eq!(adopted, 1, "the checksum is computed once: {log:?}");
}

#[test]
fn models_dir_is_taken_before_or_after_the_subcommand() {
    let hf = FakeHf::start(&json!({"repos": {
        "acme/small": {"files": {"small_rk3588.rkllm": {"text": "small model "}}},
    }}));
    let dir = ScratchDir::new();
    let config = dir.0.join("cli.toml");
    std::fs::write(&config, "[store]\nplatform = \"rk3588\"\n").unwrap();
    for (at, store) in [("before", "one"), ("after", "two")] {
        let store = dir.0.join(store);
        let mut command = server_command();
        command.arg("--config").arg(&config);
        if at == "before" {
            command
                .arg("--models-dir")
                .arg(&store)
                .args(["pull", "acme/small"]);
        } else {
            command
                .args(["pull", "acme/small", "--models-dir"])
                .arg(&store);
        }
        let output = command
            .env("HF_ENDPOINT", hf.endpoint())
            .env_remove("HF_TOKEN")
            .env_remove("RKLLM_SERVER_MODELS_DIR")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{at}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            store.join("small_rk3588/small_rk3588.rkllm").is_file(),
            "{at}: not in {}",
            store.display()
        );
        let listed = server_command()
            .arg("--config")
            .arg(&config)
            .arg("list")
            .arg("--models-dir")
            .arg(&store)
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&listed.stdout).contains("small_rk3588"));
    }
}

#[test]
fn help_shows_defaults_and_variables_and_pull_help_names_the_token_the_mirror_and_the_store() {
    let help = server_command().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "[default: 127.0.0.1:8080]",
        "RKLLM_SERVER_LISTEN",
        "[default: librkllmrt.so]",
        "[default: /etc/rkllm-server/config.toml]",
        "RKLLM_SERVER_MODELS_DIR",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let pull = server_command().args(["pull", "--help"]).output().unwrap();
    let pull = String::from_utf8_lossy(&pull.stdout);
    for needle in [
        "HF_TOKEN",
        "HF_ENDPOINT",
        "HTTPS_PROXY",
        "--models-dir",
        "[store] models_dir",
    ] {
        assert!(pull.contains(needle), "{needle}: {pull}");
    }
}

/// Runs the server with `args` and `env` (no configuration file) to its
/// exit; returns (success, stderr).
fn exits(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let output = server_command()
        .args(["--config", "/dev/null"])
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn errors_name_the_flag_or_variable_typed_and_the_next_step() {
    let (ok, err) = exits(&["--listen", "nope"], &[]);
    assert!(!ok);
    assert!(err.contains("invalid value for --listen"), "{err}");
    let (ok, err) = exits(&[], &[("RKLLM_SERVER_LISTEN", "bad:x")]);
    assert!(!ok);
    assert!(
        err.contains("the environment variable RKLLM_SERVER_LISTEN"),
        "{err}"
    );
    let (ok, err) = exits(&["--check-config", "--model", "/nonexistent.rkllm"], &[]);
    assert!(!ok);
    assert!(err.contains("invalid value for --model"), "{err}");
    assert!(!err.contains("models.path"), "{err}");
    let (ok, err) = exits(
        &["--check-config"],
        &[("RKLLM_SERVER_MODEL", "/nonexistent.rkllm")],
    );
    assert!(!ok);
    assert!(err.contains("RKLLM_SERVER_MODEL"), "{err}");

    // An address in use: what to do next.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (ok, err) = exits(&["--listen", &addr], &[]);
    assert!(!ok);
    assert!(err.contains("Address already in use"), "{err}");
    assert!(
        err.contains("ss -ltnp") && err.contains("--listen"),
        "{err}"
    );

    // A library that is not the RKLLM runtime: no advice to force its ABI.
    let dir = ScratchDir::new();
    let model = dir.0.join("m.rkllm");
    std::fs::write(&model, "model").unwrap();
    let other = crate::harness::fake_rknn_runtime();
    let (ok, err) = exits(
        &[
            "--check-config",
            "--backend",
            "rkllm",
            "--runtime",
            other.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("is not the RKLLM runtime"), "{err}");
    assert!(!err.contains("--runtime-abi"), "{err}");
}
