//! Production behaviour: API keys, CORS, health and readiness, metrics,
//! request logs and the connection-level limits.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::harness::{LIVENESS, ScratchDir, Server, Ws, mock_config};

fn ping() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string()
}

#[tokio::test]
async fn api_keys_guard_http_websocket_and_metrics_but_not_health() {
    let dir = ScratchDir::new();
    let key_file = dir.0.join("keys");
    std::fs::write(&key_file, "# team keys\n\nfrom-file-key\n").unwrap();
    let server = Server::start(
        &mock_config(0.0, 0, ""),
        &[
            "--api-key",
            "flag-key",
            "--api-key-file",
            key_file.to_str().unwrap(),
        ],
    );
    let post = |auth: Option<&str>| {
        let mut request = server
            .http
            .post(server.mcp_url())
            .header("content-type", "application/json")
            .body(ping());
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        request.send()
    };
    let refused = post(None).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["www-authenticate"], "Bearer");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32008);
    assert_eq!(post(Some("Bearer wrong")).await.unwrap().status(), 401);
    assert_eq!(post(Some("Basic flag-key")).await.unwrap().status(), 401);
    assert_eq!(post(Some("Bearer flag-key")).await.unwrap().status(), 200);
    assert_eq!(
        post(Some("Bearer from-file-key")).await.unwrap().status(),
        200
    );

    assert!(
        tokio_tungstenite::connect_async(server.ws_url())
            .await
            .is_err(),
        "no key, no WebSocket"
    );
    let mut request = server.ws_url().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", "Bearer flag-key".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request).await.is_ok());

    let metrics = format!("http://{}/metrics", server.addr);
    assert_eq!(
        server.http.get(&metrics).send().await.unwrap().status(),
        401
    );
    let health = format!("http://{}/health", server.addr);
    assert_eq!(server.http.get(&health).send().await.unwrap().status(), 200);
    let log = server.log().join("\n");
    assert!(
        !log.contains("flag-key") && !log.contains("from-file-key"),
        "keys are never logged"
    );
}

#[tokio::test]
async fn cors_answers_only_the_configured_origins() {
    let config = mock_config(
        0.0,
        0,
        "[http]\ncors_origins = [\"http://webui.local:3000\"]\n",
    );
    let server = Server::start(&config, &[]);
    let preflight = |origin: &str| {
        server
            .http
            .request(reqwest::Method::OPTIONS, server.mcp_url())
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,authorization",
            )
            .send()
    };
    let allowed = preflight("http://webui.local:3000").await.unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "http://webui.local:3000"
    );
    let other = preflight("http://evil.example.com").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    let post = server
        .http
        .post(server.mcp_url())
        .header("origin", "http://webui.local:3000")
        .header("content-type", "application/json")
        .body(ping())
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 200);
    assert_eq!(
        post.headers()["access-control-allow-origin"],
        "http://webui.local:3000"
    );
}

