//! Ollama's error shape: `{"error": "…"}` with the service's status and
//! `Retry-After`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::service::ServiceError;

/// A service error answered in Ollama's shape.
#[derive(Debug)]
pub struct OllamaError(pub ServiceError);

impl From<ServiceError> for OllamaError {
    fn from(err: ServiceError) -> Self {
        Self(err)
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let err = self.0;
        err.record();
        let status =
            StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = shape(status, &err.to_string());
        if let Some(secs) = err.retry_after_secs()
            && let Ok(value) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// An error (a neutral one too) in Ollama's shape.
pub fn shape(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}
