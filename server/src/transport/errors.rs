//! HTTP responses that carry a JSON-RPC error (`/mcp`, the guards).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::rpc::{RpcError, error_response};

/// A JSON-RPC error in a non-200 response.
pub fn failure(status: StatusCode, error: &RpcError) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        error_response(&Value::Null, error),
    )
        .into_response()
}