#[tokio::test]
async fn ready_reports_a_full_queue_and_metrics_count_what_happened() {
    let server = Server::start(&mock_config(2.0, 0, "[engine]\nqueue_len = 1\n"), &[]);
    let ready = format!("http://{}/ready", server.addr);
    assert_eq!(server.http.get(&ready).send().await.unwrap().status(), 200);
    let slow = json!({"prompt": "slow @mock(length=1000)", "stream": true});
    let running = server.ok("run", slow.clone()).await;
    server
        .wait_state(running["stream_id"].as_str().unwrap(), "active")
        .await;
    let queued = server.ok("run", slow.clone()).await;
    let not_ready = server.http.get(&ready).send().await.unwrap();
    assert_eq!(not_ready.status(), 503);
    let body: Value = not_ready.json().await.unwrap();
    assert!(body["reason"].as_str().unwrap().contains("queue"), "{body}");
    assert_eq!(server.call("run", slow).await["error"]["code"], -32002);
    server
        .ok("abort", json!({"stream_id": queued["stream_id"]}))
        .await;
    server
        .ok("abort", json!({"stream_id": running["stream_id"]}))
        .await;
    assert_eq!(server.http.get(&ready).send().await.unwrap().status(), 200);
    server
        .ok(
            "run",
            json!({"prompt": "fast @mock(length=3, prefill_ms=0)"}),
        )
        .await;

    let metrics = server.metrics_text().await;
    for needle in [
        "rkllm_requests_total{transport=\"http\",outcome=\"ok\"}",
        "rkllm_rejected_requests_total{reason=\"busy\"} 1",
        "rkllm_aborts_total{cause=\"client\"} 2",
        "rkllm_generations_total",
        "rkllm_generated_tokens_total",
        "rkllm_time_to_first_token_seconds_bucket",
        "rkllm_queue_wait_seconds_count",
        "rkllm_decode_tokens_per_second",
        "rkllm_active_streams 0",
        "rkllm_queued_requests 0",
        "rkllm_stream_buffered_bytes",
    ] {
        assert!(metrics.contains(needle), "missing {needle} in\n{metrics}");
    }
    let log = server.log().join("\n");
    let request_lines: Vec<&str> = log.lines().filter(|l| l.contains("request_id=")).collect();
    assert!(
        request_lines
            .iter()
            .any(|l| l.contains("method=\"run\"") || l.contains("method=run")),
        "{log}"
    );
    assert!(
        !log.contains("slow @mock"),
        "prompts are never logged at info"
    );
    assert!(
        !log.contains(running["stream_id"].as_str().unwrap()),
        "stream ids are never logged at info"
    );
}

#[tokio::test]
async fn one_connection_may_hold_only_so_many_unfinished_streams() {
    let server = Server::start(
        &mock_config(
            1.0,
            0,
            "[limits]\nmax_streams_per_connection = 2\n[engine]\nqueue_len = 8\n",
        ),
        &[],
    );
    let mut ws = Ws::connect(&server).await;
    let slow = json!({"prompt": "slow @mock(length=1000)"});
    ws.start_stream(slow.clone()).await;
    ws.start_stream(slow.clone()).await;
    let mut params = slow.clone();
    params["stream"] = json!(true);
    let id = ws.request("run", params).await;
    let mut notes = Vec::new();
    let refused = ws.response(id, &mut notes).await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_streams_per_connection")
    );
    // Another connection is not affected.
    let mut other = Ws::connect(&server).await;
    other.start_stream(slow).await;
}

#[tokio::test]
async fn a_client_that_sends_headers_too_slowly_is_cut_off() {
    let server = Server::start(
        &mock_config(0.0, 0, "[http]\nheader_read_timeout_secs = 1\n"),
        &[],
    );
    let mut socket = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    socket
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // ...and never finishes its headers: the server closes the connection.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(LIVENESS, socket.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the connection was closed by the server");
    // Others are still served.
    assert_eq!(server.ok("ping", json!({})).await, json!({}));
}

#[tokio::test]
async fn a_websocket_that_stops_answering_pings_is_closed_and_its_generation_aborted() {
    let config = mock_config(
        5.0,
        0,
        "[websocket]\nping_interval_secs = 1\nidle_timeout_secs = 2\n",
    );
    let server = Server::start(&config, &[]);
    // A raw client that never reads, so it never answers the pings.
    let (mut socket, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    let run = json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": {"prompt": "x @mock(length=100000)", "stream": true}});
    futures_util::SinkExt::send(
        &mut socket,
        tokio_tungstenite::tungstenite::Message::Text(run.to_string().into()),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    // The connection was closed by the server: reading drains what was
    // buffered, then ends.
    let closed = tokio::time::timeout(LIVENESS, async {
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
    assert!(closed.is_ok());
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("stopped answering pings")),
        "{:?}",
        server.log()
    );
    let next = server
        .ok(
            "run",
            json!({"prompt": "after @mock(length=3, prefill_ms=0)"}),
        )
        .await;
    assert_eq!(next["finish_reason"], "stop");
}
