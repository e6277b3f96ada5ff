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
use crate::rpc::RpcError;
use crate::state::AppState;

/// How long a closing connection waits for its pushers to send end chunks.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// Handles `GET /ws` (subprotocol `mcp` accepted).
pub async fn upgrade(State(state): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    let limit = state.config.limits.max_request_bytes;
    ws.protocols(["mcp"])
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| serve(socket, state))
}

async fn serve(socket: WebSocket, state: Arc<AppState>) {
    let _tracked = state.track_connection();
    let (mut sink, mut incoming) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<String>(OUTBOUND_QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(text) = out_rx.recv().await {
            if sink
                .send(Message::Text(Utf8Bytes::from(text)))
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    });

    let mut session = Session::new(Arc::clone(&state), out_tx);
    let shutdown = state.shutdown_signal();
    tokio::pin!(shutdown);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            frame = incoming.next() => match frame {
                Some(Ok(Message::Text(text))) => session.serve(text.as_str().to_owned()).await,
                Some(Ok(Message::Binary(_))) => {
                    let error = RpcError::invalid_request("binary frames are not accepted; send JSON-RPC as text frames");
                    if !session.send_error(&Value::Null, &error).await {
                        break;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
            },
            () = session.reap() => {}
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
