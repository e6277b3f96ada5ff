//! Ollama's error shape: `{"error": "…"}` with the service's status and
//! `Retry-After`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::super::error::{ErrorShape, respond};
use crate::service::ServiceError;

/// A service error answered in Ollama's shape.
#[derive(Debug)]
pub struct OllamaError(pub ServiceError);

impl From<ServiceError> for OllamaError {
    fn from(err: ServiceError) -> Self {
        Self(err)
    }
}

impl ErrorShape for OllamaError {
    fn body(err: &ServiceError, status: StatusCode) -> Response {
        shape(status, &err.to_string())
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        respond::<Self>(&self.0)
    }
}

/// An error (a neutral one too) in Ollama's shape.
pub fn shape(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}
