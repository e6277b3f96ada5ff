//! Connection-level limits: what an idle WebSocket costs and a WebSocket
//! message over the size limit.

use std::time::Duration;

use futures_util::future::join_all;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::harness::{LIVENESS, Server, Ws, emulated, mock_config};

/// The resident memory of process `pid`, in KiB (`VmRSS` of its status).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in the process status")
}

/// Raises this process's soft open-file limit to at least `wanted`
/// (within its hard limit); returns the limit it has then.
fn raise_own_fd_limit(wanted: u64) -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    if current >= wanted {
        return current;
    }
    let target = limit.maximum.map_or(wanted, |max| max.min(wanted));
    let raised = rustix::process::Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    setrlimit(Resource::Nofile, raised).expect("raise the test's open-file limit");
    target
}

/// Connects and makes one call, so the connection is fully set up on the
/// server's side; then it stays open and idle.
async fn idle_websocket(server: &Server) -> Ws {
    let mut ws = Ws::connect(server).await;
    let id = ws.request("ping", json!({})).await;
    let answer = ws.response(id, &mut Vec::new()).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_websockets_cost_at_most_16_kib_each() {
    const CONNECTIONS: usize = 2000;
    if emulated() {
        eprintln!(
            "skipped under emulation: {CONNECTIONS} connections and the server's memory are \
             measured natively only (qemu-user changes both)"
        );
        return;
    }
    let limit = raise_own_fd_limit(2 * CONNECTIONS as u64 + 256);
    if limit < CONNECTIONS as u64 + 256 {
        eprintln!(
            "skipped: the open-file limit of the tests is {limit}, too low for {CONNECTIONS} connections"
        );
        return;
    }
    let server = Server::start(&mock_config(0.0, 0, ""), &[]);
    // Warm up what every connection shares (runtime threads, allocator
    // arenas), then measure from there.
    for _ in 0..4 {
        let warm = join_all((0..50).map(|_| idle_websocket(&server))).await;
        join_all(warm.into_iter().map(Ws::close)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(server.pid());
    let mut open = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS / 100 {
        open.extend(join_all((0..100).map(|_| idle_websocket(&server))).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(server.pid());
    let per_connection = after.saturating_sub(before) as f64 / CONNECTIONS as f64;
    eprintln!(
        "server RSS {before} KiB before, {after} KiB with {CONNECTIONS} idle WebSockets: \
         {per_connection:.1} KiB each"
    );
    assert!(
        per_connection <= 16.0,
        "an idle WebSocket costs {per_connection:.1} KiB of the server's memory (at most 16)"
    );
    // They all still work.
    let mut last = open.pop().unwrap();
    let id = last.request("ping", json!({})).await;
    assert_eq!(
        last.response(id, &mut Vec::new()).await["result"],
        json!({})
    );
}

#[tokio::test]
async fn a_websocket_message_over_the_limit_closes_the_connection_with_1009() {
    let server = Server::start(
        &mock_config(
            0.0,
            0,
            "[limits]\nmax_request_bytes = 4096\nmax_prompt_bytes = 1024\n",
        ),
        &[],
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(server.ws_url())
        .await
        .unwrap();
    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": {"prompt": "y".repeat(8000)}});
    socket
        .send(Message::Text(big.to_string().into()))
        .await
        .unwrap();
    let close = loop {
        match tokio::time::timeout(LIVENESS, socket.next())
            .await
            .expect("the server answers")
        {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    let close = close.expect("a close status");
    assert_eq!(close.code, CloseCode::Size, "{close:?}");
    assert_eq!(u16::from(close.code), 1009);
    assert!(close.reason.contains("4096"), "{close:?}");
    assert!(
        close.reason.contains("limits.max_request_bytes"),
        "{close:?}"
    );
    // Others are served; a message under the limit is fine.
    let mut ws = Ws::connect(&server).await;
    let id = ws.request("ping", json!({})).await;
    assert_eq!(ws.response(id, &mut Vec::new()).await["result"], json!({}));
}
