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
    streams: Mutex<Vec<std::sync::Weak<crate::stream::Stream>>>,
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
    pub fn track_stream(&self, stream: &Arc<crate::stream::Stream>) {
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
    /// The connection the request came on.
    pub conn: &'a Connection,
    /// What a generating method reports for the request's log line.
    pub summary: Mutex<Option<Summary>>,
}

/// A generation's facts for the request log line.
#[derive(Debug, Clone)]
pub(super) struct Summary {
    pub model: String,
    pub finish_reason: &'static str,
    pub tokens: u32,
}

static NEXT_REQUEST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The rejection reason of an error code, for metrics.
fn rejection(code: i64) -> Option<&'static str> {
    use super::codes;
    match code {
        codes::SERVER_BUSY => Some("busy"),
        codes::INVALID_PARAMS => Some("invalid_params"),
        codes::TOO_LARGE => Some("too_large"),
        codes::MODEL_UNAVAILABLE => Some("model_unavailable"),
        codes::METHOD_NOT_FOUND => Some("unknown_method"),
        codes::INVALID_REQUEST | codes::PARSE_ERROR => Some("malformed"),
        _ => None,
    }
}

/// One line per request at info (ping at debug): never the prompt or a
/// stream id.
fn log_request(
    request_id: u64,
    transport: &'static str,
    method: &str,
    outcome: &Result<methods::Handled, RpcError>,
    cancelled: bool,
    ctx: &RequestCtx<'_>,
    started: std::time::Instant,
) {
    let result: &'static str = match outcome {
        _ if cancelled => "cancelled",
        Ok(_) => "ok",
        Err(_) => "error",
    };
    crate::metrics::request(transport, result);
    if let Err(error) = outcome {
        if let Some(reason) = rejection(error.code) {
            crate::metrics::rejected(reason);
        }
    }
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let code = outcome.as_ref().err().map(|e| e.code);
    let summary = ctx.summary.lock().clone();
    if method == "ping" {
        tracing::debug!(
            request_id,
            transport,
            method,
            outcome = result,
            ms,
            "request"
        );
    } else if let Some(s) = summary {
        tracing::info!(
            request_id, transport, method, outcome = result, model = %s.model,
            finish_reason = s.finish_reason, tokens = s.tokens, ms, "request"
        );
    } else {
        tracing::info!(
            request_id,
            transport,
            method,
            outcome = result,
            code,
            ms,
            "request"
        );
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
    /// Invalid JSON is answered with -32700, echoing the id when it can be
    /// read from the broken text, else `null`.
    pub async fn handle_text(&self, conn: &Connection, text: &str) -> Reply {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        match serde_json::from_str::<Value>(text) {
            Ok(value) => self.handle_value(conn, value, None).await,
            Err(err) => {
                crate::metrics::rejected("malformed");
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
                let started = std::time::Instant::now();
                let request_id = NEXT_REQUEST.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let ctx = RequestCtx {
                    notifier: notifier.or(conn.notifier.as_ref()),
                    cancel: conn.register(&id),
                    conn,
                    summary: Mutex::new(None),
                };
                let outcome = methods::call(&self.state, conn, &ctx, &method, params).await;
                conn.unregister(&id);
                let cancelled = ctx.cancel.is_cancelled();
                log_request(
                    request_id,
                    conn.transport,
                    &method,
                    &outcome,
                    cancelled,
                    &ctx,
                    started,
                );
                if cancelled {
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
                crate::metrics::rejected("malformed");
                if answer {
                    Reply::message(error_response(&id, &error))
                } else {
                    Reply::default()
                }
            }
        }
    }
}
