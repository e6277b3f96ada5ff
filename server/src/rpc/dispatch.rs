//! The dispatcher: one entry point for every transport. It parses a
//! message, routes it to its method and returns the reply to write, plus
//! any push subscriptions the transport should start after writing it.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::connection::{Connection, Notifier};
use super::context::{Handled, RequestCtx, Services};
use super::message::{Incoming, classify, error_response, success_response};
use super::{RpcError, methods};
use crate::service::streams::Consumer;

/// What a transport writes back for one incoming message.
#[derive(Debug, Default)]
pub struct Reply {
    /// The response (or batch of responses), compact JSON; `None` when
    /// nothing is to be answered (notifications, responses).
    pub message: Option<String>,
    /// Streams to push on this connection, started after `message` is
    /// written so that the `run` response precedes its chunks.
    pub subscriptions: Vec<Consumer>,
    /// The ids of the streams the message started (`run` with `stream:
    /// true`), for a transport that advertises them.
    pub started: Vec<String>,
    /// The code of the error answered, for a transport whose status
    /// follows it (MCP's stateless revision over HTTP).
    pub error_code: Option<i64>,
}

impl Reply {
    fn error(id: &Value, error: &RpcError) -> Self {
        Self {
            message: Some(error_response(id, error)),
            error_code: Some(error.code),
            ..Self::default()
        }
    }
}

static NEXT_REQUEST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One line per request at info (ping at debug): never the prompt or a
/// stream id.
fn log_request(
    request_id: u64,
    transport: &'static str,
    method: &str,
    outcome: &Result<Handled, RpcError>,
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
        if let Some(reason) = error.reason {
            crate::metrics::rejected(reason);
        }
    }
    let ms = crate::vocab::round_ms(started.elapsed().as_secs_f64() * 1000.0);
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
    state: Arc<Services>,
}

impl Dispatcher {
    /// A dispatcher over the services the methods use.
    pub fn new(state: Arc<Services>) -> Self {
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
                Reply::error(&id, &RpcError::parse_error(err))
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
            return Reply::error(&Value::Null, &error);
        }
        if items.is_empty() {
            return Reply::error(&Value::Null, &RpcError::invalid_request("empty batch"));
        }
        let mut messages = Vec::new();
        let mut subscriptions = Vec::new();
        let mut started = Vec::new();
        for item in items {
            let reply = self.handle_one(conn, item, notifier).await;
            messages.extend(reply.message);
            subscriptions.extend(reply.subscriptions);
            started.extend(reply.started);
        }
        Reply {
            message: (!messages.is_empty()).then(|| format!("[{}]", messages.join(","))),
            subscriptions,
            started,
            error_code: None,
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
                    notifier: notifier.or(conn.notifier()),
                    cancel: conn.register(&id),
                    conn,
                    summary: Mutex::new(None),
                };
                let outcome = methods::call(&self.state, conn, &ctx, &method, params).await;
                conn.unregister(&id);
                let cancelled = ctx.cancel.is_cancelled();
                log_request(
                    request_id,
                    conn.transport(),
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
                        started: handled.started.into_iter().collect(),
                        error_code: None,
                    },
                    Err(error) => Reply::error(&id, &error),
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
                    Reply::error(&id, &error)
                } else {
                    Reply::default()
                }
            }
        }
    }
}
