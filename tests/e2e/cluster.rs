//! What a load balancer reads from a server: the node's name on every
//! response, the id of a stream started over HTTP, and the agent check's
//! load line. The balancer itself (Debian's haproxy with the shipped
//! config, three servers) is exercised by `tests/python/test_cluster.py`.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::harness::{Server, mock_config};

/// The agent check's address, from the line the server prints at start.
fn agent_addr(server: &Server) -> String {
    server
        .log()
        .iter()
        .find_map(|line| line.strip_prefix("rkllm-server agent check on tcp://"))
        .expect("the agent check's address")
        .to_owned()
}

/// One agent check: connect, read the line, see the connection closed.
async fn agent_line(addr: &str) -> std::io::Result<String> {
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    let mut line = String::new();
    socket.read_to_string(&mut line).await?;
    Ok(line)
}

/// Checks the agent until it answers `expected` (the load it reports
/// follows the workers, which finish a moment after their streams end).
async fn wait_line(addr: &str, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line = agent_line(addr).await.unwrap();
        if line == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "wanted {expected:?}, last line: {line:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn responses_name_the_node_and_a_started_stream() {
    let server = Server::start(&mock_config(0.0, 0, ""), &["--node-id", "board7"]);
    let health = server
        .send(reqwest::Method::GET, "/health", None, None)
        .await;
    assert_eq!(health.headers()["x-rkllm-node"], "board7");
    assert_eq!(
        health.json::<serde_json::Value>().await.unwrap()["node_id"],
        "board7"
    );

    let rpc = |params: serde_json::Value| json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": params});
    let started = server
        .send(
            reqwest::Method::POST,
            "/mcp",
            Some(rpc(json!({"prompt": "hi", "stream": true}))),
            None,
        )
        .await;
    let header = started.headers().get("x-rkllm-stream-id").cloned();
    let body: serde_json::Value = started.json().await.unwrap();
    let stream_id = body["result"]["stream_id"].as_str().unwrap();
    assert_eq!(header.unwrap(), stream_id);

    // A poll, a whole answer, an error and an unknown path: the node, and
    // no stream header.
    for (path, body) in [
        (
            "/mcp",
            Some(rpc(json!({"stream_id": stream_id, "from_seq": 0}))),
        ),
        ("/mcp", Some(rpc(json!({"prompt": "hi"})))),
        ("/mcp", Some(rpc(json!({"prompt": ""})))),
        ("/nowhere", None),
    ] {
        let method = if body.is_some() {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        let response = server.send(method, path, body, None).await;
        assert_eq!(response.headers()["x-rkllm-node"], "board7", "{path}");
        assert!(response.headers().get("x-rkllm-stream-id").is_none());
    }
    // The WebSocket upgrade too, with a query naming a stream (ignored).
    let (_, upgrade) =
        tokio_tungstenite::connect_async(format!("{}?stream_id={stream_id}", server.ws_url()))
            .await
            .expect("WebSocket with a query");
    assert_eq!(upgrade.headers()["x-rkllm-node"], "board7");
}

#[tokio::test]
async fn the_agent_check_weighs_the_load_and_drains_at_shutdown() {
    let mut server = Server::start(
        &mock_config(
            20.0,
            0,
            "lanes = 2\nrunner = \"process\"\n[engine]\nkeep_alive_secs = 300",
        ),
        &["--agent-listen", "127.0.0.1:0"],
    );
    let agent = agent_addr(&server);
    // Nothing loaded yet: half weight.
    assert_eq!(agent_line(&agent).await.unwrap(), "ready up 50%\n");
    server
        .ok("run", json!({"prompt": "warm up", "max_tokens": 1}))
        .await;
    wait_line(&agent, "ready up 100%\n").await;
    // Two generations running, one waiting: 100 / (1 + 3).
    let mut held = Vec::new();
    for i in 0..3 {
        let started = server
            .ok(
                "run",
                json!({"prompt": format!("long {i} @mock(length=10000)"), "stream": true}),
            )
            .await;
        held.push(started["stream_id"].as_str().unwrap().to_owned());
    }
    wait_line(&agent, "ready up 25%\n").await;
    for id in &held {
        server.ok("abort", json!({"stream_id": id})).await;
    }

    // Shutting down: `drain` for as long as the agent still answers. A
    // runner that ignores aborts keeps the server waiting for its model
    // worker (up to its grace) after the streams have ended.
    let stalled = server
        .ok(
            "run",
            json!({"prompt": "stall @mock(stall_after=1)", "stream": true}),
        )
        .await;
    server
        .wait_state(stalled["stream_id"].as_str().unwrap(), "active")
        .await;
    server.terminate();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut drained = false;
    while Instant::now() < deadline {
        match agent_line(&agent).await {
            Ok(line) if line == "drain\n" => {
                drained = true;
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(_) => break,
        }
    }
    assert!(drained, "the agent never said drain");
    assert!(server.wait_exit().success());
}
