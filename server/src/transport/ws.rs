//! `GET /ws`: JSON-RPC over WebSocket, one message per text frame, with
//! stream chunks pushed as `run` notifications the moment they exist, and
//! MCP (subprotocol `mcp`) with progress notifications.
//!
//! Per connection: a reader loop feeding a [`Session`] (one task per
//! request) and one writer task fed by the session's bounded queue. When
//! the socket closes, the session ends, which aborts the generations only
//! this connection consumed.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::session::{OUTBOUND_QUEUE, Session};
use super::state::AppState;
use crate::rpc::RpcError;

/// Messages written at most before a flush.
const WRITE_BATCH: usize = 256;

/// How long a closing connection waits for its pushers to send end chunks.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// Handles `GET /ws` (subprotocol `mcp` accepted).
pub async fn upgrade(State(state): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    let limit = state.settings.max_request_bytes;
    ws.protocols(["mcp"])
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| serve(socket, state))
}

async fn serve(socket: WebSocket, state: Arc<AppState>) {
    let _tracked = state.track_connection();
    let (mut sink, mut incoming) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<String>(OUTBOUND_QUEUE);
    let ping_every = state.settings.ws_ping_interval;
    let idle_limit = state.settings.ws_idle_timeout;
    let writer = tokio::spawn(async move {
        let mut pings =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        loop {
            tokio::select! {
                text = out_rx.recv() => match text {
                    Some(text) => {
                        // Everything already queued goes out with one flush.
                        let mut queued = Some(text);
                        let mut sent = 0;
                        while let Some(text) = queued {
                            if sink.feed(Message::Text(Utf8Bytes::from(text))).await.is_err() {
                                return;
                            }
                            sent += 1;
                            queued = if sent < WRITE_BATCH { out_rx.try_recv().ok() } else { None };
                        }
                        if sink.flush().await.is_err() {
                            return;
                        }
                    }
                    None => break,
                },
                _ = pings.tick() => {
                    if sink.send(Message::Ping(Default::default())).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    });

    let mut session = Session::new(Arc::clone(&state), "ws", out_tx);
    let shutdown = state.shutdown_signal();
    tokio::pin!(shutdown);
    let mut shutting_down = false;
    // Anything the client sends (a message, a pong to our pings) shows it
    // is there; one silent for `idle_timeout_secs` is cut off.
    let mut last_seen = tokio::time::Instant::now();
    let mut idle_checks = tokio::time::interval(ping_every);
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
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
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
    let _ = writer.await;
}
