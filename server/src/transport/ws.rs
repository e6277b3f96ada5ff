//! `GET /ws`: JSON-RPC over WebSocket, one message per text frame, with
//! stream chunks pushed as `run` notifications the moment they exist, and
//! MCP (subprotocol `mcp`) with progress notifications.
//!
//! Per connection: a reader loop feeding a [`Session`] (one task per
//! request); every task writes to the socket itself, under one lock
//! (no writer task in between). When the socket closes, the session
//! ends, which aborts the generations only this connection consumed.
//!
//! A connection holds a slot of the cap ([`super::ws_slots`]) from its
//! upgrade to its close; one that sends a message over the size limit is
//! closed with 1009. An idle connection costs about 10 KiB.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{ConnectInfo, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use futures_util::future::BoxFuture;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

use super::errors::failure;
use super::session::Session;
use super::state::AppState;
use super::ws_slots::{Refusal, WsSlot};
use crate::rpc::{Notifier, Outbox, RpcError, codes};
use crate::task::Tasks;

/// How long a closing connection waits for its pushers to send end chunks.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// The read buffer a connection starts with. Requests are small; a larger
/// message grows the buffer to its size. (The write buffer starts empty
/// and grows to the largest batch written, so streaming is unaffected.)
/// An idle connection costs little more than this.
const READ_BUFFER_BYTES: usize = 4 * 1024;

/// A refused client may try again after this.
const RETRY_AFTER_SECS: u64 = 1;

/// Handles `GET /ws` (subprotocol `mcp` accepted). Over the connection cap
/// (`[websocket] max_connections`, `max_connections_per_ip`) the upgrade is
/// refused with 503 and a JSON-RPC error naming the limit.
pub async fn upgrade(
    State(state): State<Arc<AppState>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    ws: WebSocketUpgrade,
) -> Response {
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    let slot = match state.ws_slots.acquire(peer) {
        Ok(slot) => slot,
        Err(refusal) => return refuse(&refusal),
    };
    let limit = state.settings.max_request_bytes;
    ws.protocols(["mcp"])
        .max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(READ_BUFFER_BYTES)
        .on_upgrade(move |socket| serve(socket, state, slot))
}

/// The answer to an upgrade over the cap: 503, `Retry-After`, and -32002.
fn refuse(refusal: &Refusal) -> Response {
    // Not logged at info: a flood of refusals would flood the log too;
    // the metric counts them.
    tracing::debug!(%refusal, "WebSocket refused");
    crate::metrics::rejected("connection_limit");
    let error = RpcError::new(codes::SERVER_BUSY, refusal.to_string())
        .with_data(json!({ "retry_after_ms": RETRY_AFTER_SECS * 1000 }));
    let mut response = failure(StatusCode::SERVICE_UNAVAILABLE, &error);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
    response
}

/// The close frame for a connection whose reading failed with `err`: 1009
/// for a message over `limit` (naming the setting), none otherwise.
fn close_for(err: &axum::Error, limit: usize) -> Option<CloseFrame> {
    let source = std::error::Error::source(err)?;
    match source.downcast_ref::<tungstenite::Error>()? {
        tungstenite::Error::Capacity(_) => Some(CloseFrame {
            code: close_code::SIZE,
            reason: Utf8Bytes::from(format!(
                "message over the limit of {limit} bytes (limits.max_request_bytes)"
            )),
        }),
        _ => None,
    }
}

/// The sending half of a WebSocket, written by whichever task has
/// something to send (a reply, a batch of chunks, a progress note, a
/// ping), so a chunk goes from the task that read it to the wire without
/// a hand-off. The lock is async: a slow reader makes writers wait, which
/// slows the pushers instead of losing messages.
#[derive(Debug)]
struct SocketOutbox {
    sink: tokio::sync::Mutex<SplitSink<WebSocket, Message>>,
}

impl SocketOutbox {
    async fn write(&self, messages: Vec<Message>) -> bool {
        let mut sink = self.sink.lock().await;
        for message in messages {
            if sink.feed(message).await.is_err() {
                return false;
            }
        }
        sink.flush().await.is_ok()
    }
}

impl Outbox for SocketOutbox {
    fn send_all(&self, messages: Vec<String>) -> BoxFuture<'_, bool> {
        Box::pin(
            self.write(
                messages
                    .into_iter()
                    .map(|text| Message::Text(Utf8Bytes::from(text)))
                    .collect(),
            ),
        )
    }
}

async fn serve(socket: WebSocket, state: Arc<AppState>, slot: WsSlot) {
    let _slot = slot;
    let _tracked = state.track_connection();
    let (sink, mut incoming) = socket.split();
    let outbox = Arc::new(SocketOutbox {
        sink: tokio::sync::Mutex::new(sink),
    });
    let ping_every = state.settings.ws_ping_interval;
    let idle_limit = state.settings.ws_idle_timeout;
    // Pings go out from their own task, so a reader stuck behind a slow
    // write never delays reading. The task is this connection's: it ends
    // when `pinger` drops, however the connection ends.
    let pinger = Tasks::new();
    {
        let outbox = Arc::clone(&outbox);
        pinger.spawn(async move {
            let mut pings =
                tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
            // A late ping goes out once, and the next a whole period after
            // it: never two at once.
            pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                pings.tick().await;
                if !outbox.write(vec![Message::Ping(Bytes::new())]).await {
                    return;
                }
            }
        });
    }

    let out: Notifier = Arc::clone(&outbox) as Arc<dyn Outbox>;
    let mut session = Session::new(&state, "ws", out);
    let shutdown = state.shutdown_signal();
    tokio::pin!(shutdown);
    let mut shutting_down = false;
    let mut close = None;
    // Anything the client sends (a message, a pong to our pings) shows it
    // is there; one silent for `idle_timeout_secs` is cut off.
    let mut last_seen = tokio::time::Instant::now();
    let mut idle_checks = tokio::time::interval(ping_every);
    // A check that is late runs once; the schedule goes on from it.
    idle_checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            frame = incoming.next() => {
                last_seen = tokio::time::Instant::now();
                match frame {
                Some(Ok(Message::Text(text))) => session.serve(text.as_str().to_owned()).await,
                Some(Ok(Message::Binary(_))) => {
                    let error = RpcError::invalid_request("binary frames are not accepted; send JSON-RPC as text frames");
                    if !session.send_error(&Value::Null, &error).await {
                        break;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Err(err)) => {
                    close = close_for(&err, state.settings.max_request_bytes);
                    if close.is_some() {
                        crate::metrics::rejected("too_large");
                        tracing::info!(limit = state.settings.max_request_bytes, "WebSocket closed: a message over limits.max_request_bytes");
                    }
                    break;
                }
                Some(Ok(Message::Close(_))) | None => break,
                }
            }
            () = session.reap() => {}
            _ = idle_checks.tick() => {
                if last_seen.elapsed() >= idle_limit {
                    tracing::info!(idle_secs = idle_limit.as_secs(), "WebSocket closed: the client stopped answering pings");
                    break;
                }
            }
            () = &mut shutdown => {
                shutting_down = true;
                break;
            }
        }
    }
    // On shutdown every stream has been ended: give the pushers a moment
    // to deliver the end chunks. A closed socket gets no grace.
    session
        .finish(if shutting_down {
            CLOSE_GRACE
        } else {
            Duration::ZERO
        })
        .await;
    pinger.abort();
    let _ = outbox.write(vec![Message::Close(close)]).await;
}
