//! `GET /ws`: JSON-RPC over WebSocket, one message per text frame, with
//! stream chunks pushed as `run` notifications the moment they exist.
//!
//! Per connection: a reader loop, one writer task fed by a bounded queue
//! (a slow client slows its pushers, whose streams then hit their buffer
//! limit; nothing is dropped silently), and one task per request, so that
//! `ping` and `abort` are served while a generation runs. When the socket
//! closes, every task of the connection is dropped, which detaches its
//! stream consumers and aborts their generations.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::rpc::{Connection, Dispatcher, RpcError, chunk_notification, error_response};
use crate::state::AppState;
use crate::stream::Consumer;

/// Outgoing messages queued per connection before pushers wait.
const OUTBOUND_QUEUE: usize = 256;
/// Requests one connection may have in flight before reading pauses.
const MAX_IN_FLIGHT: usize = 64;
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
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(OUTBOUND_QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            if sink.send(message).await.is_err() {
                return;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    });

    let dispatcher = Dispatcher::new(Arc::clone(&state));
    let conn = Arc::new(Connection::new(true));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tasks = JoinSet::new();
    let shutdown = state.shutdown_signal();
    tokio::pin!(shutdown);
    let mut shutting_down = false;

    loop {
        tokio::select! {
            frame = incoming.next() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(_))) => {
                        let error = RpcError::invalid_request("binary frames are not accepted; send JSON-RPC as text frames");
                        if out_tx.send(text_message(error_response(&Value::Null, &error))).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                };
                let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else { break };
                let (dispatcher, conn, out_tx) = (dispatcher.clone(), Arc::clone(&conn), out_tx.clone());
                tasks.spawn(async move {
                    let reply = dispatcher.handle_text(&conn, &text).await;
                    if let Some(message) = reply.message {
                        if out_tx.send(text_message(message)).await.is_err() {
                            return;
                        }
                    }
                    drop(permit);
                    for consumer in reply.subscriptions {
                        push(consumer, &out_tx).await;
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            () = &mut shutdown => {
                shutting_down = true;
                break;
            }
        }
    }

    if shutting_down {
        // Every stream has been ended: let the pushers deliver the end
        // chunks, then close.
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
    }
    // Dropping the tasks drops their consumers: generations nobody else
    // consumes are aborted.
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    drop(out_tx);
    let _ = writer.await;
}

fn text_message(text: String) -> Message {
    Message::Text(Utf8Bytes::from(text))
}

/// Pushes a stream's chunks until its end chunk, or until the connection
/// goes away.
async fn push(mut consumer: Consumer, out: &mpsc::Sender<Message>) {
    let stream = Arc::clone(consumer.stream());
    loop {
        let batch = consumer.next_batch().await;
        if batch.is_empty() {
            return;
        }
        for chunk in &batch {
            let message = chunk_notification(stream.id(), chunk);
            if out.send(text_message(message)).await.is_err() {
                return;
            }
            if chunk.end.is_some() {
                return;
            }
        }
    }
}
