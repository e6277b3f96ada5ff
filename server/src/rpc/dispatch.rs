//! The dispatcher: one entry point for every transport. It parses a
//! message, routes it to its method and returns the reply to write, plus
//! any push subscriptions the transport should start after writing it.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::message::{Incoming, classify, error_response, success_response};
use super::{RpcError, methods};
use crate::state::AppState;
use crate::stream::Consumer;

/// Per-connection protocol state.
#[derive(Debug)]
pub struct Connection {
    push: bool,
    // Synchronous lock: read or written once per initialize or batch.
    protocol: Mutex<Option<&'static str>>,
}

impl Connection {
    /// A connection; `push` when the transport can push notifications
    /// (WebSocket, stdio), false for HTTP request/response.
    pub fn new(push: bool) -> Self {
        Self {
            push,
            protocol: Mutex::new(None),
        }
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
    /// Invalid JSON is answered with -32700 and a `null` id.
    pub async fn handle_text(&self, conn: &Connection, text: &str) -> Reply {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        match serde_json::from_str::<Value>(text) {
            Ok(value) => self.handle_value(conn, value).await,
            Err(err) => Reply::message(error_response(&Value::Null, &RpcError::parse_error(err))),
        }
    }

    /// Handles one parsed message (or a batch, where negotiated).
    pub async fn handle_value(&self, conn: &Connection, value: Value) -> Reply {
        let Value::Array(items) = value else {
            return self.handle_one(conn, value).await;
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
            let reply = self.handle_one(conn, item).await;
            messages.extend(reply.message);
            subscriptions.extend(reply.subscriptions);
        }
        Reply {
            message: (!messages.is_empty()).then(|| format!("[{}]", messages.join(","))),
            subscriptions,
        }
    }

    async fn handle_one(&self, conn: &Connection, value: Value) -> Reply {
        match classify(value) {
            Incoming::Request { id, method, params } => {
                tracing::debug!(%method, "request");
                match methods::call(&self.state, conn, &method, params).await {
                    Ok(handled) => Reply {
                        message: Some(success_response(&id, &handled.result)),
                        subscriptions: handled.subscribe.into_iter().collect(),
                    },
                    Err(error) => Reply::message(error_response(&id, &error)),
                }
            }
            Incoming::Notification { method, params } => {
                methods::notify(&self.state, &method, params);
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
