//! Per-connection JSON-RPC state: the negotiated MCP version, requests in
//! flight (for `notifications/cancelled`), the connection's unfinished
//! streams, and where its notifications go.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::service::streams::Stream;
use crate::vocab::CancelToken;

/// Somewhere messages are written in order: a socket written by the
/// sending task itself (WebSocket), or a queue a writer task drains
/// (stdio, TCP, one HTTP response's SSE stream).
pub trait Outbox: Send + Sync + fmt::Debug {
    /// Writes `messages` in order, with one flush where the wire has one.
    /// Returns false once the peer is gone. Waits while the peer is slow,
    /// which slows the sender instead of losing messages.
    fn send_all(&self, messages: Vec<String>) -> BoxFuture<'_, bool>;

    /// Writes one message; see [`send_all`](Self::send_all).
    fn send(&self, message: String) -> BoxFuture<'_, bool> {
        self.send_all(vec![message])
    }
}

/// A bounded queue: full means wait.
impl Outbox for mpsc::Sender<String> {
    fn send_all(&self, messages: Vec<String>) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            for message in messages {
                if mpsc::Sender::send(self, message).await.is_err() {
                    return false;
                }
            }
            true
        })
    }
}

/// Where a request's notifications (MCP progress, pushed chunks) go: the
/// connection's own outbox, or one HTTP response's SSE stream.
pub type Notifier = Arc<dyn Outbox>;

/// Per-connection protocol state.
#[derive(Debug)]
pub struct Connection {
    transport: &'static str,
    push: bool,
    notifier: Option<Notifier>,
    // Synchronous lock: read or written once per initialize or batch.
    protocol: Mutex<Option<&'static str>>,
    // Synchronous lock: one insert or removal per request, one lookup per
    // `notifications/cancelled`. Keys are the ids' JSON text, so 1 and "1"
    // differ.
    in_flight: Mutex<HashMap<String, CancelToken>>,
    // Synchronous lock: pruned and counted once per new stream.
    streams: Mutex<Vec<std::sync::Weak<Stream>>>,
}

impl Connection {
    /// A connection; `push` when the transport can push notifications
    /// (WebSocket, stdio), false for HTTP request/response.
    pub fn new(push: bool) -> Self {
        Self {
            transport: "http",
            push,
            notifier: None,
            protocol: Mutex::new(None),
            in_flight: Mutex::new(HashMap::new()),
            streams: Mutex::new(Vec::new()),
        }
    }

    /// Whether this connection has fewer than `limit` unfinished streams.
    pub fn has_room_for_stream(&self, limit: usize) -> bool {
        let mut streams = self.streams.lock();
        streams.retain(|s| s.upgrade().is_some_and(|s| !s.is_ended()));
        streams.len() < limit
    }

    /// Counts a stream as this connection's until it ends.
    pub fn track_stream(&self, stream: &Arc<Stream>) {
        self.streams.lock().push(Arc::downgrade(stream));
    }

    /// A push connection of `transport` (for metrics and logs) whose
    /// notifications go to `notifier`.
    pub fn with_notifier(transport: &'static str, notifier: Notifier) -> Self {
        Self {
            transport,
            notifier: Some(notifier),
            ..Self::new(true)
        }
    }

    /// Where this connection's notifications go, when it can push.
    pub(super) fn notifier(&self) -> Option<&Notifier> {
        self.notifier.as_ref()
    }

    /// The transport's name in metrics and logs.
    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// Cancels the in-flight request with this id (`notifications/cancelled`).
    /// Unknown or finished ids are ignored.
    pub fn cancel_request(&self, id: &Value) -> bool {
        let token = self.in_flight.lock().get(&id.to_string()).cloned();
        token.inspect(CancelToken::cancel).is_some()
    }

    /// Cancels every in-flight request (the connection or session ended).
    pub fn cancel_all(&self) {
        let tokens: Vec<CancelToken> = self.in_flight.lock().values().cloned().collect();
        tokens.iter().for_each(CancelToken::cancel);
    }

    pub(super) fn register(&self, id: &Value) -> CancelToken {
        let token = CancelToken::new();
        self.in_flight.lock().insert(id.to_string(), token.clone());
        token
    }

    pub(super) fn unregister(&self, id: &Value) {
        self.in_flight.lock().remove(&id.to_string());
    }

    /// Whether chunks can be pushed on this connection.
    pub fn can_push(&self) -> bool {
        self.push
    }

    /// The MCP version negotiated by `initialize`, if any.
    pub fn protocol(&self) -> Option<&'static str> {
        *self.protocol.lock()
    }

    pub(super) fn set_protocol(&self, version: &'static str) {
        *self.protocol.lock() = Some(version);
    }

    pub(super) fn batches_allowed(&self) -> bool {
        self.protocol() == Some("2025-03-26")
    }
}
