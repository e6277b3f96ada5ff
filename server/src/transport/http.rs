//! `POST /mcp`: one JSON-RPC message per request body (PROTOCOL §1).
//!
//! JSON-RPC errors travel in a 200 response; only transport failures get
//! another status: 400 for a body that is not JSON, 413 for one over the
//! size limit. A notification (nothing to answer) gets 202 and no body.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::rpc::{Connection, Dispatcher, RpcError, codes, error_response};
use crate::state::AppState;

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn failure(status: StatusCode, error: &RpcError) -> Response {
    json_response(status, error_response(&Value::Null, error))
}

/// Handles `POST /mcp`.
pub async fn post_mcp(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let limit = state.config.limits.max_request_bytes;
            let error = RpcError::new(
                codes::TOO_LARGE,
                format!("request body over the limit of {limit} bytes"),
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
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(err) => return failure(StatusCode::BAD_REQUEST, &RpcError::parse_error(err)),
    };
    let conn = Connection::new(false);
    let reply = Dispatcher::new(state).handle_value(&conn, value).await;
    match reply.message {
        Some(message) => json_response(StatusCode::OK, message),
        None => StatusCode::ACCEPTED.into_response(),
    }
}
