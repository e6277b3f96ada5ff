//! MCP as real clients speak it: Streamable HTTP (sessions, SSE, header
//! checks), WebSocket with the `mcp` subprotocol, progress and
//! cancellation.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::harness::{LIVENESS, Server, mock_config};

fn init_body(version: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string()
}

async fn post(server: &Server, headers: &[(&str, &str)], body: String) -> reqwest::Response {
    let mut request = server
        .http
        .post(server.mcp_url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.body(body).send().await.unwrap()
}

/// Posts a ping with extra headers; returns the status.
async fn ping_status(server: &Server, headers: &[(&str, &str)]) -> u16 {
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
    post(server, headers, ping).await.status().as_u16()
}

#[tokio::test]
async fn initialize_opens_a_session_and_unknown_or_deleted_sessions_get_404() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let response = post(&server, &[], init_body("2025-06-18")).await;
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(session.len(), 32);
    assert!(session.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"]["protocolVersion"], "2025-06-18");

    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
    let with = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    assert_eq!(post(&server, &with, ping.clone()).await.status(), 200);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert_eq!(post(&server, &with, note).await.status(), 202);

    let unknown = [("mcp-session-id", "00000000000000000000000000000000")];
    assert_eq!(post(&server, &unknown, ping.clone()).await.status(), 404);

    let deleted = server
        .http
        .delete(server.mcp_url())
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(post(&server, &with, ping.clone()).await.status(), 404);
    let again = server
        .http
        .delete(server.mcp_url())
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
    let bare = server.http.delete(server.mcp_url()).send().await.unwrap();
    assert_eq!(bare.status(), 400);

    // Without a session id, requests are served statelessly.
    assert_eq!(ping_status(&server, &[]).await, 200);
    assert_eq!(
        server
            .http
            .get(server.mcp_url())
            .send()
            .await
            .unwrap()
            .status(),
        405
    );
}

#[tokio::test]
async fn headers_are_checked_protocol_version_content_type_accept() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
    assert_eq!(
        ping_status(&server, &[("mcp-protocol-version", "1999-01-01")]).await,
        400
    );
    assert_eq!(
        ping_status(&server, &[("mcp-protocol-version", "2024-11-05")]).await,
        200
    );
    let text = server
        .http
        .post(server.mcp_url())
        .header("content-type", "text/plain")
        .body(ping.clone())
        .send();
    assert_eq!(text.await.unwrap().status(), 415);
    let html = server
        .http
        .post(server.mcp_url())
        .header("accept", "text/html")
        .body(ping)
        .send();
    assert_eq!(html.await.unwrap().status(), 406);
}

#[tokio::test]
async fn origin_and_host_are_checked_on_mcp_and_websocket() {
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    assert_eq!(
        ping_status(&server, &[("origin", "http://evil.example.com")]).await,
        403
    );
    // Another port of the same machine is another site; the server's own
    // page is not.
    assert_eq!(
        ping_status(&server, &[("origin", "http://localhost:3000")]).await,
        403
    );
    let own = format!("http://{}", server.addr);
    assert_eq!(ping_status(&server, &[("origin", own.as_str())]).await, 200);
    assert_eq!(
        ping_status(&server, &[("host", "evil.example.com")]).await,
        403
    );
    assert_eq!(
        ping_status(&server, &[("host", "localhost:1234")]).await,
        200
    );
    let mut request = server.ws_url().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("origin", "http://evil.example.com".parse().unwrap());
    let refused = tokio_tungstenite::connect_async(request).await;
    assert!(
        refused.is_err(),
        "a WebSocket from a foreign origin is refused"
    );

    let open = Server::start(
        &mock_config(
            0.0,
            0,
            "[http]\nallowed_hosts = [\"*\"]\nallowed_origins = [\"*\"]\n",
        ),
        &[],
    );
    assert_eq!(
        ping_status(&open, &[("origin", "http://evil.example.com")]).await,
        200
    );
}

