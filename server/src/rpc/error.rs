//! Error codes (PROTOCOL §4) and the JSON-RPC error object. Every error a
//! method meets below the protocol is a [`ServiceError`] and is mapped
//! here, once: the code and data are this protocol's, the metric label is
//! the service's table's. The protocol's own errors (malformed messages,
//! unknown methods) carry their labels from their constructors.

use serde::Serialize;
use serde_json::{Value, json};

use crate::service::ServiceError;
use crate::vocab::{EndError, EndErrorKind};

/// JSON-RPC error codes used by the server.
pub mod codes {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Valid JSON that is not a request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad parameters (`data.field` names the parameter).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Stream not found.
    pub const STREAM_NOT_FOUND: i64 = -32001;
    /// Server busy (`data.retry_after_ms`).
    pub const SERVER_BUSY: i64 = -32002;
    /// Model unavailable.
    pub const MODEL_UNAVAILABLE: i64 = -32003;
    /// Generation failed in the runtime.
    pub const GENERATION_FAILED: i64 = -32004;
    /// Stream expired.
    pub const STREAM_EXPIRED: i64 = -32005;
    /// Stream in a state that does not allow the call.
    pub const INVALID_STATE: i64 = -32006;
    /// Request too large.
    pub const TOO_LARGE: i64 = -32007;
    /// Unauthorized.
    pub const UNAUTHORIZED: i64 = -32008;
}

/// The code an end chunk's error carries on the wire: every way a
/// generation can fail after it started is -32004.
pub fn end_error_code(kind: EndErrorKind) -> i64 {
    match kind {
        EndErrorKind::Runtime | EndErrorKind::Internal | EndErrorKind::BufferLimit => {
            codes::GENERATION_FAILED
        }
    }
}

impl From<&EndError> for RpcError {
    fn from(error: &EndError) -> Self {
        Self::new(end_error_code(error.kind), error.message.clone())
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// A message for people.
    pub message: String,
    /// Machine-readable details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// The metric label of a refusal, when the service chose it.
    #[serde(skip)]
    pub reason: Option<&'static str>,
}

impl RpcError {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
            reason: None,
        }
    }

    /// Adds `data`.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32700.
    pub fn parse_error(detail: impl std::fmt::Display) -> Self {
        Self::new(codes::PARSE_ERROR, format!("Parse error: {detail}")).labelled("malformed")
    }

    /// -32600.
    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(codes::INVALID_REQUEST, format!("Invalid request: {detail}"))
            .labelled("malformed")
    }

    /// -32601. A tool's name used as a method gets a hint.
    pub fn method_not_found(method: &str) -> Self {
        let hint = if method == "generate" {
            ": `generate` is an MCP tool; call it with `tools/call` \
             {\"name\": \"generate\", \"arguments\": {\"prompt\": ...}}, or use the method `run`"
        } else {
            ""
        };
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {method}{hint}"),
        )
        .labelled("unknown_method")
    }

    /// -32602 with `data.field`: the service's refusal of a field.
    pub fn invalid_params(field: &str, message: impl Into<String>) -> Self {
        ServiceError::invalid(field, message).into()
    }

    fn labelled(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }
}

impl From<ServiceError> for RpcError {
    fn from(err: ServiceError) -> Self {
        let reason = err.reason();
        let message = err.to_string();
        let error = match &err {
            ServiceError::Invalid { field, .. } | ServiceError::Unsupported { field, .. } => {
                Self::new(codes::INVALID_PARAMS, message).with_data(json!({ "field": field }))
            }
            ServiceError::TooLarge { field, .. } => {
                Self::new(codes::TOO_LARGE, message).with_data(json!({ "field": field }))
            }
            ServiceError::UnknownModel { name: model, .. }
            | ServiceError::Unavailable { model, .. } => {
                Self::new(codes::MODEL_UNAVAILABLE, message).with_data(json!({ "model": model }))
            }
            ServiceError::Busy { retry_after_ms, .. } => Self::new(codes::SERVER_BUSY, message)
                .with_data(json!({ "retry_after_ms": retry_after_ms })),
            ServiceError::Failed { .. } => Self::new(codes::GENERATION_FAILED, message),
            ServiceError::Expired => Self::new(codes::STREAM_EXPIRED, "stream expired"),
            ServiceError::NoStream { expired: true, .. } => {
                Self::new(codes::STREAM_EXPIRED, message)
            }
            ServiceError::NoStream { expired: false, .. } => {
                Self::new(codes::STREAM_NOT_FOUND, message)
            }
        };
        Self { reason, ..error }
    }
}
