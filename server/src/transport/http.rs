//! `POST /mcp` and `DELETE /mcp`: JSON-RPC over HTTP, one message per
//! request body, which is also MCP's Streamable HTTP (see [`super::mcp_http`]
//! for sessions and header checks).
//!
//! JSON-RPC errors travel in a 200 response; only transport failures get
//! another status: 400 for a body that is not JSON or an unsupported
//! protocol version, 404 for an unknown session, 406/415 for bad headers,
//! 413 for a body over the size limit. A message with nothing to answer
//! gets 202. A `tools/call` with a progress token, from a client that
//! accepts `text/event-stream`, is answered with SSE: progress
//! notifications, then the response.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::mpsc;

use super::errors::{failure, failure_for};
use super::mcp_http::{
    SESSION_HEADER, accepts_sse, check_modern_headers, check_post_headers, is_modern,
    modern_status, request_id, version_header_is_modern,
};
use super::session::OUTBOUND_QUEUE;
use super::state::AppState;
use crate::rpc::{Connection, Dispatcher, Notifier, RpcError, codes, error_response, recover_id};

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok())
}

fn unknown_session(id: Option<&Value>) -> Response {
    failure_for(
        StatusCode::NOT_FOUND,
        id,
        &RpcError::invalid_request(
            "unknown or expired MCP session; initialize again without Mcp-Session-Id",
        ),
    )
}

fn wants_progress_stream(value: &Value) -> bool {
    value.get("method").and_then(Value::as_str) == Some("tools/call")
        && value.get("id").is_some()
        && value.pointer("/params/_meta/progressToken").is_some()
}

/// Handles `POST /mcp`.
pub async fn post_mcp(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            crate::metrics::rejected("too_large");
            let limit = state.settings.max_request_bytes;
            let error = RpcError::new(
                codes::TOO_LARGE,
                format!("request body over the limit of {limit} bytes (limits.max_request_bytes)"),
            );
            return failure(StatusCode::PAYLOAD_TOO_LARGE, &error);
        }
        Err(rejection) => {
            return failure(
                rejection.status(),
                &RpcError::parse_error(rejection.body_text()),
            );
        }
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return failure(
            StatusCode::BAD_REQUEST,
            &RpcError::parse_error("the body is not UTF-8"),
        );
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let parsed = serde_json::from_str::<Value>(text);
    let id = match &parsed {
        Ok(value) => request_id(value),
        Err(_) => recover_id(text),
    };
    if let Some(response) = check_post_headers(&headers, id.as_ref()) {
        return response;
    }
    let value: Value = match parsed {
        Ok(value) => value,
        Err(err) => {
            let id = id.unwrap_or(Value::Null);
            let body = error_response(&id, &RpcError::parse_error(err));
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response();
        }
    };
    if is_modern(&headers, &value) {
        return post_stateless(&state, &headers, value).await;
    }
    let session = match session_id(&headers) {
        Some(session) => match state.mcp_sessions.get(session) {
            Some(session) => Some(session),
            None => return unknown_session(id.as_ref()),
        },
        None => None,
    };
    let opens_session = session.is_none()
        && value.get("method").and_then(Value::as_str) == Some("initialize")
        && value.get("id").is_some();
    let conn = session.map_or_else(|| Arc::new(Connection::new(false)), |s| Arc::clone(&s.conn));
    let dispatcher = state.dispatcher();

    if wants_progress_stream(&value) && accepts_sse(&headers) {
        return sse_reply(dispatcher, conn, value);
    }
    let reply = dispatcher.handle_value(&conn, value, None).await;
    let Some(message) = reply.message else {
        return StatusCode::ACCEPTED.into_response();
    };
    let mut response = json_response(StatusCode::OK, message);
    // One stream started: name it, so that a balancer can pin the stream's
    // later calls to this node (docs/cluster.md).
    if let [stream_id] = reply.started.as_slice() {
        if let Ok(value) = HeaderValue::from_str(stream_id) {
            response.headers_mut().insert(super::STREAM_HEADER, value);
        }
    }
    if opens_session && conn.protocol().is_some() {
        let id = state.mcp_sessions.open(conn);
        if let Ok(value) = HeaderValue::from_str(&id) {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
    }
    response
}

/// A request of MCP's stateless revision: its headers checked against its
/// body, no session (an `Mcp-Session-Id` is not read), and the status
/// following the answer's error.
async fn post_stateless(state: &Arc<AppState>, headers: &HeaderMap, value: Value) -> Response {
    if let Some(refusal) = check_modern_headers(headers, &value) {
        return refusal;
    }
    let conn = Arc::new(Connection::new(false));
    let dispatcher = state.dispatcher();
    if wants_progress_stream(&value) && accepts_sse(headers) {
        return sse_reply(dispatcher, conn, value);
    }
    let reply = dispatcher.handle_value(&conn, value, None).await;
    match reply.message {
        Some(message) => json_response(modern_status(reply.error_code), message),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

/// Answers one request with an SSE stream: its notifications as they are
/// sent, then its response. If the client disconnects, the request's next
/// notification fails and its generation is aborted.
fn sse_reply(dispatcher: Dispatcher, conn: Arc<Connection>, value: Value) -> Response {
    let (tx, rx) = mpsc::channel::<String>(OUTBOUND_QUEUE);
    tokio::spawn(async move {
        let notifier: Notifier = Arc::new(tx);
        let reply = dispatcher.handle_value(&conn, value, Some(&notifier)).await;
        if let Some(message) = reply.message {
            notifier.send(message).await;
        }
    });
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let message = rx.recv().await?;
        Some((
            Ok::<_, std::convert::Infallible>(Event::default().event("message").data(message)),
            rx,
        ))
    });
    let mut response = Sse::new(events).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// Handles `DELETE /mcp`: ends the session named by `Mcp-Session-Id`. The
/// stateless revision has no sessions: 405.
pub async fn delete_mcp(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if version_header_is_modern(&headers) {
        return failure(
            StatusCode::METHOD_NOT_ALLOWED,
            &RpcError::invalid_request("MCP 2026-07-28 has no sessions to end"),
        );
    }
    match session_id(&headers) {
        None => failure(
            StatusCode::BAD_REQUEST,
            &RpcError::invalid_request("Mcp-Session-Id is required"),
        ),
        Some(id) if state.mcp_sessions.close(id) => StatusCode::NO_CONTENT.into_response(),
        Some(_) => unknown_session(None),
    }
}
