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
        assert!(stderr.contains("--log-level"), "{stderr}");
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

async fn send(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<String>,
) -> (u16, serde_json::Value) {
    let mut request = server
        .http
        .request(method, format!("http://{}{path}", server.addr))
        .header("content-type", "application/json");
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text:?}"));
    (status, value)
}

fn is_openai_error(body: &serde_json::Value) -> bool {
    body["error"]["message"].is_string() && body["error"]["type"].is_string()
}

fn is_ollama_error(body: &serde_json::Value) -> bool {
    body["error"].is_string()
}

#[tokio::test]
async fn each_api_answers_errors_in_its_own_shape() {
    use reqwest::Method;
    let server = Server::start(
        &crate::harness::mock_config(
            0.0,
            0,
            "[limits]\nmax_request_bytes = 4096\nmax_prompt_bytes = 2048\n",
        ),
        &["--api-key", "k1"],
    );
    // Unauthorized.
    let (status, body) = send(&server, Method::GET, "/v1/models", None, None).await;
    assert_eq!(status, 401);
    assert!(is_openai_error(&body), "{body}");
    assert_eq!(body["error"]["type"], "authentication_error");
    let (status, body) = send(&server, Method::GET, "/api/tags", None, None).await;
    assert_eq!(status, 401);
    assert!(is_ollama_error(&body), "{body}");
    let (status, body) = send(&server, Method::POST, "/mcp", None, Some("{}".into())).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], -32008, "{body}");

    // Too large, naming the limit's key.
    let big = format!(
        "{{\"model\":\"mock\",\"prompt\":\"{}\",\"messages\":[]}}",
        "x".repeat(8000)
    );
    let key = Some("k1");
    let (status, body) = send(
        &server,
        Method::POST,
        "/v1/chat/completions",
        key,
        Some(big.clone()),
    )
    .await;
    assert_eq!(status, 413);
    assert!(is_openai_error(&body), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_request_bytes")
    );
    let (status, body) = send(&server, Method::POST, "/api/generate", key, Some(big)).await;
    assert_eq!(status, 413);
    assert!(is_ollama_error(&body), "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("limits.max_request_bytes")
    );

    // Unsupported and unknown endpoints, and a wrong method.
    let (status, body) = send(
        &server,
        Method::POST,
        "/api/push",
        key,
        Some("{\"model\":\"x\"}".into()),
    )
    .await;
    assert_eq!(status, 404);
    assert!(is_ollama_error(&body), "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("registry"),
        "{body}"
    );
    let (status, body) = send(&server, Method::GET, "/v1/nothing", key, None).await;
    assert_eq!(status, 404);
    assert!(is_openai_error(&body), "{body}");
    let (status, body) = send(&server, Method::GET, "/api/chat", key, None).await;
    assert_eq!(status, 405);
    assert!(is_ollama_error(&body), "{body}");
}

#[tokio::test]
async fn unknown_parameters_are_refused_on_json_rpc_and_ignored_by_the_compatible_apis() {
    let server = Server::start(&crate::harness::mock_config(0.0, 0, ""), &[]);
    let response = server
        .call("run", serde_json::json!({"prompt": "hi", "max_token": 3}))
        .await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert_eq!(
        response["error"]["data"]["field"], "max_token",
        "{response}"
    );
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens")
    );
    for (method, params) in [
        (
            "abort",
            serde_json::json!({"stream_id": "abcdefghijklmnop", "force": true}),
        ),
        (
            "stream_status",
            serde_json::json!({"stream_id": "abcdefghijklmnop", "x": 1}),
        ),
        ("models", serde_json::json!({"all": true})),
    ] {
        let response = server.call(method, params).await;
        assert_eq!(response["error"]["code"], -32602, "{method}: {response}");
    }
    // MCP's `_meta` is allowed anywhere.
    server
        .ok(
            "run",
            serde_json::json!({"prompt": "hi @mock(length=2)", "_meta": {"x": 1}}),
        )
        .await;
    // The tool reports a bad argument as a tool error naming it.
    let result = server
        .ok(
            "tools/call",
            serde_json::json!({"name": "generate", "arguments": {"prompt": "hi", "max_token": 2}}),
        )
        .await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("max_token")
    );

    let (status, _) = send(
        &server,
        reqwest::Method::POST,
        "/v1/chat/completions",
        None,
        Some(r#"{"model":"mock","messages":[{"role":"user","content":"hi @mock(length=2)"}],"seed":1}"#.into()),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn messages_name_the_key_to_raise_and_what_there_is() {
    let server = Server::start(
        &crate::harness::mock_config(
            0.0,
            0,
            "[limits]\nmax_prompt_bytes = 64\nmax_tokens = 100\ndefault_max_tokens = 50\n",
        ),
        &[],
    );
    let message = |response: serde_json::Value| {
        response["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let long = server
        .call("run", serde_json::json!({"prompt": "x".repeat(100)}))
        .await;
    assert!(message(long).contains("limits.max_prompt_bytes"));
    let many = server
        .call(
            "run",
            serde_json::json!({"prompt": "x", "max_tokens": 1000}),
        )
        .await;
    assert_eq!(many["error"]["code"], -32602, "{many}");
    assert!(message(many).contains("limits.max_tokens"));
    let nope = server
        .call("run", serde_json::json!({"prompt": "x", "model": "nope"}))
        .await;
    assert_eq!(nope["error"]["code"], -32003, "{nope}");
    assert!(message(nope).contains("mock"), "the models are listed");
    let generate = server
        .call("generate", serde_json::json!({"prompt": "x"}))
        .await;
    assert_eq!(generate["error"]["code"], -32601, "{generate}");
    assert!(message(generate).contains("tools/call"));

    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/api/generate",
        None,
        Some(r#"{"model":"nope","prompt":"x","stream":false}"#.into()),
    )
    .await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("mock"), "{body}");

    let (status, body) = send(
        &server,
        reqwest::Method::POST,
        "/api/show",
        None,
        Some(r#"{"model":"mock"}"#.into()),
    )
    .await;
    assert_eq!(status, 200);
    let capabilities = body["capabilities"].as_array().unwrap();
    assert!(capabilities.contains(&serde_json::json!("tools")), "{body}");
}

#[test]
fn completions_and_the_manual_page_come_from_the_cli_definition() {
    for shell in ["bash", "zsh", "fish"] {
        let (ok, stdout, stderr) = run(&["--completions", shell], &[]);
        assert!(ok, "{shell}: {stderr}");
        assert!(stdout.contains("check-config"), "{shell}: {stdout}");
    }
    let (ok, stdout, _) = run(&["--man-page"], &[]);
    assert!(ok);
    assert!(
        stdout.starts_with(".ie") || stdout.contains(".TH"),
        "{stdout}"
    );
    assert!(stdout.contains("log\\-level"), "{stdout}");
}
