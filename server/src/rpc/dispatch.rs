//! The dispatcher: one entry point for every transport. It parses a
//! message, routes it to its method and returns the reply to write, plus
//! any push subscriptions the transport should start after writing it.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;

use super::message::{Incoming, classify, error_response, success_response};
use super::{RpcError, methods};
use crate::engine::CancelToken;
use crate::state::AppState;
use crate::stream::Consumer;

/// Where a request's notifications (MCP progress, pushed chunks) go: the
/// connection's outgoing queue, or one HTTP response's SSE stream.
pub type Notifier = mpsc::Sender<String>;

/// Per-connection protocol state.
#[derive(Debug)]
pub struct Connection {
    push: bool,
    notifier: Option<Notifier>,
    // Synchronous lock: read or written once per initialize or batch.
    protocol: Mutex<Option<&'static str>>,
    // Synchronous lock: one insert or removal per request, one lookup per
    // `notifications/cancelled`. Keys are the ids' JSON text, so 1 and "1"
    // differ.
    in_flight: Mutex<HashMap<String, CancelToken>>,
}

impl Connection {
    /// A connection; `push` when the transport can push notifications
    /// (WebSocket, stdio), false for HTTP request/response.
    pub fn new(push: bool) -> Self {
        Self {
            push,
            notifier: None,
            protocol: Mutex::new(None),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// A push connection whose notifications go to `notifier`.
    pub fn with_notifier(notifier: Notifier) -> Self {
        Self {
            notifier: Some(notifier),
            ..Self::new(true)
        }
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

    fn register(&self, id: &Value) -> CancelToken {
        let token = CancelToken::new();
        self.in_flight.lock().insert(id.to_string(), token.clone());
        token
    }

    fn unregister(&self, id: &Value) {
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

    fn batches_allowed(&self) -> bool {
        self.protocol() == Some("2025-03-26")
    }
}

/// What a transport writes back for one incoming message.
#[derive(Debug, Default)]
pub struct Reply {
    /// The response (or batch of responses), compact JSON; `None` when
    /// nothing is to be answered (notifications, responses).
    pub message: Option<String>,
    /// Streams to push on this connection, started after `message` is
    /// written so that the `run` response precedes its chunks.
    pub subscriptions: Vec<Consumer>,
}

impl Reply {
    fn message(message: String) -> Self {
        Self {
            message: Some(message),
            subscriptions: Vec::new(),
        }
    }
}

/// What a method sees of the request it serves.
#[derive(Debug)]
pub(super) struct RequestCtx<'a> {
    /// Where its notifications go, when the transport can carry them.
    pub notifier: Option<&'a Notifier>,
    /// Cancelled by `notifications/cancelled`; the response is then dropped.
    pub cancel: CancelToken,
}

/// Routes messages to methods. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    state: Arc<AppState>,
}

impl Dispatcher {
    /// A dispatcher over the server's state.
    pub fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }

    /// Handles one message given as text (a leading BOM is accepted).
    /// Invalid JSON is answered with -32700, echoing the id when it can be
    /// read from the broken text, else `null`.
    pub async fn handle_text(&self, conn: &Connection, text: &str) -> Reply {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        match serde_json::from_str::<Value>(text) {
            Ok(value) => self.handle_value(conn, value, None).await,
            Err(err) => {
                tracing::debug!(preview = %super::message::preview(text.as_bytes()), error = %err, "invalid JSON");
                let id = super::message::recover_id(text).unwrap_or(Value::Null);
                Reply::message(error_response(&id, &RpcError::parse_error(err)))
            }
        }
    }

    /// Handles one parsed message (or a batch, where negotiated).
    /// `notifier` overrides the connection's for this message's requests
    /// (an HTTP request answered with SSE).
    pub async fn handle_value(
        &self,
        conn: &Connection,
        value: Value,
        notifier: Option<&Notifier>,
    ) -> Reply {
        let Value::Array(items) = value else {
            return self.handle_one(conn, value, notifier).await;
        };
        if !conn.batches_allowed() {
            let error = RpcError::invalid_request(
                "batches are accepted only on connections that negotiated MCP 2025-03-26",
            );
            return Reply::message(error_response(&Value::Null, &error));
        }
        if items.is_empty() {
            return Reply::message(error_response(
                &Value::Null,
                &RpcError::invalid_request("empty batch"),
            ));
        }
        let mut messages = Vec::new();
        let mut subscriptions = Vec::new();
        for item in items {
            let reply = self.handle_one(conn, item, notifier).await;
            messages.extend(reply.message);
            subscriptions.extend(reply.subscriptions);
        }
        Reply {
            message: (!messages.is_empty()).then(|| format!("[{}]", messages.join(","))),
            subscriptions,
        }
    }

    async fn handle_one(
        &self,
        conn: &Connection,
        value: Value,
        notifier: Option<&Notifier>,
    ) -> Reply {
        match classify(value) {
            Incoming::Request { id, method, params } => {
                tracing::debug!(%method, "request");
                let ctx = RequestCtx {
                    notifier: notifier.or(conn.notifier.as_ref()),
                    cancel: conn.register(&id),
                };
                let outcome = methods::call(&self.state, conn, &ctx, &method, params).await;
                conn.unregister(&id);
                if ctx.cancel.is_cancelled() {
                    // Cancelled by the client: no response follows.
                    return Reply::default();
                }
                match outcome {
                    Ok(handled) => Reply {
                        message: Some(success_response(&id, &handled.result)),
                        subscriptions: handled.subscribe.into_iter().collect(),
                    },
                    Err(error) => Reply::message(error_response(&id, &error)),
                }
            }
            Incoming::Notification { method, params } => {
                methods::notify(&self.state, conn, &method, params);
                Reply::default()
            }
            Incoming::Response => Reply::default(),
            Incoming::Invalid { id, error, answer } => {
                if answer {
                    Reply::message(error_response(&id, &error))
                } else {
                    Reply::default()
                }
            }
        }
    }
}
