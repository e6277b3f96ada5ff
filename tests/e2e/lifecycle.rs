//! Start-up configuration, the handshake methods and graceful shutdown.

use std::process::Stdio;

use serde_json::json;

use crate::harness::{Server, Ws, mock_config, server_command, start_failure};

#[tokio::test]
async fn initialize_negotiates_a_version_and_advertises_streaming() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let result = server
        .ok("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
        .await;
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(result["capabilities"]["streaming"], true);
    assert_eq!(result["capabilities"]["tools"]["listChanged"], false);
    assert_eq!(result["serverInfo"]["name"], "rkllm-server");
    let newer = server
        .ok("initialize", json!({"protocolVersion": "2099-01-01"}))
        .await;
    assert_eq!(newer["protocolVersion"], "2025-11-25");
    assert_eq!(server.ok("ping", json!({})).await, json!({}));
    let models = server.ok("models", json!({})).await;
    let model = &models["models"][0];
    assert_eq!(models["models"].as_array().unwrap().len(), 1);
    assert_eq!(
        (
            &model["name"],
            &model["backend"],
            &model["loaded"],
            &model["state"],
            &model["default"]
        ),
        (
            &json!("mock"),
            &json!("mock"),
            &json!(false),
            &json!("available"),
            &json!(true)
        )
    );
    assert!(
        model["overrides"]
            .as_array()
            .unwrap()
            .contains(&json!("temperature")),
        "{models}"
    );
}

#[tokio::test]
async fn batches_are_served_only_after_negotiating_2025_03_26() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let mut ws = Ws::connect(&server).await;
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"2.0","id":2,"method":"nope"}]"#;
    ws.send_text(batch).await;
    assert_eq!(ws.recv().await["error"]["code"], -32600);
    ws.request("initialize", json!({"protocolVersion": "2025-03-26"}))
        .await;
    assert_eq!(ws.recv().await["result"]["protocolVersion"], "2025-03-26");
    ws.send_text(batch).await;
    let replies = ws.recv().await;
    let replies = replies.as_array().expect("a batch answer is an array");
    assert_eq!(replies.len(), 2, "the notification is not answered");
    assert_eq!(replies[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    assert_eq!(replies[1]["error"]["code"], -32601);
}

#[tokio::test]
async fn sigterm_ends_open_streams_with_abort_and_exits_zero() {
    let mut server = Server::start(&mock_config(20.0, 0, ""), &[]);
    let mut ws = Ws::connect(&server).await;
    let (stream_id, mut notes) = ws
        .start_stream(json!({"prompt": "endless @mock(length=100000)"}))
        .await;
    let polled = server
        .ok(
            "run",
            json!({"prompt": "polled @mock(length=100000)", "stream": true}),
        )
        .await;
    while notes.is_empty() {
        notes.push(ws.recv().await);
    }
    server.terminate();
    let mut end = None;
    while let Some(message) = ws.recv_or_close().await {
        if message["params"]["end"] == true {
            end = Some(message);
            break;
        }
    }
    let end = end.expect("the WebSocket stream got its end chunk");
    assert_eq!(end["params"]["stream_id"], stream_id.as_str());
    assert_eq!(end["params"]["finish_reason"], "abort");
    let status = server.wait_exit();
    assert!(
        status.success(),
        "exit status {status:?}, log {:?}",
        server.log()
    );
    assert!(
        server.log().iter().any(|l| l.contains("shutting down")),
        "{:?}",
        server.log()
    );
    drop(polled);
}

#[test]
fn an_invalid_config_value_stops_the_start_naming_the_key() {
    let (code, stderr) = start_failure(&[], &[], Some("[engine]\nqueue_len = 0\n"));
    assert_ne!(code, 0);
    assert!(stderr.contains("engine.queue_len"), "{stderr}");

    let (code, stderr) = start_failure(&[], &[], Some("[streams]\nidle_timeout = 3\n"));
    assert_ne!(code, 0);
    assert!(stderr.contains("idle_timeout"), "{stderr}");

    let (code, stderr) = start_failure(&["--listen", "not-an-address"], &[], None);
    assert_ne!(code, 0);
    assert!(stderr.contains("listen"), "{stderr}");

    let (code, stderr) = start_failure(&["--mock-tokens-per-second=-3"], &[], None);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("tokens_per_second") || stderr.contains("tokens-per-second"),
        "{stderr}"
    );

    let (code, stderr) = start_failure(&["--config", "/nonexistent/rkllm.toml"], &[], None);
    assert_ne!(code, 0);
    assert!(stderr.contains("/nonexistent/rkllm.toml"), "{stderr}");
}

#[test]
fn environment_variables_configure_the_server_below_flags() {
    let stderr_of = |env_value: &str, args: &[&str]| {
        let output = server_command()
            .env("RKLLM_SERVER_LISTEN", env_value)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = stderr_of("bogus", &["--listen", "still-bogus"]);
    assert!(
        stderr.contains("still-bogus"),
        "the flag wins over the environment: {stderr}"
    );
    let stderr = stderr_of("from-env", &[]);
    assert!(
        stderr.contains("from-env"),
        "the environment is read: {stderr}"
    );
}

#[test]
fn print_config_shows_the_effective_configuration_with_keys_masked_and_check_config_validates() {
    let dir = crate::harness::ScratchDir::new();
    let file = dir.0.join("c.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:9999\"\n[engine]\nqueue_len = 7\n",
    )
    .unwrap();
    let output = server_command()
        .args([
            "--config",
            file.to_str().unwrap(),
            "--print-config",
            "--api-key",
            "very-secret",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(!printed.contains("very-secret"), "{printed}");
    let reparsed: toml::Table = toml::from_str(&printed).expect("the output is TOML");
    assert_eq!(reparsed["listen"].as_str(), Some("127.0.0.1:9999"));
    assert_eq!(reparsed["engine"]["queue_len"].as_integer(), Some(7));
    assert_eq!(reparsed["api_keys"][0].as_str(), Some("********"));

    let ok = server_command()
        .args(["--config", file.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{ok:?}");
    let missing = server_command()
        .args([
            "--check-config",
            "--backend",
            "rkllm",
            "--model",
            "/nonexistent/m.rkllm",
        ])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/m.rkllm"));
}
