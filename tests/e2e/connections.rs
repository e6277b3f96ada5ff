//! Connection-level limits: what an idle WebSocket costs, the cap on
//! WebSocket connections, a WebSocket message over the size limit, a
//! request body sent too slowly, and the open-file limit.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

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
    // All from 127.0.0.1: no limit per address.
    let server = Server::start(
        &mock_config(0.0, 0, "[websocket]\nmax_connections_per_ip = 0\n"),
        &[],
    );
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

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens `/ws` from the local address `from` (any 127.0.0.0/8 address is
/// this machine): the server's answer to the upgrade, and the socket when
/// it was accepted.
async fn connect_from(
    server: &Server,
    from: &str,
) -> Result<Socket, tungstenite::http::Response<Option<Vec<u8>>>> {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let stream = socket.connect(server.addr).await.expect("TCP connect");
    let connecting =
        tokio_tungstenite::client_async(server.ws_url(), MaybeTlsStream::Plain(stream));
    match tokio::time::timeout(LIVENESS, connecting)
        .await
        .expect("the upgrade is answered")
    {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::Error::Http(response)) => Err(*response),
        Err(other) => panic!("the upgrade failed otherwise: {other}"),
    }
}

/// A refusal: 503 with `Retry-After` and a JSON-RPC busy error whose
/// message names `key`.
fn check_refusal(response: &tungstenite::http::Response<Option<Vec<u8>>>, key: &str) {
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value =
        serde_json::from_slice(response.body().as_deref().expect("a body")).expect("JSON");
    assert_eq!(body["error"]["code"], -32002, "{body}");
    assert!(body["error"]["data"]["retry_after_ms"].is_u64(), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{key};")) || message.contains(&format!("{key} ")),
        "{message}"
    );
}

async fn ping(socket: &mut Socket) {
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    socket
        .send(Message::Text(request.to_string().into()))
        .await
        .unwrap();
    loop {
        let frame = tokio::time::timeout(LIVENESS, socket.next())
            .await
            .expect("an answer")
            .expect("open")
            .expect("no error");
        if let Message::Text(text) = frame {
            let answer: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(answer["result"], json!({}), "{answer}");
            return;
        }
    }
}

#[tokio::test]
async fn websockets_over_the_cap_are_refused_with_503_and_the_open_ones_go_on() {
    let server = Server::start(
        &mock_config(
            0.0,
            0,
            "[websocket]\nmax_connections = 3\nmax_connections_per_ip = 0\n",
        ),
        &[],
    );
    let mut open = Vec::new();
    for from in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        open.push(connect_from(&server, from).await.expect("under the cap"));
    }
    let refused = connect_from(&server, "127.0.0.4")
        .await
        .expect_err("over the cap");
    check_refusal(&refused, "websocket.max_connections");
    for socket in &mut open {
        ping(socket).await;
    }
    // HTTP is not affected.
    assert_eq!(server.ok("ping", json!({})).await, json!({}));
    // A closed connection frees its slot (once the server has seen it go).
    let mut first = open.remove(0);
    first.close(None).await.unwrap();
    let deadline = tokio::time::Instant::now() + LIVENESS;
    let mut again = loop {
        match connect_from(&server, "127.0.0.4").await {
            Ok(socket) => break socket,
            Err(refused) => check_refusal(&refused, "websocket.max_connections"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot was never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ping(&mut again).await;
}

#[tokio::test]
async fn one_address_over_its_cap_is_refused_and_other_addresses_are_not() {
    let server = Server::start(
        &mock_config(
            0.0,
            0,
            "[websocket]\nmax_connections = 10\nmax_connections_per_ip = 2\n",
        ),
        &[],
    );
    let mut mine = vec![
        connect_from(&server, "127.0.0.5").await.unwrap(),
        connect_from(&server, "127.0.0.5").await.unwrap(),
    ];
    let refused = connect_from(&server, "127.0.0.5")
        .await
        .expect_err("over the cap per address");
    check_refusal(&refused, "websocket.max_connections_per_ip");
    let mut other = connect_from(&server, "127.0.0.6")
        .await
        .expect("another address");
    ping(&mut other).await;
    for socket in &mut mine {
        ping(socket).await;
    }
}

/// The soft and hard "Max open files" of process `pid`.
fn open_file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("process limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut words = line["Max open files".len()..].split_whitespace();
    (
        words.next().unwrap().to_owned(),
        words.next().unwrap().to_owned(),
    )
}

#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit_at_start() {
    use std::os::unix::process::CommandExt;

    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    const LOW: u64 = 128;
    let hard = getrlimit(Resource::Nofile).maximum;
    if hard.is_some_and(|hard| hard <= LOW) {
        eprintln!(
            "skipped: the hard open-file limit is {hard:?}, nothing to raise a soft limit to"
        );
        return;
    }
    let low = Rlimit {
        current: Some(LOW),
        maximum: hard,
    };
    let server = Server::start_prepared(&mock_config(0.0, 0, ""), &[], &[], |command| {
        // SAFETY: the closure runs in the child between fork and exec, where
        // only async-signal-safe calls are allowed: it makes one system call
        // (setrlimit) and allocates nothing.
        unsafe {
            command.pre_exec(move || setrlimit(Resource::Nofile, low).map_err(Into::into));
        }
    });
    let (soft, hard) = open_file_limits(server.pid());
    assert_ne!(soft, LOW.to_string(), "the soft limit was left at {soft}");
    assert_eq!(soft, hard, "the soft limit is raised to the hard limit");
}

#[tokio::test]
async fn a_request_body_sent_too_slowly_is_answered_408_and_others_are_served() {
    let server = Server::start(
        &mock_config(0.0, 0, "[http]\nbody_read_timeout_secs = 2\n"),
        &[],
    );
    let mut socket = TcpStream::connect(server.addr).await.unwrap();
    socket
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Content-Length: 1000\r\n\r\n{",
        )
        .await
        .unwrap();
    // Others are served while the body trickles in.
    assert_eq!(server.ok("ping", json!({})).await, json!({}));
    // One byte a second (1000 would take 17 minutes) until the server
    // answers.
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        tokio::select! {
            read = socket.read(&mut buf) => {
                let n = read.unwrap_or(0);
                answer.extend_from_slice(&buf[..n]);
                if n == 0 || answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                assert!(tokio::time::Instant::now() < deadline, "the server never cut the body");
                let _ = socket.write_all(b" ").await;
            }
        }
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // The rest of the answer: a JSON-RPC error naming the setting, then
    // the connection closes.
    let mut rest = Vec::new();
    tokio::time::timeout(LIVENESS, socket.read_to_end(&mut rest))
        .await
        .expect("the connection is closed")
        .ok();
    let text = format!("{answer}{}", String::from_utf8_lossy(&rest));
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    let body: Value = serde_json::from_str(body).expect("a JSON body");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("http.body_read_timeout_secs"),
        "{body}"
    );
    assert_eq!(server.ok("ping", json!({})).await, json!({}));
}
