//! Error responses on the HTTP routes. Each API answers in its own shape
//! from its own routes: its handlers write their errors themselves, and
//! what answers before or around them — the browser guard, the API keys,
//! axum's own refusals (the body limit, a method not allowed), an unknown
//! path — answers with a *neutral* error (a status and a message), which
//! the API's shape layer, the outermost layer of its routes, writes in the
//! API's shape. No path is ever guessed at.

use axum::extract::{OriginalUri, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::rpc::{RpcError, codes, error_response};

/// Marks a response as a neutral error: its body is the message, for the
/// shape layer to write in its API's shape.
#[derive(Debug, Clone)]
pub struct Neutral(pub String);

/// A neutral error: `status` and `message`, shaped by the API's layer.
pub fn neutral(status: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    let mut response = (status, message.clone()).into_response();
    response.extensions_mut().insert(Neutral(message));
    response
}

/// How an API writes an error with a status and a message.
pub type Shape = fn(StatusCode, &str) -> Response;

/// The state of a shape layer: the API's shape, and the body limit (named
/// in a 413).
#[derive(Debug, Clone, Copy)]
pub struct Shaping {
    /// The API's shape.
    pub shape: Shape,
    /// `limits.max_request_bytes`.
    pub max_request_bytes: usize,
}

/// The shape layer of an API's routes: a neutral error, or an error that
/// is not JSON (axum's refusals), is written again in the API's shape,
/// with the text it had (for 413, the limit and its key); its
/// `Retry-After`, `Allow`, `WWW-Authenticate` and `Connection` headers are kept.
pub async fn shape(State(shaping): State<Shaping>, request: Request, next: Next) -> Response {
    let deadline = request
        .extensions()
        .get::<super::body_deadline::Expired>()
        .cloned();
    let mut response = next.run(request).await;
    // A body that came too slowly is a 408, whatever the handler made of
    // the failed read, and its connection closes (the rest is not read).
    if let Some(late) = deadline.and_then(|d| d.error()) {
        crate::metrics::rejected("body_timeout");
        tracing::debug!(error = %late, "request refused");
        response = neutral(StatusCode::REQUEST_TIMEOUT, late.to_string());
        response.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let marked = response.extensions().get::<Neutral>().cloned();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if marked.is_none() && is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let message = match marked {
        Some(Neutral(message)) => message,
        None if parts.status == StatusCode::PAYLOAD_TOO_LARGE => {
            // The body limit's own refusal: counted here, where it is known.
            crate::metrics::rejected("too_large");
            format!(
                "request body over the limit of {} bytes (limits.max_request_bytes)",
                shaping.max_request_bytes
            )
        }
        None => {
            let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
            let text = String::from_utf8_lossy(&text).trim().to_owned();
            if text.is_empty() {
                parts
                    .status
                    .canonical_reason()
                    .unwrap_or("request failed")
                    .to_owned()
            } else {
                text
            }
        }
    };
    let mut shaped = (shaping.shape)(parts.status, &message);
    for name in [
        header::RETRY_AFTER,
        header::ALLOW,
        header::WWW_AUTHENTICATE,
        header::CONNECTION,
    ] {
        if let Some(value) = parts.headers.get(&name) {
            shaped.headers_mut().insert(name, value.clone());
        }
    }
    shaped
}

/// The JSON-RPC shape (for `/mcp`, `/ws`, `/metrics` and the plain
/// endpoints): an error object with the code the status stands for.
pub fn rpc_shape(status: StatusCode, message: &str) -> Response {
    let code = match status {
        StatusCode::UNAUTHORIZED => codes::UNAUTHORIZED,
        StatusCode::PAYLOAD_TOO_LARGE => codes::TOO_LARGE,
        StatusCode::NOT_FOUND => codes::METHOD_NOT_FOUND,
        _ => codes::INVALID_REQUEST,
    };
    failure(status, &RpcError::new(code, message))
}

/// The answer to a path no route serves: a neutral 404 that says where
/// each API lives (the API's shape layer writes it).
pub async fn not_found(method: Method, uri: OriginalUri) -> Response {
    let path = uri.path();
    neutral(
        StatusCode::NOT_FOUND,
        format!(
            "no endpoint {method} {path}: the OpenAI API is under /v1 (models, chat/completions, \
             completions, embeddings), the Ollama API under /api (version, tags, ps, show, \
             generate, chat, embed, pull, delete), JSON-RPC and MCP at /mcp and /ws; see \
             docs/openai-ollama.md"
        ),
    )
}

/// A JSON-RPC error in a non-200 response, for no request the server
/// could read: without an id (MCP allows no null id).
pub fn failure(status: StatusCode, error: &RpcError) -> Response {
    failure_for(status, None, error)
}

/// A JSON-RPC error in a non-200 response to the request with `id`, when
/// it could be read (else without one).
pub fn failure_for(status: StatusCode, id: Option<&Value>, error: &RpcError) -> Response {
    let body = match id {
        Some(id) => error_response(id, error),
        None => serde_json::json!({"jsonrpc": "2.0", "error": error}).to_string(),
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
