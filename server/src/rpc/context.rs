//! What a method works with: the services below (engine, streams,
//! limits), the request it serves, and the shape of its result.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::value::RawValue;

use super::connection::{Connection, Notifier};
use super::{RpcError, codes};
use crate::service::streams::Consumer;
use crate::vocab::CancelToken;

/// The JSON-RPC methods' limits (config section `[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcLimits {
    /// Unfinished streams one connection may hold.
    pub max_streams_per_connection: usize,
    /// Texts one `embed` call may hold.
    pub max_embedding_inputs: usize,
}

/// The services the methods call: built once, shared by every dispatcher.
#[derive(Debug)]
pub struct Services {
    /// The generation service: generations, their streams, the models.
    pub service: Arc<crate::service::Service>,
    /// Limits the methods apply.
    pub limits: RpcLimits,
}

/// What a method sees of the request it serves.
#[derive(Debug)]
pub(super) struct RequestCtx<'a> {
    /// Where its notifications go, when the transport can carry them.
    pub notifier: Option<&'a Notifier>,
    /// Cancelled by `notifications/cancelled`; the response is then dropped.
    pub cancel: CancelToken,
    /// The connection the request came on.
    pub conn: &'a Connection,
    /// What a generating method reports for the request's log line.
    pub summary: Mutex<Option<Summary>>,
}

/// A generation's facts for the request log line.
#[derive(Debug, Clone)]
pub(super) struct Summary {
    pub model: String,
    pub finish_reason: &'static str,
    pub tokens: u32,
}

/// A method's result: pre-serialised JSON, an optional subscription, and
/// the stream it started, if any.
pub(super) struct Handled {
    pub result: Box<RawValue>,
    pub subscribe: Option<Consumer>,
    pub started: Option<String>,
}

pub(super) fn raw(value: &impl Serialize) -> Result<Box<RawValue>, RpcError> {
    serde_json::to_string(value)
        .and_then(RawValue::from_string)
        .map_err(|e| {
            RpcError::new(
                codes::INTERNAL_ERROR,
                format!("cannot encode the result: {e}"),
            )
        })
}

pub(super) fn done(value: &impl Serialize) -> Result<Handled, RpcError> {
    Ok(Handled {
        result: raw(value)?,
        subscribe: None,
        started: None,
    })
}