#[tokio::test]
async fn tools_call_with_a_progress_token_is_answered_with_sse() {
    let server = Server::start(&mock_config(100.0, 0, ""), &[]);
    let list = server.ok("tools/list", json!({})).await;
    assert_eq!(list["tools"][0]["name"], "generate");
    assert_eq!(
        list["tools"][0]["inputSchema"]["required"],
        json!(["prompt"])
    );
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "generate", "arguments": {"prompt": "sse please", "max_tokens": 30},
        "_meta": {"progressToken": "tok-1"}}});
    let response = post(&server, &[], call.to_string()).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = response.text().await.unwrap();
    let messages: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    let (result, progress) = messages.split_last().unwrap();
    assert_eq!(result["id"], 9);
    let text = result["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(result["result"]["structuredContent"]["text"], text);
    assert!(progress.len() > 1, "{body}");
    let mut last = 0.0;
    let mut joined = String::new();
    for note in progress {
        assert_eq!(note["method"], "notifications/progress");
        assert_eq!(note["params"]["progressToken"], "tok-1");
        assert_eq!(note["params"]["total"], 30);
        let p = note["params"]["progress"].as_f64().unwrap();
        assert!(p > last, "progress increases");
        last = p;
        joined.push_str(note["params"]["message"].as_str().unwrap());
    }
    assert_eq!(joined, text);

    let unknown = server
        .call("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_eq!(unknown["error"]["code"], -32602);
    let bad = server
        .ok(
            "tools/call",
            json!({"name": "generate", "arguments": {"prompt": 5}}),
        )
        .await;
    assert_eq!(bad["isError"], true);
    let bad = server
        .ok(
            "tools/call",
            json!({"name": "generate", "arguments": {"prompt": "x", "model": "nope"}}),
        )
        .await;
    assert_eq!(bad["isError"], true);
}

async fn ws_mcp(
    server: &Server,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let mut request = server.ws_url().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "mcp".parse().unwrap());
    let (socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "mcp");
    socket
}

async fn next_json(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        match tokio::time::timeout(LIVENESS, socket.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn over_websocket_progress_streams_and_a_cancelled_call_stops_without_a_response() {
    let server = Server::start(&mock_config(20.0, 0, ""), &[]);
    let mut socket = ws_mcp(&server).await;
    let send = |v: Value| Message::Text(v.to_string().into());
    socket.send(send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}))).await.unwrap();
    assert_eq!(
        next_json(&mut socket).await["result"]["protocolVersion"],
        "2025-11-25"
    );
    socket
        .send(send(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ))
        .await
        .unwrap();

    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "generate", "arguments": {"prompt": "forever @mock(length=100000)"}, "_meta": {"progressToken": 7}}});
    socket.send(send(call)).await.unwrap();
    let first = next_json(&mut socket).await;
    assert_eq!(first["method"], "notifications/progress");
    assert_eq!(first["params"]["progressToken"], 7);
    socket.send(send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "test"}}))).await.unwrap();
    // The model is free again (had the call gone on, this would wait
    // 5000 s), and no response to request 7 ever arrives.
    socket.send(send(json!({"jsonrpc": "2.0", "id": 8, "method": "run", "params": {"prompt": "next @mock(length=3)"}}))).await.unwrap();
    loop {
        let message = next_json(&mut socket).await;
        assert_ne!(
            message["id"], 7,
            "a cancelled request is not answered: {message}"
        );
        if message["id"] == 8 {
            assert_eq!(message["result"]["finish_reason"], "stop");
            break;
        }
    }
}

#[tokio::test]
async fn a_dropped_sse_connection_aborts_its_generation() {
    let server = Server::start(&mock_config(20.0, 0, ""), &[]);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "generate", "arguments": {"prompt": "forever @mock(length=100000)"},
        "_meta": {"progressToken": "p"}}});
    let mut response = post(&server, &[], call.to_string()).await;
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
    drop(response);
    // The model is free again: had the call gone on, this would wait 5000 s.
    let next = server
        .ok("run", json!({"prompt": "after @mock(length=3)"}))
        .await;
    assert_eq!(next["finish_reason"], "stop");
}
