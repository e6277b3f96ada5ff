//! Anthropic's error shape: `{"type": "error", "error": {"type",
//! "message"}}`, its `type` named after the status, with the service's
//! status and `Retry-After` — except a full server, which is 529
//! `overloaded_error` here.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::super::error::{ErrorShape, respond};
use crate::service::ServiceError;

/// Anthropic's "overloaded" status.
const OVERLOADED: u16 = 529;

/// A service error answered in Anthropic's shape.
#[derive(Debug)]
pub struct AnthropicError(pub ServiceError);

impl From<ServiceError> for AnthropicError {
    fn from(err: ServiceError) -> Self {
        Self(err)
    }
}

/// Anthropic's error `type` for a status.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        OVERLOADED => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// What Anthropic's own message for a prompt over the context begins
/// with, and what Claude Code knows such an error by.
const PROMPT_TOO_LONG: &str = "prompt is too long: ";

/// A conversation over a size limit (the model's context, or
/// `limits.max_prompt_bytes`) worded as Anthropic words it: Claude Code
/// then tells its user the prompt is too long (or compacts the
/// conversation) and does not send it again, where other words for a 400
/// make it retry the request with fewer betas. Other errors are unchanged.
#[must_use]
pub fn prompt_too_long(err: ServiceError) -> ServiceError {
    match err {
        ServiceError::TooLarge { field, message } if field == "messages" => {
            ServiceError::TooLarge {
                field,
                message: format!("{PROMPT_TOO_LONG}{message}"),
            }
        }
        other => other,
    }
}

/// The error object (also an `error` event's data when a stream fails).
pub fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

impl ErrorShape for AnthropicError {
    /// The table's status, except that a full queue (or too many streams,
    /// or a shutdown under way) is 529. This is the one place an API
    /// changes the table's status: Anthropic's clients know an overloaded
    /// server by 529 `overloaded_error` (the SDK's `OverloadedError`,
    /// which it retries after `Retry-After`), not by 503.
    fn status(err: &ServiceError) -> StatusCode {
        let code = match err {
            ServiceError::Busy { .. } => OVERLOADED,
            other => other.status(),
        };
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn body(err: &ServiceError, status: StatusCode) -> Response {
        let body = error_body(error_type(status), &err.to_string());
        (status, axum::Json(body)).into_response()
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        respond::<Self>(&self.0)
    }
}

/// A neutral error (the guard, the keys, the body limit, an unknown path)
/// in Anthropic's shape.
pub fn shape(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(error_body(error_type(status), message))).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::header;

    use super::*;

    #[test]
    fn a_conversation_over_a_size_limit_is_a_prompt_that_is_too_long() {
        let over = ServiceError::TooLarge {
            field: "messages".into(),
            message: "the prompt is about 2420 tokens, more than the 256 tokens".into(),
        };
        let err = prompt_too_long(over);
        assert_eq!(
            err.to_string(),
            "prompt is too long: the prompt is about 2420 tokens, more than the 256 tokens"
        );
        assert_eq!(err.field(), Some("messages"));
        let response = AnthropicError(err).into_response();
        assert_eq!(response.status().as_u16(), 400);
        // Another field over its limit keeps its words.
        let images = ServiceError::TooLarge {
            field: "images".into(),
            message: "too many images".into(),
        };
        assert_eq!(prompt_too_long(images).to_string(), "too many images");
    }

    #[test]
    fn a_full_server_is_529_overloaded_and_the_rest_keep_the_tables_status() {
        let busy = AnthropicError(ServiceError::Busy {
            message: "server busy".into(),
            retry_after_ms: 1500,
        })
        .into_response();
        assert_eq!(busy.status().as_u16(), 529);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "2");
        for (err, status, kind) in [
            (
                ServiceError::invalid("max_tokens", "x"),
                400,
                "invalid_request_error",
            ),
            (
                ServiceError::UnknownModel {
                    name: "a".into(),
                    available: vec![],
                },
                404,
                "not_found_error",
            ),
            (
                ServiceError::Failed {
                    message: "x".into(),
                },
                500,
                "api_error",
            ),
        ] {
            let response = AnthropicError(err).into_response();
            assert_eq!(response.status().as_u16(), status);
            assert_eq!(error_type(response.status()), kind);
        }
        for (status, kind) in [
            (401, "authentication_error"),
            (403, "permission_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (405, "invalid_request_error"),
        ] {
            assert_eq!(error_type(StatusCode::from_u16(status).unwrap()), kind);
        }
    }
}
