//! A first pull on a board: its errors name their cause (a repository
//! that does not exist is not "gated"; a host that cannot be reached is
//! named, with the setting that fits), a `.rkllm` copied into the store
//! becomes a model, and `--models-dir` is taken before or after the
//! subcommand.

use std::path::Path;

use serde_json::json;

use crate::harness::{ScratchDir, server_command};
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

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
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
