//! OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`
//! with the service's status and `Retry-After`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::super::error::{ErrorShape, respond};
use crate::service::ServiceError;

/// A service error answered in OpenAI's shape.
#[derive(Debug)]
pub struct OpenAiError(pub ServiceError);

impl From<ServiceError> for OpenAiError {
    fn from(err: ServiceError) -> Self {
        Self(err)
    }
}

/// OpenAI's `type` and `code` of an error.
fn kind_and_code(err: &ServiceError) -> (&'static str, Option<&'static str>) {
    match err {
        ServiceError::Invalid { .. } => ("invalid_request_error", None),
        ServiceError::Unsupported { .. } => {
            ("invalid_request_error", Some("unsupported_parameter"))
        }
        ServiceError::TooLarge { field, .. }
            if field == "prompt" || field == "messages" || field == "input" =>
        {
            ("invalid_request_error", Some("context_length_exceeded"))
        }
        ServiceError::TooLarge { .. } => ("invalid_request_error", None),
        ServiceError::UnknownModel { .. } => ("invalid_request_error", Some("model_not_found")),
        ServiceError::Unavailable { .. } => ("server_error", Some("model_unavailable")),
        ServiceError::Busy { .. } => ("server_error", Some("server_busy")),
        ServiceError::Failed { .. } | ServiceError::Expired => ("server_error", None),
        ServiceError::NoStream { .. } => ("invalid_request_error", None),
    }
}

/// The error object (also an SSE event's data when a stream fails).
pub fn error_body(err: &ServiceError) -> serde_json::Value {
    let (kind, code) = kind_and_code(err);
    json!({"error": {"message": err.to_string(), "type": kind, "param": err.field(), "code": code}})
}

impl ErrorShape for OpenAiError {
    fn body(err: &ServiceError, status: StatusCode) -> Response {
        (status, axum::Json(error_body(err))).into_response()
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        respond::<Self>(&self.0)
    }
}

/// A neutral error (the guard, the keys, the body limit, an unknown path)
/// in OpenAI's shape.
pub fn shape(status: StatusCode, message: &str) -> Response {
    let (kind, code) = match status {
        StatusCode::UNAUTHORIZED => ("authentication_error", Some("invalid_api_key")),
        StatusCode::FORBIDDEN => ("permission_error", None),
        StatusCode::NOT_FOUND => ("invalid_request_error", Some("not_found")),
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
            ("server_error", Some("server_busy"))
        }
        s if s.is_server_error() => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    (
        status,
        axum::Json(
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
        ),
    )
        .into_response()
}
