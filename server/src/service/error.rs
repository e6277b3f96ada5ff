//! `ServiceError`: every way a generation request can be refused or fail,
//! and the one table that decides, for all APIs alike, its HTTP status,
//! its `Retry-After`, and its metric label. Each API only chooses the
//! shape of the body (and, for JSON-RPC, the code).

use crate::engine::{EngineError, ValidationError};
use crate::stream::StreamError;

/// Why a request was refused or its generation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// A field is malformed or out of range.
    #[error("{message}")]
    Invalid {
        /// The request field, as the API names it.
        field: String,
        /// What is wrong, naming the field and the bound.
        message: String,
    },
    /// An option the server does not implement (refused, never ignored).
    #[error("{message}")]
    Unsupported {
        /// The request field.
        field: String,
        /// What is not supported, and what to do instead.
        message: String,
    },
    /// The input is over a size limit.
    #[error("{message}")]
    TooLarge {
        /// The request field.
        field: String,
        /// The size and the limit, with its key.
        message: String,
    },
    /// No model has this name.
    #[error("the model `{name}` does not exist; the models are: {}", available.join(", "))]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The models there are.
        available: Vec<String>,
    },
    /// The model exists but cannot serve (failed, or not loadable).
    #[error("model `{model}` is unavailable: {reason}")]
    Unavailable {
        /// The model.
        model: String,
        /// Why.
        reason: String,
    },
    /// No room now (a full queue, too many streams, shutting down).
    #[error("{message}")]
    Busy {
        /// What is full.
        message: String,
        /// When to try again.
        retry_after_ms: u64,
    },
    /// The generation started and failed (the runtime, a limit).
    #[error("{message}")]
    Failed {
        /// Why.
        message: String,
    },
    /// The generation's stream expired before it was read to the end.
    #[error("the generation expired")]
    Expired,
    /// A stream named by its id is not there: it never was, was read to
    /// its end and forgotten, or expired (`expired`).
    #[error("{message}")]
    NoStream {
        /// Whether it was there and expired.
        expired: bool,
        /// What happened to it.
        message: String,
    },
}

impl ServiceError {
    /// A malformed or out-of-range field.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// An option the server does not implement.
    pub fn unsupported(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Unsupported {
            field: field.into(),
            message: message.into(),
        }
    }

    /// `what` (`field`, or a value of it) refused: the runtime's token
    /// probabilities are not read.
    pub fn no_token_probabilities(field: &str, what: &str) -> Self {
        Self::unsupported(
            field,
            format!("{what} is not supported: the runtime does not report token probabilities"),
        )
    }

    /// The same error about `to` where it named the field `from` (an API
    /// whose request calls the prompt by another name); the message's
    /// mentions of `` `from` `` name `to` too.
    #[must_use]
    pub fn renamed(self, from: &str, to: &str) -> Self {
        let rename = |message: String| message.replace(&format!("`{from}`"), &format!("`{to}`"));
        match self {
            Self::Invalid { field, message } if field == from => Self::Invalid {
                field: to.into(),
                message: rename(message),
            },
            Self::TooLarge { field, message } if field == from => Self::TooLarge {
                field: to.into(),
                message: rename(message),
            },
            other => other,
        }
    }

    /// The request field the error is about, if one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. }
            | Self::Unsupported { field, .. }
            | Self::TooLarge { field, .. } => Some(field),
            Self::UnknownModel { .. } | Self::Unavailable { .. } => Some("model"),
            _ => None,
        }
    }

    /// The HTTP status (the same on every HTTP API).
    pub fn status(&self) -> u16 {
        match self {
            Self::Invalid { .. } | Self::Unsupported { .. } | Self::TooLarge { .. } => 400,
            Self::UnknownModel { .. } | Self::NoStream { .. } => 404,
            Self::Unavailable { .. } | Self::Busy { .. } => 503,
            Self::Failed { .. } | Self::Expired => 500,
        }
    }

    /// Seconds a client should wait before trying again (`Retry-After`).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::Busy { retry_after_ms, .. } => Some(retry_after_ms.div_ceil(1000).max(1)),
            _ => None,
        }
    }

    /// The milliseconds behind [`ServiceError::retry_after_secs`].
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Self::Busy { retry_after_ms, .. } => Some(*retry_after_ms),
            _ => None,
        }
    }

    /// The metric label of a refusal (`rkllm_rejected_requests_total`);
    /// `None` for a generation that ran and failed.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { .. } => Some("invalid_params"),
            Self::Unsupported { .. } => Some("unsupported"),
            Self::TooLarge { .. } => Some("too_large"),
            Self::UnknownModel { .. } | Self::Unavailable { .. } => Some("model_unavailable"),
            Self::Busy { .. } => Some("busy"),
            Self::Failed { .. } | Self::Expired | Self::NoStream { .. } => None,
        }
    }

    /// Counts a refusal in the metrics (call once, where it is answered).
    pub fn record(&self) {
        if let Some(reason) = self.reason() {
            crate::metrics::rejected(reason);
        }
    }
}

impl From<ValidationError> for ServiceError {
    fn from(err: ValidationError) -> Self {
        match err {
            ValidationError::Invalid { field, message } => Self::invalid(field, message),
            ValidationError::TooLarge { field, message } => Self::TooLarge {
                field: field.into(),
                message,
            },
            ValidationError::UnknownModel { name, available } => {
                Self::UnknownModel { name, available }
            }
        }
    }
}

impl From<StreamError> for ServiceError {
    fn from(err: StreamError) -> Self {
        match err {
            StreamError::TooMany { .. } => Self::Busy {
                message: format!("server busy: {err}"),
                retry_after_ms: 1000,
            },
            StreamError::ShuttingDown => Self::Busy {
                message: err.to_string(),
                retry_after_ms: 5000,
            },
            StreamError::Expired | StreamError::NotFound => Self::NoStream {
                expired: err == StreamError::Expired,
                message: err.to_string(),
            },
        }
    }
}

impl From<EngineError> for ServiceError {
    fn from(err: EngineError) -> Self {
        match err {
            EngineError::Invalid(v) => v.into(),
            EngineError::Stream(s) => s.into(),
            EngineError::QueueFull { retry_after_ms, .. } => Self::Busy {
                message: err.to_string(),
                retry_after_ms,
            },
            EngineError::Unavailable { model, reason } => Self::Unavailable { model, reason },
            EngineError::Load(e) => Self::Unavailable {
                model: String::new(),
                reason: e.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one table: status, Retry-After and label of every kind.
    #[test]
    fn every_error_has_one_status_retry_and_label() {
        let cases = [
            (
                ServiceError::invalid("stop", "x"),
                400,
                None,
                Some("invalid_params"),
            ),
            (
                ServiceError::unsupported("n", "x"),
                400,
                None,
                Some("unsupported"),
            ),
            (
                ServiceError::TooLarge {
                    field: "prompt".into(),
                    message: "x".into(),
                },
                400,
                None,
                Some("too_large"),
            ),
            (
                ServiceError::UnknownModel {
                    name: "a".into(),
                    available: vec!["b".into()],
                },
                404,
                None,
                Some("model_unavailable"),
            ),
            (
                ServiceError::Unavailable {
                    model: "a".into(),
                    reason: "x".into(),
                },
                503,
                None,
                Some("model_unavailable"),
            ),
            (
                ServiceError::Busy {
                    message: "x".into(),
                    retry_after_ms: 1500,
                },
                503,
                Some(2),
                Some("busy"),
            ),
            (
                ServiceError::Failed {
                    message: "x".into(),
                },
                500,
                None,
                None,
            ),
            (ServiceError::Expired, 500, None, None),
            (
                ServiceError::NoStream {
                    expired: false,
                    message: "stream not found".into(),
                },
                404,
                None,
                None,
            ),
        ];
        for (err, status, retry, label) in cases {
            assert_eq!(err.status(), status, "{err:?}");
            assert_eq!(err.retry_after_secs(), retry, "{err:?}");
            assert_eq!(err.reason(), label, "{err:?}");
        }
        let full: ServiceError = EngineError::QueueFull {
            model: "m".into(),
            queue_len: 1,
            retry_after_ms: 100,
        }
        .into();
        assert_eq!((full.status(), full.retry_after_secs()), (503, Some(1)));
    }

    #[test]
    fn a_renamed_error_names_the_apis_field_in_its_message_too() {
        let err = ServiceError::invalid("stop", "each `stop` string must be 1 to 256 bytes")
            .renamed("stop", "stop_sequences");
        assert_eq!(err.field(), Some("stop_sequences"));
        assert_eq!(
            err.to_string(),
            "each `stop_sequences` string must be 1 to 256 bytes"
        );
        let other = ServiceError::invalid("top_k", "`stop` aside").renamed("stop", "x");
        assert_eq!(other, ServiceError::invalid("top_k", "`stop` aside"));
    }
}
